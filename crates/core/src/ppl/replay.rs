//! Replay, as pure functions: which logged entries count after a crash ([`select`]), and the
//! parity of one logged sector from the partial parity and what the members hold
//! ([`replay_sector`]).

use super::codec::{Batch, Entry};
use super::SECTOR_BYTES;
use crate::parity::{self, Loss};
use std::collections::{BTreeMap, HashMap};

/// What to replay for one band: its newest entry, with every partial parity the rings hold
/// of it, and — when that entry lacks one (RAID 6: its other ring was lost, or the crash
/// came before that ring's batch was written) — the newest older entry of the band that
/// has both, for losses the one partial cannot cover.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replay {
    pub entry: Entry,
    pub fallback: Option<Entry>,
}

/// The entries to replay from every log ring read at a dirty start (`rings[i]`: the batches
/// found on one member): only batches of the newest life count (every open starts a new one
/// and settles the previous one's entries); in each ring, entries below the largest tail a
/// batch of that ring carries are settled; of the rest, the newest entry of each band wins,
/// its partial P taken from the stripe's P ring and its partial Q from the Q ring.
///
/// Why each of them alone is exact: an entry's member writes start only once it is durable
/// on every ring it was sent to, and a band has one write in flight at a time. So a ring's
/// newest entry of a band names every chunk written since (nothing newer was written), and
/// where the two rings' newest differ (RAID 6), the newer one's member writes never started:
/// the older one, found on both rings, is as exact (the fallback).
pub fn select(rings: &[Vec<Batch>]) -> Vec<Replay> {
    let Some(life) = rings.iter().flatten().map(|b| b.life).max() else {
        return Vec::new();
    };
    // Per band, per sequence number: the entry with the partials of every ring holding it.
    let mut found: HashMap<(u32, u64, u32), BTreeMap<u64, Entry>> = HashMap::new();
    for ring in rings {
        let current: Vec<&Batch> = ring.iter().filter(|b| b.life == life).collect();
        let tail = current.iter().map(|b| b.tail).max().unwrap_or(0);
        for e in current.iter().flat_map(|b| &b.entries) {
            if e.seq < tail {
                continue;
            }
            let seqs = found.entry((e.group, e.stripe, e.band)).or_default();
            let merged = seqs.entry(e.seq).or_insert_with(|| Entry {
                pp: None,
                pq: None,
                ..e.clone()
            });
            if merged.pp.is_none() {
                merged.pp.clone_from(&e.pp);
            }
            if merged.pq.is_none() {
                merged.pq.clone_from(&e.pq);
            }
        }
    }
    let mut out: Vec<Replay> = found
        .into_values()
        .map(|seqs| {
            let mut newest_first = seqs.into_values().rev();
            let entry = newest_first.next().expect("a band found has an entry");
            let fallback = if entry.complete() {
                None
            } else {
                newest_first.find(Entry::complete)
            };
            Replay { entry, fallback }
        })
        .collect();
    out.sort_by_key(|r| (r.entry.group, r.entry.stripe, r.entry.band));
    out
}

/// One sector of a logged stripe as the members hold it after the crash. Data chunks are in
/// logical order; `None` is a chunk (or parity) whose member is missing.
pub struct SectorState<'a> {
    pub data: Vec<Option<&'a [u8]>>,
    pub p: Option<&'a [u8]>,
    pub q: Option<&'a [u8]>,
    /// The stripe has a Q (RAID 6).
    pub raid6: bool,
    /// md's syndrome slot of each data chunk (`StripeRoles::q_slot`).
    pub q_slot: &'a [usize],
}

/// The P (and for RAID 6 Q) that makes the sector consistent, given which data chunks the
/// entry says were being written (`written[i]`) and its partial parity over the others (`pp`,
/// `pq`: all zero where every chunk is written; either may be absent on RAID 6, not both). A
/// missing chunk that was *not* being written is rebuilt from the partial parity and the
/// other unwritten chunks — exactly, however the crash tore the written ones; a missing chunk
/// that was being written is rebuilt from the parity found (old, new or torn: md's PPL makes
/// no promise there). Both parities come from the one stripe so rebuilt, so they agree even
/// where only one partial was logged. `None` when more is missing than that can cover.
pub fn replay_sector(
    s: &SectorState<'_>,
    written: &[bool],
    pp: Option<&[u8]>,
    pq: Option<&[u8]>,
) -> Option<(Vec<u8>, Option<Vec<u8>>)> {
    let k = s.data.len();
    let mut stripe = SectorStripe::new(s);
    // 1. Unwritten chunks that are missing: from the partial parity over a virtual stripe
    //    where the written chunks are zero.
    let lost_unwritten: Vec<usize> = (0..k)
        .filter(|&i| !written[i] && s.data[i].is_none())
        .collect();
    let partial = (pp, pq.filter(|_| s.raid6));
    stripe.rebuild(&lost_unwritten, |i| written[i], partial)?;
    // 2. Written chunks that are missing: from the parity found.
    let lost_written: Vec<usize> = (0..k)
        .filter(|&i| written[i] && s.data[i].is_none())
        .collect();
    stripe.rebuild(&lost_written, |_| false, (s.p, s.q))?;
    // 3. Parity from the whole stripe.
    Some(stripe.parity())
}

/// One logged sector's data chunks as replay rebuilds them.
struct SectorStripe<'a> {
    /// md's syndrome slot of each data chunk (logical order).
    q_slot: &'a [usize],
    /// The data chunk (logical index) in each syndrome slot, as the parity kernels take data.
    order: Vec<usize>,
    raid6: bool,
    /// Every data chunk, by logical index: as the members hold it, zero while missing and
    /// not rebuilt yet.
    full: Vec<Vec<u8>>,
}

impl<'a> SectorStripe<'a> {
    fn new(s: &SectorState<'a>) -> Self {
        let mut order = vec![0usize; s.data.len()];
        for (i, &slot) in s.q_slot.iter().enumerate() {
            order[slot] = i;
        }
        let full = (s.data.iter())
            .map(|d| d.map_or_else(|| vec![0; SECTOR_BYTES], <[u8]>::to_vec))
            .collect();
        SectorStripe {
            q_slot: s.q_slot,
            order,
            raid6: s.raid6,
            full,
        }
    }

    /// Rebuilds the data chunks `lost` (logical indices) from `parity` (P, Q; `None`: not
    /// there) of the stripe whose chunks `zeroed` names are zero and the others as `full`
    /// holds them. `None` when the parity there cannot cover the losses.
    fn rebuild(
        &mut self,
        lost: &[usize],
        zeroed: impl Fn(usize) -> bool,
        parity: (Option<&[u8]>, Option<&[u8]>),
    ) -> Option<()> {
        if lost.is_empty() {
            return Some(());
        }
        let (p_found, q_found) = parity;
        let loss = loss_of(lost, self.q_slot, p_found.is_some(), q_found.is_some())?;
        let n = SECTOR_BYTES;
        let mut slots: Vec<Vec<u8>> = (self.order.iter())
            .map(|&i| match zeroed(i) {
                true => vec![0; n],
                false => self.full[i].clone(),
            })
            .collect();
        let mut p = p_found.map_or_else(|| vec![0; n], <[u8]>::to_vec);
        let mut q = (q_found.map(<[u8]>::to_vec)).or_else(|| self.raid6.then(|| vec![0; n]));
        {
            let mut refs: Vec<&mut [u8]> = slots.iter_mut().map(|v| v.as_mut_slice()).collect();
            parity::recover(&mut refs, &mut p, q.as_deref_mut(), loss);
        }
        for &i in lost {
            self.full[i] = std::mem::take(&mut slots[self.q_slot[i]]);
        }
        Some(())
    }

    /// P (and for RAID 6 Q) of the whole stripe.
    fn parity(&self) -> (Vec<u8>, Option<Vec<u8>>) {
        let srcs: Vec<&[u8]> = (self.order.iter())
            .map(|&i| self.full[i].as_slice())
            .collect();
        let mut p = vec![0; SECTOR_BYTES];
        if self.raid6 {
            let mut q = vec![0; SECTOR_BYTES];
            parity::pq_gen(&srcs, &mut p, &mut q);
            (p, Some(q))
        } else {
            parity::xor_gen(&srcs, &mut p);
            (p, None)
        }
    }
}

/// What the parity kernels recover when data chunks `lost` (logical indices, at least one;
/// `q_slot`: their syndrome slots) are missing and P and Q are there (`has_p`, `has_q`) or
/// not: one chunk from P, or from Q where P is not there; two from both. `None`: beyond
/// what is there.
fn loss_of(lost: &[usize], q_slot: &[usize], has_p: bool, has_q: bool) -> Option<Loss> {
    match (lost, has_p, has_q) {
        ([a], true, _) => Some(Loss::Data(q_slot[*a])),
        ([a], false, true) => Some(Loss::DataP(q_slot[*a])),
        ([a, b], true, true) => Some(Loss::TwoData(q_slot[*a], q_slot[*b])),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ppl::codec::Entry;

    fn sector(seed: u8) -> Vec<u8> {
        (0..SECTOR_BYTES)
            .map(|i| (i as u8).wrapping_mul(31) ^ seed)
            .collect()
    }

    fn gen(data: &[Vec<u8>], slots: &[usize], raid6: bool) -> (Vec<u8>, Vec<u8>) {
        let mut order = vec![0; data.len()];
        for (i, &s) in slots.iter().enumerate() {
            order[s] = i;
        }
        let srcs: Vec<&[u8]> = order.iter().map(|&i| data[i].as_slice()).collect();
        let (mut p, mut q) = (vec![0; SECTOR_BYTES], vec![0; SECTOR_BYTES]);
        if raid6 {
            parity::pq_gen(&srcs, &mut p, &mut q);
        } else {
            parity::xor_gen(&srcs, &mut p);
        }
        (p, q)
    }

    /// Every way a crash can tear a write of `written` chunks (each written chunk old or new,
    /// parity old or new), with every choice of missing members within tolerance: the
    /// unwritten chunks are rebuilt exactly from the replayed parity.
    fn check(k: usize, raid6: bool, written: &[bool]) {
        let slots: Vec<usize> = (0..k).rev().collect(); // an asymmetric slot order
        let old: Vec<Vec<u8>> = (0..k).map(|i| sector(i as u8)).collect();
        let new: Vec<Vec<u8>> = (0..k)
            .map(|i| {
                if written[i] {
                    sector(100 + i as u8)
                } else {
                    old[i].clone()
                }
            })
            .collect();
        // Partial parity over the unwritten chunks (written ones as zero).
        let virt: Vec<Vec<u8>> = (0..k)
            .map(|i| {
                if written[i] {
                    vec![0; SECTOR_BYTES]
                } else {
                    old[i].clone()
                }
            })
            .collect();
        let (pp, pq) = gen(&virt, &slots, raid6);
        let (p_old, q_old) = gen(&old, &slots, raid6);
        let (p_new, q_new) = gen(&new, &slots, raid6);
        let np = 1 + usize::from(raid6);
        let members = k + np;
        for torn in 0u32..(1 << (k + np)) {
            let on_disk: Vec<&[u8]> = (0..k)
                .map(|i| {
                    if torn & (1 << i) != 0 {
                        new[i].as_slice()
                    } else {
                        old[i].as_slice()
                    }
                })
                .collect();
            let p = if torn & (1 << k) != 0 { &p_new } else { &p_old };
            let q = if torn & (1 << (k + 1)) != 0 {
                &q_new
            } else {
                &q_old
            };
            for lost in 0u32..(1 << members) {
                if lost.count_ones() as usize > np {
                    continue;
                }
                let s = SectorState {
                    data: (0..k)
                        .map(|i| (lost & (1 << i) == 0).then_some(on_disk[i]))
                        .collect(),
                    p: (lost & (1 << k) == 0).then_some(p.as_slice()),
                    q: (raid6 && lost & (1 << (k + 1)) == 0).then_some(q.as_slice()),
                    raid6,
                    q_slot: &slots,
                };
                // The partials replay has: a lost parity member took its ring with it; with
                // both rings there, also each alone (the other ring's batch not written
                // before the crash) where it covers the losses.
                let (p_lost, q_lost) = (lost & (1 << k) != 0, lost & (1 << (k + 1)) != 0);
                let lost_data = (lost & ((1 << k) - 1)).count_ones();
                let mut partials = Vec::new();
                if !raid6 {
                    partials.push((true, false));
                } else if p_lost && !q_lost {
                    partials.push((false, true));
                } else if q_lost && !p_lost {
                    partials.push((true, false));
                } else if !p_lost {
                    partials.push((true, true));
                    if lost_data <= 1 {
                        partials.extend([(true, false), (false, true)]);
                    }
                }
                for (with_p, with_q) in partials {
                    let (rp, rq) = replay_sector(
                        &s,
                        written,
                        with_p.then_some(pp.as_slice()),
                        with_q.then_some(pq.as_slice()),
                    )
                    .expect("within tolerance");
                    let what = format!(
                        "k {k} written {written:?} torn {torn:b} lost {lost:b} pp {with_p} pq {with_q}"
                    );
                    rebuild_and_check(&on_disk, &old, written, lost, &slots, raid6, rp, rq, &what);
                }
            }
        }
    }

    /// Rebuilds the data chunks `lost` names from the replayed parity and checks the
    /// unwritten ones are exact and the replayed P and Q agree with the rebuilt stripe.
    #[allow(clippy::too_many_arguments)]
    fn rebuild_and_check(
        on_disk: &[&[u8]],
        old: &[Vec<u8>],
        written: &[bool],
        lost: u32,
        slots: &[usize],
        raid6: bool,
        rp: Vec<u8>,
        rq: Option<Vec<u8>>,
        what: &str,
    ) {
        let k = on_disk.len();
        let mut data: Vec<Vec<u8>> = on_disk.iter().map(|d| d.to_vec()).collect();
        let lost_data: Vec<usize> = (0..k).filter(|&i| lost & (1 << i) != 0).collect();
        let mut by_slot: Vec<Vec<u8>> = vec![Vec::new(); k];
        for i in 0..k {
            by_slot[slots[i]] = data[i].clone();
        }
        let mut rp2 = rp.clone();
        let mut rq2 = rq.clone().unwrap_or_else(|| vec![0; SECTOR_BYTES]);
        let loss = match lost_data.as_slice() {
            [] => None,
            [a] => Some(Loss::Data(slots[*a])),
            [a, b] => Some(Loss::TwoData(slots[*a], slots[*b])),
            _ => unreachable!(),
        };
        if let Some(loss) = loss {
            let mut refs: Vec<&mut [u8]> = by_slot.iter_mut().map(|v| v.as_mut_slice()).collect();
            parity::recover(&mut refs, &mut rp2, raid6.then_some(&mut rq2[..]), loss);
        }
        for &i in &lost_data {
            data[i] = by_slot[slots[i]].clone();
            if !written[i] {
                assert_eq!(data[i], old[i], "{what}: chunk {i}");
            }
        }
        let (gp, gq) = gen(&data, slots, raid6);
        assert_eq!(rp, gp, "{what}: replayed P");
        if raid6 {
            assert_eq!(rq, Some(gq), "{what}: replayed Q");
        }
    }

    #[test]
    fn raid5_rebuilds_unwritten_chunks_however_the_write_tore() {
        for mask in 1u32..(1 << 4) - 1 {
            let written: Vec<bool> = (0..4).map(|i| mask & (1 << i) != 0).collect();
            check(4, false, &written);
        }
    }

    #[test]
    fn raid6_rebuilds_unwritten_chunks_however_the_write_tore() {
        for mask in 1u32..(1 << 4) - 1 {
            let written: Vec<bool> = (0..4).map(|i| mask & (1 << i) != 0).collect();
            check(4, true, &written);
        }
    }

    /// One missing chunk comes from P, or from Q alone; two need both; more, or two with
    /// one parity, cannot be covered. Slots are the chunks' syndrome slots.
    #[test]
    fn losses_map_to_what_the_parity_there_recovers() {
        let q_slot = [2, 0, 1];
        assert_eq!(loss_of(&[0], &q_slot, true, false), Some(Loss::Data(2)));
        assert_eq!(loss_of(&[0], &q_slot, true, true), Some(Loss::Data(2)));
        assert_eq!(loss_of(&[1], &q_slot, false, true), Some(Loss::DataP(0)));
        assert_eq!(loss_of(&[1], &q_slot, false, false), None);
        assert_eq!(
            loss_of(&[0, 2], &q_slot, true, true),
            Some(Loss::TwoData(2, 1))
        );
        assert_eq!(loss_of(&[0, 2], &q_slot, true, false), None);
        assert_eq!(loss_of(&[0, 2], &q_slot, false, true), None);
        assert_eq!(loss_of(&[0, 1, 2], &q_slot, true, true), None);
    }

    fn e(seq: u64, stripe: u64) -> Entry {
        Entry {
            seq,
            group: 0,
            stripe,
            band: 0,
            sectors: 8,
            parity: 1,
            masks: vec![1, 0],
            pp: Some(vec![seq as u8; SECTOR_BYTES]),
            pq: None,
        }
    }

    fn b(life: u64, tail: u64, entries: Vec<Entry>) -> Batch {
        Batch {
            life,
            tail,
            cover: crate::ppl::codec::Cover::Unsaid,
            entries,
        }
    }

    #[test]
    fn select_takes_the_newest_life_the_tail_and_the_newest_entry_per_band() {
        let rings = vec![
            vec![
                b(3, 0, vec![e(1, 10), e(2, 11)]),
                b(3, 2, vec![e(5, 10)]),
                b(2, 0, vec![e(9, 12)]), // an older life: settled
            ],
            vec![b(3, 0, vec![e(4, 13), e(6, 14)]), b(3, 5, vec![])],
        ];
        let got: Vec<(u64, u64)> = select(&rings)
            .iter()
            .map(|r| (r.entry.stripe, r.entry.seq))
            .collect();
        // Ring 0: tail 2 drops seq 1; stripe 10's newest is 5. Ring 1: tail 5 drops seq 4.
        assert_eq!(got, vec![(10, 5), (11, 2), (14, 6)]);
    }

    /// A RAID 6 entry as the P ring (partial P) or the Q ring (partial Q) holds it.
    fn e6(seq: u64, q: bool) -> Entry {
        Entry {
            parity: 2,
            pp: (!q).then(|| vec![seq as u8; SECTOR_BYTES]),
            pq: q.then(|| vec![!seq as u8; SECTOR_BYTES]),
            ..e(seq, 10)
        }
    }

    #[test]
    fn select_joins_the_p_and_q_rings_halves_of_an_entry() {
        let both = |seq| Entry {
            pp: e6(seq, false).pp,
            ..e6(seq, true)
        };
        // Both rings hold entry 4: one entry with both partials.
        let rings = vec![
            vec![b(1, 0, vec![e6(4, false)])],
            vec![b(1, 0, vec![e6(4, true)])],
        ];
        assert_eq!(
            select(&rings),
            vec![Replay {
                entry: both(4),
                fallback: None
            }]
        );
        // The P ring has entry 5, the Q ring's batch of it was not written: 5 with its
        // partial P, and 4 (both partials) should that not cover the losses.
        let rings = vec![
            vec![b(1, 0, vec![e6(4, false)]), b(1, 0, vec![e6(5, false)])],
            vec![b(1, 0, vec![e6(4, true)])],
        ];
        assert_eq!(
            select(&rings),
            vec![Replay {
                entry: e6(5, false),
                fallback: Some(both(4))
            }]
        );
        // The P ring's member is lost: the Q ring's entry alone.
        let rings = vec![vec![b(1, 0, vec![e6(4, true), e6(5, true)])]];
        assert_eq!(
            select(&rings),
            vec![Replay {
                entry: e6(5, true),
                fallback: None
            }]
        );
    }
}
