//! The engine's volumes as NBD exports.

use crate::nbd::{Export, PayloadBuf, ZeroFlags};
use bytes::Bytes;
use futures::future::BoxFuture;
use nbraid_core::{Buf, Volume, VolumeError};
use std::io;
use std::sync::Arc;

/// Serves one [`Volume`].
pub struct VolumeExport {
    volume: Arc<Volume>,
    read_only: bool,
    description: String,
}

impl VolumeExport {
    pub fn new(volume: Arc<Volume>, read_only: bool, description: String) -> VolumeExport {
        VolumeExport {
            volume,
            read_only,
            description,
        }
    }
}

/// Lets a read's aligned buffer go out on the socket without a copy.
struct BufOwner(Buf);

impl AsRef<[u8]> for BufOwner {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// A write's payload, received straight into the aligned buffer the engine writes from.
struct WriteBuf(Buf);

impl PayloadBuf for WriteBuf {
    fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.0
    }
    fn into_bytes(self: Box<Self>) -> Bytes {
        Bytes::from_owner(BufOwner(self.0))
    }
    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any + Send> {
        self
    }
}

/// Engine errors as the `io::Error`s the NBD layer maps to protocol errors.
fn to_io(e: VolumeError) -> io::Error {
    let kind = match &e {
        VolumeError::Misaligned { .. } | VolumeError::TooLong { .. } => io::ErrorKind::InvalidInput,
        VolumeError::OutOfRange { .. } => io::ErrorKind::InvalidInput,
        _ => io::ErrorKind::Other,
    };
    io::Error::new(kind, e)
}

impl Export for VolumeExport {
    fn size(&self) -> u64 {
        self.volume.capacity()
    }

    fn min_block(&self) -> u32 {
        self.volume.block_size() as u32
    }

    fn preferred_block(&self) -> u32 {
        let width = self.volume.geometry().full_stripe_width().unwrap_or(4096);
        width.min(u64::from(u32::MAX)) as u32
    }

    fn read_only(&self) -> bool {
        self.read_only
    }

    fn description(&self) -> String {
        self.description.clone()
    }

    fn read(&self, offset: u64, len: u32) -> BoxFuture<'_, io::Result<Bytes>> {
        Box::pin(async move {
            let buf = self
                .volume
                .read(offset, u64::from(len))
                .await
                .map_err(to_io)?;
            Ok(Bytes::from_owner(BufOwner(buf)))
        })
    }

    fn write(&self, offset: u64, data: Bytes, fua: bool) -> BoxFuture<'_, io::Result<()>> {
        Box::pin(async move {
            // Member I/O wants aligned buffers (O_DIRECT); the socket's payload is not.
            let buf = Buf::copy_from(&data);
            drop(data);
            self.volume
                .write(offset, buf, fua)
                .await
                .map(drop)
                .map_err(to_io)
        })
    }

    fn payload_buffer(&self, len: usize) -> Option<Box<dyn PayloadBuf>> {
        // `len` is a validated write length (at most `MAX_PAYLOAD`); pooled memory, with
        // stale contents that the payload overwrites.
        Some(Box::new(WriteBuf(Buf::new(len))))
    }

    fn write_payload(
        &self,
        offset: u64,
        data: Box<dyn PayloadBuf>,
        fua: bool,
    ) -> BoxFuture<'_, io::Result<()>> {
        let buf = match data.into_any().downcast::<WriteBuf>() {
            Ok(b) => b.0,
            Err(other) => match other.downcast::<Vec<u8>>() {
                Ok(v) => Buf::copy_from(&v),
                Err(_) => {
                    let e = io::Error::other("foreign payload buffer");
                    return Box::pin(futures::future::ready(Err(e)));
                }
            },
        };
        Box::pin(async move {
            self.volume
                .write(offset, buf, fua)
                .await
                .map(drop)
                .map_err(to_io)
        })
    }

    fn flush(&self) -> BoxFuture<'_, io::Result<()>> {
        Box::pin(async move { self.volume.flush().await.map_err(to_io) })
    }

    fn trim(&self, offset: u64, len: u32, fua: bool) -> BoxFuture<'_, io::Result<()>> {
        Box::pin(async move {
            self.volume
                .trim(offset, u64::from(len))
                .await
                .map_err(to_io)?;
            if fua {
                self.volume.flush().await.map_err(to_io)?;
            }
            Ok(())
        })
    }

    fn write_zeroes(
        &self,
        offset: u64,
        len: u32,
        flags: ZeroFlags,
    ) -> BoxFuture<'_, io::Result<()>> {
        Box::pin(async move {
            self.volume
                .write_zeroes(offset, u64::from(len), flags.fua)
                .await
                .map_err(to_io)
        })
    }
}
