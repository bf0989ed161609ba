//! `--verify`: every written 512-byte sector carries its own address and the number of the
//! write that put it there, followed by bytes derived from both. Requests that overlap one in
//! flight are held back, so what a sector must hold is always known exactly: reads during
//! the run and a read-back after it compare against the last completed write. It keeps 16
//! bytes per written sector.

use super::generator::Request;
use super::target::Target;
use anyhow::{bail, Result};
use futures::FutureExt;
use nbraid_core::Buf;
use nbraid_sim::Rng;
use std::collections::{HashMap, HashSet};

const SECTOR: u64 = 512;

#[derive(Default)]
pub struct Verifier {
    /// The write number each written sector must hold.
    last: HashMap<u64, u64>,
    /// Sectors under a request in flight.
    busy: HashSet<u64>,
    /// Write numbers of writes in flight, by offset.
    pending: HashMap<u64, u64>,
    next_seq: u64,
}

fn sectors(req: &Request) -> impl Iterator<Item = u64> {
    req.offset / SECTOR..(req.offset + req.len).div_ceil(SECTOR)
}

/// The bytes sector `sector` holds after write number `seq`.
pub fn pattern(sector: u64, seq: u64, out: &mut [u8]) {
    out[..8].copy_from_slice(&sector.to_le_bytes());
    out[8..16].copy_from_slice(&seq.to_le_bytes());
    let mut rng = Rng::new(sector ^ seq.rotate_left(32));
    for chunk in out[16..].chunks_mut(8) {
        let v = rng.next_u64().to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
}

fn check(sector: u64, seq: u64, got: &[u8]) -> Result<()> {
    let mut want = [0u8; SECTOR as usize];
    pattern(sector, seq, &mut want);
    if got != want {
        let held =
            |r: std::ops::Range<usize>| u64::from_le_bytes(got[r].try_into().expect("8 bytes"));
        bail!(
            "verify: sector {sector} (byte {}) should hold write #{seq}; it holds {} (header: sector {}, write #{})",
            sector * SECTOR,
            if got[..16] == want[..16] { "damaged bytes after a good header" } else { "other data" },
            held(0..8),
            held(8..16)
        );
    }
    Ok(())
}

impl Verifier {
    /// Whether `req` may go now (it overlaps nothing in flight); if so its sectors are busy
    /// until [`Verifier::complete`].
    pub fn admit(&mut self, req: &Request) -> bool {
        if sectors(req).any(|s| self.busy.contains(&s)) {
            return false;
        }
        self.busy.extend(sectors(req));
        true
    }

    /// Fills a write's buffer with its pattern.
    pub fn fill(&mut self, req: &Request, buf: &mut Buf) {
        self.next_seq += 1;
        let seq = self.next_seq;
        for (i, s) in sectors(req).enumerate() {
            let at = i * SECTOR as usize;
            pattern(s, seq, &mut buf[at..at + SECTOR as usize]);
        }
        self.pending.insert(req.offset, seq);
    }

    /// Records a completed request; a read is checked against the writes before it.
    pub fn complete(&mut self, req: &Request, buf: &Buf) -> Result<()> {
        for s in sectors(req) {
            self.busy.remove(&s);
        }
        if req.write {
            let seq = self
                .pending
                .remove(&req.offset)
                .expect("a completed write was filled");
            for s in sectors(req) {
                self.last.insert(s, seq);
            }
            return Ok(());
        }
        for (i, s) in sectors(req).enumerate() {
            if let Some(&seq) = self.last.get(&s) {
                let at = i * SECTOR as usize;
                check(s, seq, &buf[at..at + SECTOR as usize])?;
            }
        }
        Ok(())
    }

    /// Reads back every sector the run wrote and compares; returns how many were checked.
    pub fn read_back(&self, target: &dyn Target) -> Result<u64> {
        let block = target.block_bytes().max(SECTOR);
        let mut written: Vec<u64> = self.last.keys().copied().collect();
        written.sort_unstable();
        // Runs of whole blocks, at most 1 MiB each.
        let mut runs: Vec<(u64, u64)> = Vec::new();
        for &s in &written {
            let b = s * SECTOR / block * block;
            match runs.last_mut() {
                Some((start, len)) if b < *start + *len => {}
                Some((start, len)) if b == *start + *len && *len < 1 << 20 => *len += block,
                _ => runs.push((b, block)),
            }
        }
        let work = async {
            for &(start, len) in &runs {
                let buf = target.read(start, Buf::new(len as usize)).await?;
                for s in start / SECTOR..(start + len) / SECTOR {
                    if let Some(&seq) = self.last.get(&s) {
                        let at = ((s - start / SECTOR) * SECTOR) as usize;
                        check(s, seq, &buf[at..at + SECTOR as usize])?;
                    }
                }
            }
            anyhow::Ok(())
        };
        target.block_on(work.boxed_local())?;
        Ok(written.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlapping_requests_wait_and_reads_are_checked() {
        let mut v = Verifier::default();
        let w = Request {
            offset: 1024,
            len: 1024,
            write: true,
        };
        let r = Request {
            offset: 1536,
            len: 512,
            write: false,
        };
        assert!(v.admit(&w));
        assert!(!v.admit(&r), "overlaps the write in flight");
        let mut buf = Buf::new(1024);
        v.fill(&w, &mut buf);
        v.complete(&w, &buf).unwrap();
        assert!(v.admit(&r));
        let good = Buf::copy_from(&buf[512..]);
        v.complete(&r, &good).unwrap();
        assert!(v.admit(&r));
        let mut bad = Buf::copy_from(&buf[512..]);
        bad[100] ^= 1;
        let e = v.complete(&r, &bad).unwrap_err().to_string();
        assert!(e.contains("sector 3") && e.contains("damaged"), "{e}");
    }
}
