//! The pure decisions of a stripe write: which plan (md's counting rule) and which recovery.

use crate::parity::Loss;

/// How a stripe write gets its parity (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plan {
    DataOnly,
    FullRows,
    Rmw,
    Rcw,
    Reconstruct,
}

/// md's counting rule over one stripe's data chunks. `touched[i]`: chunk `i` gets new bytes;
/// `covered[i]`: it gets new bytes over the whole row range; `lost[i]`: its member cannot be
/// read; `parity_alive`: P/Q chunks that can be read and written.
pub fn choose(
    touched: &[bool],
    covered: &[bool],
    lost: &[bool],
    parity_alive: usize,
    in_sync: bool,
) -> Plan {
    if parity_alive == 0 {
        return Plan::DataOnly;
    }
    if covered.iter().all(|&c| c) {
        return Plan::FullRows;
    }
    let n = touched.len();
    let rmw = (0..n)
        .all(|i| !(touched[i] && lost[i]))
        .then(|| touched.iter().filter(|&&t| t).count() + parity_alive);
    let rcw = (0..n)
        .all(|i| covered[i] || !lost[i])
        .then(|| covered.iter().filter(|&&c| !c).count());
    match (rmw, rcw) {
        (_, Some(_)) if !in_sync => Plan::Rcw,
        (_, None) if !in_sync => Plan::Reconstruct,
        (Some(r), Some(c)) if r < c => Plan::Rmw,
        (_, Some(_)) => Plan::Rcw,
        (Some(_), None) => Plan::Rmw,
        (None, None) => Plan::Reconstruct,
    }
}

/// The recovery for lost data slots (sorted) given which parity chunks survive; `None` when
/// beyond what the parity can rebuild. Returns (loss, needs P, needs Q).
pub(super) fn recovery(lost_slots: &[usize], p_ok: bool, q_ok: bool) -> Option<(Loss, bool, bool)> {
    match *lost_slots {
        [] => None,
        [x] if p_ok => Some((Loss::Data(x), true, false)),
        [x] if q_ok => Some((Loss::DataP(x), false, true)),
        [a, b] if p_ok && q_ok => Some((Loss::TwoData(a, b), true, true)),
        _ => None,
    }
}

/// Sorted, disjoint byte ranges.
pub(super) type Ranges = Vec<(u64, u64)>;

pub(super) fn add_range(r: &mut Ranges, s: u64, e: u64) {
    let (mut s, mut e) = (s, e);
    r.retain(|&(a, b)| {
        if b < s || e < a {
            true
        } else {
            s = s.min(a);
            e = e.max(b);
            false
        }
    });
    let at = r.partition_point(|&(a, _)| a < s);
    r.insert(at, (s, e));
}

pub(super) fn covers(r: &Ranges, s: u64, e: u64) -> bool {
    r.iter().any(|&(a, b)| a <= s && e <= b)
}

/// Rows apart from which a stripe write carries out the rows its chunks write as separate
/// runs: one plan over both would read and write the parity's rows (and a reconstruct-write's
/// other chunks) over the whole gap. Each run is a plan of its own, in turn: its reads, its
/// log round, its member writes. Chosen, not swept: no stripe of 64 KiB strips (the default)
/// or narrower splits; measured only where it wins big (write-back, sparse writes over 1 MiB
/// strips: twice the IOPS). Runs never share a log band (4 KiB), so one run's entries never
/// wait on the other's.
pub(super) const ROW_GAP_SPLIT_BYTES: u64 = 64 << 10;
const _: () = assert!(ROW_GAP_SPLIT_BYTES >= crate::ppl::BAND_BYTES);

/// The row ranges a stripe write carries out one after another: the in-chunk ranges its
/// chunks write (`written`, any order), merged where they touch or are less than `gap`
/// apart, in order. Every written range lies within one run.
pub(super) fn row_runs(written: impl IntoIterator<Item = (u64, u64)>, gap: u64) -> Ranges {
    let mut ranges: Ranges = written.into_iter().filter(|(s, e)| s < e).collect();
    ranges.sort_unstable();
    let mut runs: Ranges = Vec::with_capacity(ranges.len());
    for (s, e) in ranges {
        match runs.last_mut() {
            Some((_, end)) if s <= *end || s - *end < gap => *end = (*end).max(e),
            _ => runs.push((s, e)),
        }
    }
    runs
}

/// A chunk of one stripe: a data chunk (by data index), P or Q.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    Data(usize),
    P,
    Q,
}

/// What a chunk's member can still do for one stripe write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Health {
    /// Its rows can be read: not failed, and no read error there during this write.
    pub readable: bool,
    /// It takes writes: not failed (a read error alone does not stop writes to it).
    pub writable: bool,
}

impl Health {
    pub const OK: Health = Health {
        readable: true,
        writable: true,
    };
    pub const FAILED: Health = Health {
        readable: false,
        writable: false,
    };
    /// Returned a read error during this write, but still takes writes.
    pub const READ_ERROR: Health = Health {
        readable: false,
        writable: true,
    };
}

/// The new bytes one data chunk receives in a write over rows `[r0, r1)`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NewBytes {
    /// Rows `[start, end)` spanned by the new bytes; empty (`start == end`) when untouched.
    pub hull: (u64, u64),
    /// The new bytes cover their hull without gaps.
    pub hull_covered: bool,
    /// The new bytes cover every row of the write.
    pub rows_covered: bool,
}

impl NewBytes {
    pub fn touched(&self) -> bool {
        self.hull.0 < self.hull.1
    }
}

/// One data chunk as a stripe write sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataChunk {
    pub new: NewBytes,
    pub health: Health,
}

/// Everything the planner needs to know about one stripe write.
#[derive(Clone, Debug)]
pub struct StripeWrite {
    /// Rows `[r0, r1)` (bytes within each chunk) the write covers.
    pub rows: (u64, u64),
    /// Per data index.
    pub data: Vec<DataChunk>,
    pub p: Health,
    /// RAID 6 only.
    pub q: Option<Health>,
    /// The stripe's parity is known to match its data (in sync and not stale): only then may
    /// read-modify-write trust it.
    pub parity_trusted: bool,
    /// An earlier plan for this write failed on a read: rebuild from the stripe instead.
    pub force_reconstruct: bool,
}

/// Rows `[start, end)` of one chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rows {
    pub target: Target,
    pub start: u64,
    pub end: u64,
}

/// What the executor does for one stripe write, in order: read `reads` from the members
/// (and, for [`Plan::Reconstruct`], rebuild the old rows of `rebuild` from the stripe),
/// compute the new data and parity as `plan` says, write `writes`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WritePlan {
    pub plan: Plan,
    pub reads: Vec<Rows>,
    /// Data chunks whose old rows `[r0, r1)` a reconstruct-write needs.
    pub rebuild: Vec<usize>,
    pub writes: Vec<Rows>,
}

/// Plans one stripe write (md's counting rule, see [`choose`], with the overrides folded in).
/// `None` when a touched data chunk cannot be written and no parity chunk can carry its
/// bytes: the write cannot be stored.
pub fn plan_write(w: &StripeWrite) -> Option<WritePlan> {
    let (r0, r1) = w.rows;
    assert!(r0 < r1, "a stripe write covers at least one row");
    for c in &w.data {
        assert!(
            !c.new.touched() || (r0 <= c.new.hull.0 && c.new.hull.1 <= r1),
            "new bytes {:?} outside the write's rows {r0}..{r1}",
            c.new.hull
        );
    }
    // Past the parity's tolerance nothing is planned: new bytes on the survivors (a
    // data-only write once P and Q are lost) would disagree with the parity a forced start
    // rebuilds the lost chunks from.
    let q = w.q.map(|q| !q.readable);
    let parity_chunks = 1 + usize::from(q.is_some());
    let lost = (w.data.iter()).filter(|c| !c.health.readable).count()
        + usize::from(!w.p.readable)
        + usize::from(q.unwrap_or(false));
    if lost > parity_chunks {
        return None;
    }
    let plan = decide(w);
    let mut io = WritePlan {
        plan,
        reads: Vec::new(),
        rebuild: Vec::new(),
        writes: Vec::new(),
    };
    match plan {
        Plan::DataOnly => io.data_only(w)?,
        Plan::Rmw => io.read_modify_write(w),
        Plan::FullRows | Plan::Rcw | Plan::Reconstruct => io.whole_rows(w),
    }
    Some(io)
}

/// The plan for `w`: md's counting rule ([`choose`]), then the overrides — parity that takes
/// writes but cannot be read is generated afresh (a reconstruct-write, or a reconstruct where
/// an uncovered chunk is unreadable), and a write whose earlier plan failed on a read
/// reconstructs.
fn decide(w: &StripeWrite) -> Plan {
    let touched: Vec<bool> = w.data.iter().map(|c| c.new.touched()).collect();
    let covered: Vec<bool> = w.data.iter().map(|c| c.new.rows_covered).collect();
    let unreadable: Vec<bool> = w.data.iter().map(|c| !c.health.readable).collect();
    let q = w.q.unwrap_or(Health::FAILED);
    let parity_readable = usize::from(w.p.readable) + usize::from(q.readable);
    let parity_writable = w.p.writable || q.writable;
    let rcw_possible = (covered.iter().zip(&unreadable)).all(|(&c, &u)| c || !u);
    let mut plan = choose(
        &touched,
        &covered,
        &unreadable,
        parity_readable,
        w.parity_trusted,
    );
    // A parity chunk that takes writes but cannot be read would keep stale bytes under RMW
    // (which only updates what it read): generate parity afresh instead.
    let parity_unreadable_but_writable =
        (w.p.writable && !w.p.readable) || (w.q.is_some() && q.writable && !q.readable);
    if plan == Plan::Rmw && parity_unreadable_but_writable {
        plan = if rcw_possible {
            Plan::Rcw
        } else {
            Plan::Reconstruct
        };
    }
    if w.force_reconstruct && matches!(plan, Plan::Rmw | Plan::Rcw) {
        plan = Plan::Reconstruct;
    }
    if plan == Plan::DataOnly && parity_writable {
        // Parity unreadable but writable: generate it afresh.
        plan = if rcw_possible && !w.force_reconstruct {
            Plan::Rcw
        } else {
            Plan::Reconstruct
        };
    }
    plan
}

impl WritePlan {
    fn read(&mut self, target: Target, (start, end): (u64, u64)) {
        self.reads.push(Rows { target, start, end });
    }

    fn write(&mut self, target: Target, (start, end): (u64, u64)) {
        self.writes.push(Rows { target, start, end });
    }

    /// No parity to keep: each touched chunk's new bytes (the old bytes between them read
    /// and written back). `None` when one of them cannot be written.
    fn data_only(&mut self, w: &StripeWrite) -> Option<()> {
        let touched = || (w.data.iter().enumerate()).filter(|(_, c)| c.new.touched());
        if touched().any(|(_, c)| !c.health.writable) {
            return None;
        }
        for (i, c) in touched() {
            if !c.new.hull_covered {
                // Gaps in the new bytes: the old bytes between them are written back.
                self.read(Target::Data(i), c.new.hull);
            }
            self.write(Target::Data(i), c.new.hull);
        }
        Some(())
    }

    /// Read-modify-write: the old bytes of every touched chunk and of each readable parity
    /// chunk over the rows, then all of them written.
    fn read_modify_write(&mut self, w: &StripeWrite) {
        for (i, c) in (w.data.iter().enumerate()).filter(|(_, c)| c.new.touched()) {
            assert!(
                c.health.readable,
                "RMW reads the old bytes of every touched chunk"
            );
            self.read(Target::Data(i), c.new.hull);
            self.write(Target::Data(i), c.new.hull);
        }
        let q = w.q.unwrap_or(Health::FAILED);
        for (t, h) in [(Target::P, w.p), (Target::Q, q)] {
            if h.readable {
                self.read(t, w.rows);
                self.write(t, w.rows);
            }
        }
    }

    /// Parity from whole rows: the chunks the write does not cover read (reconstruct-write)
    /// or rebuilt from the stripe (reconstruct); every writable touched chunk and parity
    /// chunk written.
    fn whole_rows(&mut self, w: &StripeWrite) {
        let uncovered = (0..w.data.len()).filter(|&i| !w.data[i].new.rows_covered);
        match self.plan {
            Plan::Rcw => {
                for i in uncovered {
                    self.read(Target::Data(i), w.rows);
                }
            }
            Plan::Reconstruct => self.rebuild.extend(uncovered),
            _ => assert!(uncovered.count() == 0, "full rows cover every chunk"),
        }
        let writable = |c: &&DataChunk| c.new.touched() && c.health.writable;
        for (i, c) in (w.data.iter().enumerate()).filter(|(_, c)| writable(c)) {
            self.write(Target::Data(i), c.new.hull);
        }
        let q = w.q.unwrap_or(Health::FAILED);
        for (t, h) in [(Target::P, w.p), (Target::Q, q)] {
            if h.writable {
                self.write(t, w.rows);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_runs_split_only_at_gaps_of_the_split_width() {
        let k = 1 << 10;
        // Two 4 KiB writes 60 KiB apart stay one run; 64 KiB apart they are two.
        assert_eq!(
            row_runs([(0, 4 * k), (64 * k, 68 * k)], 64 * k),
            [(0, 68 * k)]
        );
        assert_eq!(
            row_runs([(132 * k, 136 * k), (0, 4 * k)], 64 * k),
            [(0, 4 * k), (132 * k, 136 * k)]
        );
        // Overlapping and touching ranges of different chunks merge; empty ones vanish.
        assert_eq!(
            row_runs([(8 * k, 16 * k), (0, 12 * k), (16 * k, 20 * k), (5, 5)], 0),
            [(0, 12 * k), (8 * k, 20 * k)]
                .iter()
                .fold(Vec::new(), |mut r, &(s, e)| {
                    add_range(&mut r, s, e);
                    r
                })
        );
        assert!(row_runs([], 64 * k).is_empty());
    }

    /// Against a definition: rows a and b share a run when the written rows between them
    /// leave no gap of `gap` or more; every written range inside one run; runs in order.
    #[test]
    fn row_runs_match_a_row_by_row_definition() {
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for _ in 0..500 {
            let gap = next(6);
            let written: Vec<(u64, u64)> = (0..next(6))
                .map(|_| {
                    let s = next(40);
                    (s, s + next(6))
                })
                .collect();
            let runs = row_runs(written.iter().copied(), gap);
            let mut rows = [false; 48];
            for &(s, e) in &written {
                rows[s as usize..e as usize]
                    .iter_mut()
                    .for_each(|r| *r = true);
            }
            // The definition: maximal spans of written rows joined across gaps < `gap`.
            let mut want: Vec<(u64, u64)> = Vec::new();
            for (i, _) in rows.iter().enumerate().filter(|(_, w)| **w) {
                let i = i as u64;
                match want.last_mut() {
                    Some((_, e)) if i < *e + gap || i == *e => *e = i + 1,
                    _ => want.push((i, i + 1)),
                }
            }
            assert_eq!(runs, want, "{written:?} gap {gap}");
            for &(s, e) in written.iter().filter(|(s, e)| s < e) {
                assert!(runs.iter().any(|&(a, b)| a <= s && e <= b));
            }
        }
    }

    #[test]
    fn choose_follows_md_counting() {
        let f = false;
        let t = true;
        // RAID 5 of 4 (3 data): 4K into chunk 0 → RMW 1+1 = 2, RCW 2: tie goes to RCW.
        assert_eq!(choose(&[t, f, f], &[t, f, f], &[f; 3], 1, true), Plan::Rcw);
        // RAID 5 of 8 (7 data): RMW 2 < RCW 6.
        let mut touched = [f; 7];
        touched[3] = t;
        assert_eq!(choose(&touched, &touched, &[f; 7], 1, true), Plan::Rmw);
        // Not in sync: never RMW.
        assert_eq!(choose(&touched, &touched, &[f; 7], 1, false), Plan::Rcw);
        // RAID 6 of 6 (4 data): RMW 1+2 = 3, RCW 3 → RCW; of 7: RMW 3 < RCW 4.
        assert_eq!(
            choose(&[t, f, f, f], &[t, f, f, f], &[f; 4], 2, true),
            Plan::Rcw
        );
        assert_eq!(
            choose(&[t, f, f, f, f], &[t, f, f, f, f], &[f; 5], 2, true),
            Plan::Rmw
        );
        // Full rows: no reads.
        assert_eq!(choose(&[t; 3], &[t; 3], &[f; 3], 1, false), Plan::FullRows);
        // Written chunk lost: RMW impossible, RCW possible (it is covered).
        assert_eq!(choose(&touched, &touched, &touched, 1, true), Plan::Rcw);
        // An unwritten chunk lost and the written one lost too: reconstruct.
        let mut lost = touched;
        lost[0] = t;
        assert_eq!(
            choose(&touched, &touched, &lost, 1, true),
            Plan::Reconstruct
        );
        // Unwritten chunk lost, RMW possible.
        let mut lost = [f; 7];
        lost[0] = t;
        assert_eq!(choose(&touched, &touched, &lost, 1, true), Plan::Rmw);
        // Parity lost.
        assert_eq!(choose(&touched, &touched, &[f; 7], 0, true), Plan::DataOnly);
    }

    #[test]
    fn ranges_merge() {
        let mut r = Ranges::new();
        add_range(&mut r, 10, 20);
        add_range(&mut r, 30, 40);
        add_range(&mut r, 20, 30);
        assert_eq!(r, vec![(10, 40)]);
        add_range(&mut r, 0, 5);
        assert_eq!(r, vec![(0, 5), (10, 40)]);
        assert!(covers(&r, 12, 40));
        assert!(!covers(&r, 4, 11));
    }

    #[test]
    fn recovery_patterns() {
        assert_eq!(
            recovery(&[1], true, false),
            Some((Loss::Data(1), true, false))
        );
        assert_eq!(
            recovery(&[1], false, true),
            Some((Loss::DataP(1), false, true))
        );
        assert_eq!(
            recovery(&[0, 2], true, true),
            Some((Loss::TwoData(0, 2), true, true))
        );
        assert_eq!(recovery(&[0, 2], true, false), None);
        assert_eq!(recovery(&[1], false, false), None);
    }

    fn chunk(hull: (u64, u64), rows_covered: bool, health: Health) -> DataChunk {
        DataChunk {
            new: NewBytes {
                hull,
                hull_covered: true,
                rows_covered,
            },
            health,
        }
    }

    fn untouched(health: Health) -> DataChunk {
        chunk((0, 0), false, health)
    }

    /// RAID 5 of 8 (7 data chunks): a 4 KiB write into chunk 3.
    fn raid5_small(health: impl Fn(usize) -> Health, p: Health) -> StripeWrite {
        StripeWrite {
            rows: (0, 4096),
            data: (0..7)
                .map(|i| {
                    if i == 3 {
                        chunk((0, 4096), true, health(i))
                    } else {
                        untouched(health(i))
                    }
                })
                .collect(),
            p,
            q: None,
            parity_trusted: true,
            force_reconstruct: false,
        }
    }

    fn targets(rows: &[Rows]) -> Vec<Target> {
        rows.iter().map(|r| r.target).collect()
    }

    #[test]
    fn healthy_small_write_is_rmw() {
        let p = plan_write(&raid5_small(|_| Health::OK, Health::OK)).expect("plan");
        assert_eq!(p.plan, Plan::Rmw);
        assert_eq!(targets(&p.reads), vec![Target::Data(3), Target::P]);
        assert_eq!(targets(&p.writes), vec![Target::Data(3), Target::P]);
    }

    #[test]
    fn untrusted_parity_is_regenerated() {
        let mut w = raid5_small(|_| Health::OK, Health::OK);
        w.parity_trusted = false;
        let p = plan_write(&w).expect("plan");
        assert_eq!(p.plan, Plan::Rcw);
        assert_eq!(p.reads.len(), 6, "the six other data chunks");
        assert_eq!(targets(&p.writes), vec![Target::Data(3), Target::P]);
    }

    /// Every single lost member of a RAID 5 of 8 under a small write.
    #[test]
    fn every_single_loss() {
        for lost in 0..7 {
            let p = plan_write(&raid5_small(
                |i| {
                    if i == lost {
                        Health::FAILED
                    } else {
                        Health::OK
                    }
                },
                Health::OK,
            ))
            .expect("one loss is within tolerance");
            if lost == 3 {
                // The written chunk is lost: its bytes go into parity only.
                assert_eq!(p.plan, Plan::Rcw);
                assert_eq!(targets(&p.writes), vec![Target::P]);
            } else {
                assert_eq!(p.plan, Plan::Rmw, "lost {lost}");
                assert_eq!(targets(&p.writes), vec![Target::Data(3), Target::P]);
            }
        }
        let p = plan_write(&raid5_small(|_| Health::OK, Health::FAILED)).expect("plan");
        assert_eq!(p.plan, Plan::DataOnly);
        assert_eq!(targets(&p.writes), vec![Target::Data(3)]);
    }

    #[test]
    fn unreadable_but_writable_parity_is_regenerated_not_left_stale() {
        let p = plan_write(&raid5_small(|_| Health::OK, Health::READ_ERROR)).expect("plan");
        assert_eq!(p.plan, Plan::Rcw);
        assert!(targets(&p.writes).contains(&Target::P));
        // RAID 6: Q returned a read error; RMW would have updated P only.
        let mut w = raid5_small(|_| Health::OK, Health::OK);
        w.q = Some(Health::READ_ERROR);
        let p = plan_write(&w).expect("plan");
        assert_ne!(p.plan, Plan::Rmw);
        assert_eq!(
            targets(&p.writes),
            vec![Target::Data(3), Target::P, Target::Q]
        );
    }

    #[test]
    fn written_chunk_with_a_read_error_is_still_written() {
        let p = plan_write(&raid5_small(
            |i| {
                if i == 3 {
                    Health::READ_ERROR
                } else {
                    Health::OK
                }
            },
            Health::OK,
        ))
        .expect("plan");
        assert_eq!(p.plan, Plan::Rcw);
        assert_eq!(targets(&p.writes), vec![Target::Data(3), Target::P]);
    }

    #[test]
    fn unstorable_write_has_no_plan() {
        // The written chunk and P both failed: nothing can hold the new bytes.
        assert!(plan_write(&raid5_small(
            |i| if i == 3 { Health::FAILED } else { Health::OK },
            Health::FAILED
        ))
        .is_none());
    }

    #[test]
    fn two_losses_on_raid6_reconstruct() {
        // RAID 6 of 6 (4 data): chunk 0 written, chunks 1 and 2 lost.
        let w = StripeWrite {
            rows: (0, 512),
            data: vec![
                chunk((0, 512), true, Health::OK),
                untouched(Health::FAILED),
                untouched(Health::FAILED),
                untouched(Health::OK),
            ],
            p: Health::OK,
            q: Some(Health::OK),
            parity_trusted: true,
            force_reconstruct: false,
        };
        let p = plan_write(&w).expect("two losses are within RAID 6's tolerance");
        assert_eq!(p.plan, Plan::Rmw, "RMW needs only chunk 0, P and Q");
        let mut forced = w.clone();
        forced.force_reconstruct = true;
        let p = plan_write(&forced).expect("plan");
        assert_eq!(p.plan, Plan::Reconstruct);
        assert_eq!(p.rebuild, vec![1, 2, 3]);
        assert_eq!(
            targets(&p.writes),
            vec![Target::Data(0), Target::P, Target::Q]
        );
    }

    #[test]
    fn gaps_in_data_only_writes_read_the_old_bytes() {
        let mut w = raid5_small(|_| Health::OK, Health::FAILED);
        w.data[3].new.hull_covered = false;
        let p = plan_write(&w).expect("plan");
        assert_eq!(p.plan, Plan::DataOnly);
        assert_eq!(targets(&p.reads), vec![Target::Data(3)]);
    }
}
