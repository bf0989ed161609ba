//! What the rings say of the life a dirty start recovers from: whether that life logged
//! every row its crash may have torn (the replay then closes the write hole) or not (only a
//! resync finds them, and a role out rebuilds them from torn parity). Every open marks the
//! rings with its life (`recover::mark`) and says so in the marker (`codec::Cover`); pure.

use super::codec::{Batch, Cover};

/// What the rings say of the life that marked them last.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LastLife {
    /// It logged every partial-stripe write over parity in sync: the replay closes the hole.
    Logged,
    /// It did not (the log off, mid-reshape, or an earlier unlogged crash not yet resynced).
    Unlogged,
    /// Nothing says: no batch (rings never marked), or only markers of an nbraid from before
    /// the marker's word with no entry of that life. Taken as [`LastLife::Unlogged`].
    Unknown,
}

impl LastLife {
    /// Whether the replay alone closes the write hole of that life's crash. `Unknown` is
    /// not: at worst a dirty start resyncs before serving, and a dirty degraded one needs
    /// `--force-assemble`, once, where trusting it could serve wrong bytes silently.
    pub fn logged(self) -> bool {
        self == LastLife::Logged
    }

    /// Whether a start reads the rings' word at all: a dirty one (not `clean`) that logs
    /// (`logs`), not mid-reshape (`reshaping`: assembly judges that start unlogged from the
    /// records alone) and that writes (`writes`: a read-only start of a dirty volume with
    /// parity is refused, `metadata::read_only`). Only there can the word change what the
    /// start does. The start (`metadata::array::start`) and `nbraid check`, which reads the
    /// rings read-only, ask this alike.
    pub fn read_at_start(clean: bool, logs: bool, reshaping: bool, writes: bool) -> bool {
        !clean && logs && !reshaping && writes
    }
}

/// What `rings` (every batch found on each ring read) say of the newest life among them:
/// `Unlogged` if a marker of it says so (a life marks every ring alike; the safe word wins),
/// else `Logged` if a marker says so or it wrote an entry (a logging life's marker block may
/// be overwritten once its ring wraps; an unlogged one writes nothing after its marker),
/// else `Unknown`.
pub fn last_life(rings: &[Vec<Batch>]) -> LastLife {
    let Some(life) = rings.iter().flatten().map(|b| b.life).max() else {
        return LastLife::Unknown;
    };
    let mut logged = false;
    for b in rings.iter().flatten().filter(|b| b.life == life) {
        match b.cover {
            Cover::Unlogged => return LastLife::Unlogged,
            Cover::Logged => logged = true,
            Cover::Unsaid => logged |= !b.entries.is_empty(),
        }
    }
    match logged {
        true => LastLife::Logged,
        false => LastLife::Unknown,
    }
}

/// The word an open's marker gives: `Logged` when it logs (`logs`) and starts over parity
/// in sync — clean (`clean`), or after a crash the replay covers (`last`); else `Unlogged`,
/// until the resync of the rows an unlogged crash tore is done (the open marks again then).
pub fn cover_of_open(logs: bool, clean: bool, last: LastLife) -> Cover {
    match logs && (clean || last.logged()) {
        true => Cover::Logged,
        false => Cover::Unlogged,
    }
}

#[cfg(test)]
mod tests {
    use super::super::codec::Entry;
    use super::*;

    fn batch(life: u64, cover: Cover, entries: usize) -> Batch {
        let e = Entry {
            seq: 1,
            group: 0,
            stripe: 0,
            band: 0,
            sectors: 8,
            parity: 1,
            masks: vec![1, 0],
            pp: None,
            pq: None,
        };
        Batch {
            life,
            tail: 0,
            cover,
            entries: vec![e; entries],
        }
    }

    #[test]
    fn the_newest_life_decides_and_an_unlogged_word_wins() {
        use Cover::*;
        let unlogged_after_logged = [
            vec![
                batch(3, Logged, 0),
                batch(3, Unsaid, 2),
                batch(4, Unlogged, 0),
            ],
            vec![batch(4, Unlogged, 0)],
        ];
        assert_eq!(last_life(&unlogged_after_logged), LastLife::Unlogged);
        let logged_after_unlogged = [vec![batch(4, Unlogged, 0), batch(5, Logged, 0)]];
        assert_eq!(last_life(&logged_after_unlogged), LastLife::Logged);
        // Its marker overwritten by the ring's wrap: its entries say it logged.
        assert_eq!(
            last_life(&[vec![batch(4, Unlogged, 0), batch(5, Unsaid, 1)]]),
            LastLife::Logged
        );
        // One ring's marker says unlogged: the life did not log, whatever another holds.
        let mixed = [vec![batch(6, Logged, 0)], vec![batch(6, Unlogged, 0)]];
        assert_eq!(last_life(&mixed), LastLife::Unlogged);
    }

    #[test]
    fn rings_that_say_nothing_are_taken_as_unlogged() {
        assert_eq!(last_life(&[]), LastLife::Unknown);
        assert_eq!(last_life(&[vec![], vec![]]), LastLife::Unknown);
        // An older nbraid's marker, and no entry of its life: it may have logged nothing
        // or not logged at all.
        let older = [vec![batch(2, Cover::Unsaid, 3), batch(3, Cover::Unsaid, 0)]];
        assert_eq!(last_life(&older), LastLife::Unknown);
        assert!(!LastLife::Unknown.logged() && !LastLife::Unlogged.logged());
        // An older nbraid's logging life that wrote entries.
        let older_logged = [vec![batch(3, Cover::Unsaid, 0), batch(3, Cover::Unsaid, 1)]];
        assert_eq!(last_life(&older_logged), LastLife::Logged);
    }

    #[test]
    fn only_a_dirty_start_that_logs_and_writes_outside_a_reshape_reads_the_word() {
        assert!(LastLife::read_at_start(false, true, false, true));
        assert!(!LastLife::read_at_start(true, true, false, true), "clean");
        assert!(
            !LastLife::read_at_start(false, false, false, true),
            "log off"
        );
        assert!(
            !LastLife::read_at_start(false, true, true, true),
            "mid-reshape"
        );
        assert!(
            !LastLife::read_at_start(false, true, false, false),
            "read-only"
        );
    }

    #[test]
    fn an_open_says_logged_only_when_it_logs_over_parity_in_sync() {
        use LastLife::*;
        for last in [Logged, Unlogged, Unknown] {
            assert_eq!(cover_of_open(true, true, last), Cover::Logged, "clean");
            assert_eq!(cover_of_open(false, true, last), Cover::Unlogged, "log off");
            assert_eq!(cover_of_open(false, false, last), Cover::Unlogged);
        }
        assert_eq!(cover_of_open(true, false, Logged), Cover::Logged);
        assert_eq!(cover_of_open(true, false, Unlogged), Cover::Unlogged);
        assert_eq!(cover_of_open(true, false, Unknown), Cover::Unlogged);
    }
}
