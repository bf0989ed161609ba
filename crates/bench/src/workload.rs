//! The reviews' workloads (seed 001): what one request looks like, as a table of
//! (size, share, read %, random %) entries, and the points a workload is swept over.

use anyhow::{bail, Result};

const KIB: u64 = 1024;

/// One line of an access pattern: requests of `size_bytes`, `share` of all requests (any
/// unit: shares are weights), `read_pct` of them reads, `random_pct` at random offsets (the
/// rest continue sequentially). An entry with `run` > 1 is a scan: once picked, it issues
/// `run` requests in a row, the first placed as above, the others each continuing the last.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Entry {
    pub size_bytes: u64,
    pub share: f64,
    pub read_pct: f64,
    pub random_pct: f64,
    pub run: u64,
}

const fn e(size_bytes: u64, share: f64, read_pct: f64, random_pct: f64) -> Entry {
    Entry {
        size_bytes,
        share,
        read_pct,
        random_pct,
        run: 1,
    }
}

/// StorageReview's File Server pattern: 80% reads, all random.
pub const FILESERVER: [Entry; 8] = [
    e(512, 10.0, 80.0, 100.0),
    e(KIB, 5.0, 80.0, 100.0),
    e(2 * KIB, 5.0, 80.0, 100.0),
    e(4 * KIB, 60.0, 80.0, 100.0),
    e(8 * KIB, 2.0, 80.0, 100.0),
    e(16 * KIB, 4.0, 80.0, 100.0),
    e(32 * KIB, 4.0, 80.0, 100.0),
    e(64 * KIB, 10.0, 80.0, 100.0),
];

/// StorageReview's Web Server pattern: all reads, all random.
pub const WEBSERVER: [Entry; 10] = [
    e(512, 22.0, 100.0, 100.0),
    e(KIB, 15.0, 100.0, 100.0),
    e(2 * KIB, 8.0, 100.0, 100.0),
    e(4 * KIB, 23.0, 100.0, 100.0),
    e(8 * KIB, 15.0, 100.0, 100.0),
    e(16 * KIB, 2.0, 100.0, 100.0),
    e(32 * KIB, 6.0, 100.0, 100.0),
    e(64 * KIB, 7.0, 100.0, 100.0),
    e(128 * KIB, 1.0, 100.0, 100.0),
    e(512 * KIB, 1.0, 100.0, 100.0),
];

/// iXBT's Workstation pattern (size, share, % read, % random).
pub const WORKSTATION: [Entry; 14] = [
    e(512, 1.0, 0.0, 100.0),
    e(KIB, 2.0, 0.0, 100.0),
    e(2 * KIB, 1.0, 0.0, 100.0),
    e(4 * KIB, 50.0, 60.0, 80.0),
    e(8 * KIB, 4.0, 50.0, 100.0),
    e(16 * KIB, 6.0, 50.0, 100.0),
    e(20 * KIB, 2.0, 50.0, 100.0),
    e(24 * KIB, 2.0, 50.0, 100.0),
    e(28 * KIB, 1.0, 50.0, 100.0),
    e(32 * KIB, 13.0, 70.0, 70.0),
    e(48 * KIB, 1.0, 50.0, 100.0),
    e(52 * KIB, 1.0, 50.0, 100.0),
    e(64 * KIB, 14.0, 80.0, 60.0),
    e(64 * KIB + 512, 2.0, 50.0, 100.0),
];

/// Seed 004's SQL Server (1C on MS SQL, one client): 8 KiB pages at random, 70% of them
/// read, and range scans reading index extents of 64 KiB (8 pages) eight in a row (512 KiB
/// of read-ahead) from a random place, one scan per three page requests. The scans are what
/// the strip size decides at low depth: a strip below the extent lets both disks transfer
/// one extent, while pages (strip ≥ 8 KiB) sit on one disk whatever the strip.
pub const SQL: [Entry; 2] = [
    e(8 * KIB, 3.0, 70.0, 100.0),
    Entry {
        run: 8,
        ..e(64 * KIB, 1.0, 100.0, 100.0)
    },
];

/// Queue depths of the Workstation rating: Σ IOPS(q)/q over these.
pub const WORKSTATION_QDS: [usize; 6] = [1, 2, 4, 8, 16, 32];

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Workload {
    SeqRead,
    SeqWrite,
    RandRead,
    RandWrite,
    Database,
    Sql,
    Fileserver,
    Webserver,
    Workstation,
}

/// What the points of a workload vary.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Axis {
    /// Request size in bytes.
    BlockSize,
    /// Read share in percent.
    ReadShare,
    /// Nothing: one point (the queue depth is the axis).
    None,
}

/// One point of a workload: its access pattern and its value on the workload's axis.
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    pub x: f64,
    pub label: String,
    pub mix: Vec<Entry>,
}

/// The block sizes of the review's stepped sequential pattern: 512 B doubling to 1 MiB.
pub fn stepped_sizes() -> Vec<u64> {
    (9..=20).map(|s| 1u64 << s).collect()
}

/// Read shares of the Database pattern: 100% down to 0% in steps of 10.
pub fn read_shares() -> Vec<u64> {
    (0..=10).rev().map(|i| i * 10).collect()
}

impl Workload {
    pub fn name(self) -> &'static str {
        match self {
            Workload::SeqRead => "seq-read",
            Workload::SeqWrite => "seq-write",
            Workload::RandRead => "rand-read",
            Workload::RandWrite => "rand-write",
            Workload::Database => "database",
            Workload::Sql => "sql",
            Workload::Fileserver => "fileserver",
            Workload::Webserver => "webserver",
            Workload::Workstation => "workstation",
        }
    }

    pub fn axis(self, fixed_bs: Option<u64>, fixed_read_pct: Option<u64>) -> Axis {
        match self {
            Workload::SeqRead | Workload::SeqWrite if fixed_bs.is_none() => Axis::BlockSize,
            Workload::Database if fixed_read_pct.is_none() => Axis::ReadShare,
            _ => Axis::None,
        }
    }

    /// Default queue depths: the review's QD 4 for sequential patterns, the Workstation
    /// rating's depths for Workstation, a sweep for the others.
    pub fn default_qds(self) -> Vec<usize> {
        match self {
            Workload::SeqRead | Workload::SeqWrite => vec![4],
            Workload::Workstation => WORKSTATION_QDS.to_vec(),
            Workload::Database => vec![1, 16, 64],
            Workload::Sql => vec![1, 2, 4, 16],
            _ => vec![1, 4, 16, 64, 256],
        }
    }

    /// The points to run. `bs` fixes the block size (default 4 KiB random, stepped sizes
    /// sequential, 8 KiB database); `read_pct` fixes the database read share.
    pub fn points(self, bs: Option<u64>, read_pct: Option<u64>) -> Result<Vec<Point>> {
        if let Some(b) = bs {
            if b == 0 || b % 512 != 0 {
                bail!("block size {b} must be a positive multiple of 512 bytes");
            }
            if matches!(
                self,
                Workload::Fileserver | Workload::Webserver | Workload::Workstation | Workload::Sql
            ) {
                bail!(
                    "{} has its own size distribution; --bs applies to seq-*, rand-* and database",
                    self.name()
                );
            }
        }
        if let Some(r) = read_pct {
            if r > 100 {
                bail!("read share {r}% is above 100%");
            }
            if self != Workload::Database {
                bail!("--read-pct applies to the database workload only");
            }
        }
        let one = |size: u64, read: f64, random: f64| {
            vec![Entry {
                size_bytes: size,
                share: 1.0,
                read_pct: read,
                random_pct: random,
                run: 1,
            }]
        };
        let fixed = |mix: Vec<Entry>| {
            vec![Point {
                x: 0.0,
                label: String::new(),
                mix,
            }]
        };
        Ok(match self {
            Workload::SeqRead | Workload::SeqWrite => {
                let read = if self == Workload::SeqRead {
                    100.0
                } else {
                    0.0
                };
                let sizes = bs.map_or_else(stepped_sizes, |b| vec![b]);
                sizes
                    .into_iter()
                    .map(|s| Point {
                        x: s as f64,
                        label: crate::output::size_label(s),
                        mix: one(s, read, 0.0),
                    })
                    .collect()
            }
            Workload::RandRead => fixed(one(bs.unwrap_or(4 * KIB), 100.0, 100.0)),
            Workload::RandWrite => fixed(one(bs.unwrap_or(4 * KIB), 0.0, 100.0)),
            Workload::Database => {
                let size = bs.unwrap_or(8 * KIB);
                let shares = read_pct.map_or_else(read_shares, |r| vec![r]);
                shares
                    .into_iter()
                    .map(|r| Point {
                        x: r as f64,
                        label: format!("{r}% read"),
                        mix: one(size, r as f64, 100.0),
                    })
                    .collect()
            }
            Workload::Sql => fixed(SQL.to_vec()),
            Workload::Fileserver => fixed(FILESERVER.to_vec()),
            Workload::Webserver => fixed(WEBSERVER.to_vec()),
            Workload::Workstation => fixed(WORKSTATION.to_vec()),
        })
    }
}

/// The Workstation rating: Σ IOPS(q)/q over the rating's queue depths; `None` when a depth
/// was not measured.
pub fn workstation_rating(iops_at: impl Fn(usize) -> Option<f64>) -> Option<f64> {
    WORKSTATION_QDS
        .iter()
        .map(|&q| iops_at(q).map(|v| v / q as f64))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn total(mix: &[Entry]) -> f64 {
        mix.iter().map(|e| e.share).sum()
    }

    #[test]
    fn the_review_patterns_sum_to_100_percent() {
        assert_eq!(total(&FILESERVER), 100.0);
        assert_eq!(total(&WEBSERVER), 100.0);
        assert_eq!(total(&WORKSTATION), 100.0);
    }

    #[test]
    fn sweeps_cover_the_review_steps() {
        let seq = Workload::SeqRead.points(None, None).unwrap();
        assert_eq!(seq.len(), 12);
        assert_eq!(seq[0].mix[0].size_bytes, 512);
        assert_eq!(seq[11].mix[0].size_bytes, 1 << 20);
        let db = Workload::Database.points(None, None).unwrap();
        assert_eq!(
            db.iter().map(|p| p.x).collect::<Vec<_>>()[..3],
            [100.0, 90.0, 80.0]
        );
        assert_eq!(db.last().unwrap().mix[0].read_pct, 0.0);
        assert_eq!(db[0].mix[0].size_bytes, 8192);
        assert!(Workload::Webserver.points(Some(4096), None).is_err());
        assert!(Workload::RandRead.points(Some(1000), None).is_err());
        assert!(Workload::RandRead.points(None, Some(50)).is_err());
        let sql = Workload::Sql.points(None, None).unwrap();
        assert_eq!(sql.len(), 1);
        assert_eq!((sql[0].mix[1].size_bytes, sql[0].mix[1].run), (65536, 8));
        assert!(Workload::Sql.points(Some(4096), None).is_err());
    }

    #[test]
    fn workstation_rating_weights_short_queues() {
        // 100 IOPS at every depth: 100 + 50 + 25 + 12.5 + 6.25 + 3.125.
        assert_eq!(workstation_rating(|_| Some(100.0)), Some(196.875));
        assert_eq!(workstation_rating(|q| (q < 32).then_some(1.0)), None);
    }
}
