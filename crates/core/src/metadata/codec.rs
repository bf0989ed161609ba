//! Little-endian cursor reading and writing, bounds-checked: every read names what it was
//! reading when the bytes run out.

use super::{MetadataError, MetadataResult};

pub(super) struct ByteReader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> ByteReader<'a> {
    pub(super) fn new(bytes: &'a [u8]) -> ByteReader<'a> {
        ByteReader { bytes, at: 0 }
    }

    pub(super) fn position(&self) -> usize {
        self.at
    }

    pub(super) fn remaining(&self) -> usize {
        self.bytes.len() - self.at
    }

    pub(super) fn take(&mut self, n: usize, what: &'static str) -> MetadataResult<&'a [u8]> {
        if self.remaining() < n {
            return Err(MetadataError::Truncated {
                what,
                need: n,
                have: self.remaining(),
            });
        }
        let s = &self.bytes[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }

    pub(super) fn array<const N: usize>(&mut self, what: &'static str) -> MetadataResult<[u8; N]> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N, what)?);
        Ok(a)
    }

    pub(super) fn u8(&mut self, what: &'static str) -> MetadataResult<u8> {
        Ok(self.take(1, what)?[0])
    }

    pub(super) fn u32(&mut self, what: &'static str) -> MetadataResult<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    pub(super) fn u64(&mut self, what: &'static str) -> MetadataResult<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }
}

#[derive(Default)]
pub(super) struct Writer {
    pub(super) bytes: Vec<u8>,
}

impl Writer {
    pub(super) fn bytes(&mut self, b: &[u8]) {
        self.bytes.extend_from_slice(b);
    }
    pub(super) fn u8(&mut self, v: u8) {
        self.bytes.push(v);
    }
    pub(super) fn u32(&mut self, v: u32) {
        self.bytes(&v.to_le_bytes());
    }
    pub(super) fn u64(&mut self, v: u64) {
        self.bytes(&v.to_le_bytes());
    }
    pub(super) fn len(&self) -> usize {
        self.bytes.len()
    }
    /// Overwrites 4 bytes at `at` (a length or checksum filled in afterwards).
    pub(super) fn patch_u32(&mut self, at: usize, v: u32) {
        self.bytes[at..at + 4].copy_from_slice(&v.to_le_bytes());
    }
}

pub(super) use crate::crc32c::crc32c;

#[cfg(test)]
mod tests {
    #[test]
    fn crc32c_check_value() {
        // The standard check value of CRC-32C over "123456789".
        assert_eq!(super::crc32c(b"123456789"), 0xe306_9283);
    }
}
