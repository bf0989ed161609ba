//! Why an array could not be created, opened or changed.

use super::AssembleError;
use crate::error::VolumeError;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum ArrayError {
    #[error(transparent)]
    Assemble(#[from] AssembleError),
    #[error(transparent)]
    Volume(#[from] VolumeError),
    #[error("volume `{volume}`: {detail}")]
    Metadata { volume: String, detail: String },
    /// A read-only start ([`super::Array::open_read_only`]) refused, saying why.
    #[error("{0}")]
    ReadOnly(String),
}
