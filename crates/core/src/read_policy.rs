//! Which copy of a mirror serves a read: small pure choosers, unit-tested.
//!
//! Every policy first looks for a sequential run: a read that starts where a copy's last read
//! ended continues on that copy until the run there reaches `seq_piece` bytes, then the run
//! moves to another copy. So a long sequential stream is split into `seq_piece`-sized pieces
//! spread over the copies — each copy still sees long sequential runs (good for disks and
//! readahead) and all copies work at once (RAID 0-like throughput), instead of every read
//! bouncing between copies by policy (the TwinStor trap: it hurt reads above 32 KiB). A single
//! request longer than `seq_piece` is cut at `seq_piece` boundaries the same way ([`plan`]).
//!
//! Outside a run the policy decides:
//! - `round-robin`: the next usable copy in turn;
//! - `least-pending`: the copy with the fewest reads outstanding (SSDs; SPDK's raid1 choice);
//! - `nearest` (spinning disks): each copy prefers one band of the address space (copy i of
//!   n the i-th n-th), so each disk's seeks span 1/n of the platter and its queue is dense
//!   enough for its own reordering; a copy more than [`NEAREST_SLACK`] reads busier than the
//!   least busy one is passed over. md's `read_balance` instead sends a read to the copy
//!   whose last *issued* read ended closest, which at depth is not where the head is: on the
//!   simulated HDD at QD 16 (`nbraid bench rand-read --sim hdd`) that rule gave 1.88× a
//!   single disk, round-robin 1.71×, the bands 1.97–1.99× (three generator seeds), near
//!   the 2.01× that the drives' own reordering leaves to any chooser; on drives fed one
//!   command at a time (seed 001's, where TwinStor did > 2×) the bands do 2.37×,
//!   round-robin 1.99× (docs/benchmarks/README.md).

pub use nbraid_layout::ReadPolicy;

/// What the chooser knows about one copy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CopyView {
    /// Whether the copy can serve the range (no failed member under it).
    pub usable: bool,
    /// Reads sent to the copy and not yet completed.
    pub pending: u32,
    /// Where the copy's last read ended (its "head position").
    pub next: u64,
    /// Bytes of the sequential run that ended at `next` (0 = no run).
    pub run: u64,
    /// The centre of the band of the address space this copy serves under `nearest`.
    pub home: u64,
}

/// How many more pending reads than the least busy copy `nearest` tolerates before it
/// leaves a copy's band to another copy.
pub const NEAREST_SLACK: u32 = 12;

/// Views of `n` copies of a mirror of `capacity` bytes, each with its `nearest` band.
pub fn views(n: usize, capacity: u64) -> Vec<CopyView> {
    (0..n as u64)
        .map(|i| CopyView {
            home: (capacity / n as u64) * i + capacity / (2 * n as u64),
            ..CopyView::default()
        })
        .collect()
}

/// Picks the copy for `[offset, offset+len)`; `None` when no copy is usable. `tick` rotates
/// round-robin and breaks ties.
pub fn choose(
    policy: ReadPolicy,
    offset: u64,
    len: u64,
    copies: &[CopyView],
    seq_piece: u64,
    tick: u64,
) -> Option<usize> {
    let usable = |i: &usize| copies[*i].usable;
    let n = copies.len();
    if !(0..n).any(|i| usable(&i)) {
        return None;
    }
    // A sequential run continues on its copy until it reaches `seq_piece`, then moves on.
    if let Some(c) = (0..n).find(|&i| usable(&i) && copies[i].run > 0 && copies[i].next == offset) {
        if copies[c].run + len <= seq_piece {
            return Some(c);
        }
        if let Some(other) = by_policy(policy, offset, copies, tick, |i| usable(&i) && i != c) {
            return Some(other);
        }
        return Some(c);
    }
    by_policy(policy, offset, copies, tick, |i| usable(&i))
}

fn by_policy(
    policy: ReadPolicy,
    offset: u64,
    copies: &[CopyView],
    tick: u64,
    ok: impl Fn(usize) -> bool,
) -> Option<usize> {
    let n = copies.len();
    // Candidates in rotated order, so ties do not always favour copy 0.
    let start = (tick % n as u64) as usize;
    let cands = (0..n).map(|k| (start + k) % n).filter(|&i| ok(i));
    match policy {
        ReadPolicy::RoundRobin => cands.into_iter().next(),
        ReadPolicy::LeastPending => cands.min_by_key(|&i| copies[i].pending),
        ReadPolicy::Nearest => {
            let least = cands.clone().map(|i| copies[i].pending).min()?;
            cands
                .filter(|&i| copies[i].pending <= least + NEAREST_SLACK)
                .min_by_key(|&i| (copies[i].home.abs_diff(offset), copies[i].pending))
        }
    }
}

/// Records that `copy` was given `[offset, offset+len)`.
pub fn note_issued(copies: &mut [CopyView], copy: usize, offset: u64, len: u64) {
    let c = &mut copies[copy];
    c.run = if c.run > 0 && c.next == offset {
        c.run + len
    } else {
        len
    };
    c.next = offset + len;
    c.pending += 1;
}

/// Splits `[offset, offset+len)` over the copies: pieces cut at multiples of `seq_piece`,
/// each chosen in order (so runs move between copies), adjacent pieces on one copy merged.
/// Returns `(offset, len, copy)` in logical order; empty when no copy is usable. Updates
/// `copies` as [`note_issued`] does (one pending count per returned part).
pub fn plan(
    policy: ReadPolicy,
    offset: u64,
    len: u64,
    copies: &mut [CopyView],
    seq_piece: u64,
    tick: u64,
) -> Vec<(u64, u64, usize)> {
    let mut parts: Vec<(u64, u64, usize)> = Vec::new();
    let end = offset + len;
    let mut at = offset;
    let usable = copies.iter().filter(|c| c.usable).count();
    while at < end {
        let piece_end = if usable > 1 && len > seq_piece {
            ((at / seq_piece + 1) * seq_piece).min(end)
        } else {
            end
        };
        let n = piece_end - at;
        let Some(c) = choose(
            policy,
            at,
            n,
            copies,
            seq_piece,
            tick.wrapping_add(parts.len() as u64),
        ) else {
            return Vec::new();
        };
        // Keep the run bookkeeping per piece, pending per returned part.
        let pending = copies[c].pending;
        note_issued(copies, c, at, n);
        match parts.last_mut() {
            Some(last) if last.2 == c && last.0 + last.1 == at => {
                last.1 += n;
                copies[c].pending = pending;
            }
            _ => parts.push((at, n, c)),
        }
        at = piece_end;
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn copies(n: usize) -> Vec<CopyView> {
        vec![
            CopyView {
                usable: true,
                ..CopyView::default()
            };
            n
        ]
    }

    #[test]
    fn sequential_small_reads_stay_on_one_copy_then_move_in_large_pieces() {
        for policy in ReadPolicy::ALL {
            let mut c = copies(2);
            let mut assigned = Vec::new();
            // 4 KiB sequential reads, completing at once (pending back to 0).
            for k in 0..1024u64 {
                let off = k * 4096;
                let i = choose(policy, off, 4096, &c, MIB, k).unwrap();
                note_issued(&mut c, i, off, 4096);
                c[i].pending -= 1;
                assigned.push(i);
            }
            // Runs of exactly 256 reads (1 MiB) per copy, alternating.
            let first = assigned[0];
            for (k, &i) in assigned.iter().enumerate() {
                let expect = if (k / 256) % 2 == 0 { first } else { 1 - first };
                assert_eq!(i, expect, "{policy}: read {k}");
            }
        }
    }

    #[test]
    fn queued_sequential_large_reads_spread_over_copies() {
        // 1 MiB reads issued back to back (none completes): both copies get half.
        for policy in ReadPolicy::ALL {
            let mut c = copies(2);
            let mut per = [0; 2];
            for k in 0..32u64 {
                let i = choose(policy, k * MIB, MIB, &c, MIB, k).unwrap();
                note_issued(&mut c, i, k * MIB, MIB);
                per[i] += 1;
            }
            assert_eq!(per, [16, 16], "{policy}");
        }
    }

    #[test]
    fn one_long_read_is_cut_in_pieces_over_copies() {
        let mut c = copies(3);
        let parts = plan(ReadPolicy::LeastPending, 0, 32 * MIB, &mut c, MIB, 0);
        assert_eq!(parts.iter().map(|p| p.1).sum::<u64>(), 32 * MIB);
        assert!(parts.iter().all(|p| p.1 >= MIB));
        for i in 0..3 {
            let bytes: u64 = parts.iter().filter(|p| p.2 == i).map(|p| p.1).sum();
            assert!(bytes >= 10 * MIB, "copy {i} got {bytes} bytes: {parts:?}");
        }
        // Parts are contiguous and in order.
        let mut at = 0;
        for p in &parts {
            assert_eq!(p.0, at);
            at += p.1;
        }
        // A short read is one part.
        let parts = plan(ReadPolicy::Nearest, 5 * MIB, 8192, &mut c, MIB, 0);
        assert_eq!(parts.len(), 1);
    }

    #[test]
    fn least_pending_picks_the_idle_copy() {
        let mut c = copies(3);
        c[0].pending = 4;
        c[1].pending = 0;
        c[2].pending = 2;
        for tick in 0..6 {
            assert_eq!(
                choose(ReadPolicy::LeastPending, 77 * MIB, 4096, &c, MIB, tick),
                Some(1)
            );
        }
        c[1].usable = false;
        assert_eq!(
            choose(ReadPolicy::LeastPending, 77 * MIB, 4096, &c, MIB, 0),
            Some(2)
        );
    }

    #[test]
    fn nearest_keeps_each_copy_in_its_band_until_it_is_much_busier() {
        let mut c = views(3, 300 * MIB);
        c.iter_mut().for_each(|x| x.usable = true);
        assert_eq!(
            choose(ReadPolicy::Nearest, 10 * MIB, 4096, &c, MIB, 0),
            Some(0)
        );
        assert_eq!(
            choose(ReadPolicy::Nearest, 150 * MIB, 4096, &c, MIB, 0),
            Some(1)
        );
        assert_eq!(
            choose(ReadPolicy::Nearest, 299 * MIB, 4096, &c, MIB, 7),
            Some(2)
        );
        // Busier, but within the slack: the band still decides.
        c[2].pending = NEAREST_SLACK;
        assert_eq!(
            choose(ReadPolicy::Nearest, 299 * MIB, 4096, &c, MIB, 0),
            Some(2)
        );
        // Beyond the slack: the nearest band among the others.
        c[2].pending = NEAREST_SLACK + 1;
        assert_eq!(
            choose(ReadPolicy::Nearest, 299 * MIB, 4096, &c, MIB, 0),
            Some(1)
        );
        // A copy that cannot serve the range is never chosen, whatever its band.
        c[2].pending = 0;
        c[2].usable = false;
        assert_eq!(
            choose(ReadPolicy::Nearest, 299 * MIB, 4096, &c, MIB, 0),
            Some(1)
        );
    }

    #[test]
    fn round_robin_rotates_over_usable_copies() {
        let mut c = copies(3);
        c[1].usable = false;
        let picks: Vec<usize> = (0..4)
            .map(|t| choose(ReadPolicy::RoundRobin, t * 100 * MIB, 4096, &c, MIB, t).unwrap())
            .collect();
        assert!(picks.contains(&0) && picks.contains(&2) && !picks.contains(&1));
        c.iter_mut().for_each(|x| x.usable = false);
        assert_eq!(choose(ReadPolicy::RoundRobin, 0, 4096, &c, MIB, 0), None);
    }
}
