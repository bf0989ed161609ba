//! What the array's components act on: the engine volume, the records, the write-intent
//! bitmap and the log's places — borrowed from the `Array` that owns them, so each
//! component (heal, re-add, background resync) owns only its own state and is handed the
//! rest explicitly.

use super::bitmap::Bitmap;
use super::error::ArrayError;
use super::intent::Intent;
use super::ppl_area::PplPlaces;
use super::ranges::{piece_bytes, PIECE_BYTES};
use super::records::Records;
use super::Uuid;
use crate::volume::Volume;

#[derive(Clone, Copy)]
pub(super) struct Parts<'a> {
    pub(super) volume: &'a Volume,
    pub(super) records: &'a Records,
    /// `None`: the volume has no bitmap.
    pub(super) bitmap: Option<&'a Bitmap>,
    pub(super) ppl: &'a PplPlaces,
}

impl<'a> Parts<'a> {
    pub(super) fn name(&self) -> &'a str {
        self.records.name()
    }

    pub(super) fn id(&self) -> Uuid {
        self.records.id()
    }

    pub(super) fn intent(&self) -> Option<&'a Intent> {
        self.bitmap.map(Bitmap::intent)
    }

    /// An operator's request refused, and why.
    pub(super) fn refuse(&self, detail: impl Into<String>) -> ArrayError {
        ArrayError::Metadata {
            volume: self.name().to_string(),
            detail: detail.into(),
        }
    }

    /// The full stripe (at least a block; a block without parity groups): the unit a
    /// re-add's ranges are widened to.
    pub(super) fn stripe_bytes(&self) -> u64 {
        let v = self.volume;
        v.geometry()
            .full_stripe_width()
            .unwrap_or(v.block_size())
            .max(v.block_size())
    }

    /// The full stripe (at least a block; [`PIECE_BYTES`] without parity groups) and the
    /// resync's piece: whole full stripes, about [`PIECE_BYTES`].
    pub(super) fn resync_piece(&self) -> (u64, u64) {
        let width = self
            .volume
            .geometry()
            .full_stripe_width()
            .unwrap_or(PIECE_BYTES)
            .max(self.volume.block_size());
        (width, piece_bytes(width))
    }
}
