//! The seeded request generator: the same seed, pattern and span give the same requests in
//! the same order, so a run repeats exactly (on a simulated target to the nanosecond).

use super::workload::Entry;
use nbraid_sim::Rng;

/// One request to issue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    pub offset: u64,
    pub len: u64,
    pub write: bool,
}

/// Requests of one job over `[base, base + span)`.
pub struct Generator {
    mix: Vec<Entry>,
    /// Cumulative shares, for picking an entry.
    cumulative: Vec<f64>,
    rng: Rng,
    base: u64,
    span: u64,
    /// Where the next sequential request starts (relative to `base`).
    cursor: u64,
    /// A scan under way: its entry, whether it writes, where it continues (relative to
    /// `base`) and how many requests it has left.
    scan: Option<(usize, bool, u64, u64)>,
}

impl Generator {
    /// `span` must hold the largest request of `mix`.
    pub fn new(mix: &[Entry], seed: u64, base: u64, span: u64) -> Generator {
        let largest = mix.iter().map(|e| e.size_bytes).max().unwrap_or(0);
        assert!(
            span >= largest,
            "span {span} below the largest request {largest}"
        );
        let mut sum = 0.0;
        let cumulative = mix
            .iter()
            .map(|e| {
                sum += e.share;
                sum
            })
            .collect();
        Generator {
            mix: mix.to_vec(),
            cumulative,
            rng: Rng::new(seed),
            base,
            span,
            cursor: 0,
            scan: None,
        }
    }

    pub fn next_request(&mut self) -> Request {
        if let Some((i, write, at, left)) = self.scan.take() {
            let len = self.mix[i].size_bytes;
            // A scan that reaches the end of the span stops there.
            if at + len <= self.span {
                if left > 1 {
                    self.scan = Some((i, write, at + len, left - 1));
                }
                return Request {
                    offset: self.base + at,
                    len,
                    write,
                };
            }
        }
        let total = *self.cumulative.last().expect("a pattern has entries");
        let pick = self.rng.unit() * total;
        let i = self
            .cumulative
            .iter()
            .position(|&c| pick < c)
            .unwrap_or(self.mix.len() - 1);
        let e = self.mix[i];
        let write = self.rng.unit() * 100.0 >= e.read_pct;
        let random = self.rng.unit() * 100.0 < e.random_pct;
        let len = e.size_bytes;
        let offset = if random {
            // Aligned to the request size when it is a power of two (as fio does), else to
            // the 512-byte sector.
            let align = if len.is_power_of_two() { len } else { 512 };
            self.rng.below((self.span - len) / align + 1) * align
        } else {
            if self.cursor + len > self.span {
                self.cursor = 0;
            }
            let o = self.cursor;
            self.cursor += len;
            o
        };
        if e.run > 1 {
            self.scan = Some((i, write, offset + len, e.run - 1));
        }
        Request {
            offset: self.base + offset,
            len,
            write,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::workload::{Workload, FILESERVER};
    use super::*;

    #[test]
    fn a_seed_repeats_and_another_differs() {
        let run = |seed| {
            let mut g = Generator::new(&FILESERVER, seed, 0, 1 << 30);
            (0..1000).map(|_| g.next_request()).collect::<Vec<_>>()
        };
        assert_eq!(run(1), run(1));
        assert_ne!(run(1), run(2));
    }

    #[test]
    fn the_pattern_is_followed() {
        let mut g = Generator::new(&FILESERVER, 7, 4096, 1 << 30);
        let n = 100_000;
        let reqs: Vec<_> = (0..n).map(|_| g.next_request()).collect();
        let share = |f: &dyn Fn(&Request) -> bool| {
            reqs.iter().filter(|r| f(r)).count() as f64 / n as f64 * 100.0
        };
        assert!((share(&|r| !r.write) - 80.0).abs() < 1.0);
        assert!((share(&|r| r.len == 4096) - 60.0).abs() < 1.0);
        assert!((share(&|r| r.len == 512) - 10.0).abs() < 1.0);
        for r in &reqs {
            assert!(r.offset >= 4096 && r.offset + r.len <= 4096 + (1 << 30));
            assert_eq!((r.offset - 4096) % r.len, 0, "aligned to its size");
        }
    }

    #[test]
    fn a_scan_reads_its_run_in_a_row_from_a_random_place() {
        let mix = [
            Entry {
                size_bytes: 8192,
                share: 1.0,
                read_pct: 50.0,
                random_pct: 100.0,
                run: 1,
            },
            Entry {
                size_bytes: 65536,
                share: 1.0,
                read_pct: 100.0,
                random_pct: 100.0,
                run: 8,
            },
        ];
        let mut g = Generator::new(&mix, 3, 0, 1 << 30);
        let reqs: Vec<Request> = (0..2000).map(|_| g.next_request()).collect();
        let mut k = 0;
        let mut scans = 0;
        while k < reqs.len() {
            if reqs[k].len == 8192 {
                k += 1;
                continue;
            }
            // Up to 8 extents in a row (the last scan may be cut by the end of the list).
            let run = &reqs[k..(k + 8).min(reqs.len())];
            assert_eq!(run[0].offset % 65536, 0);
            for w in run.windows(2) {
                assert_eq!((w[1].offset, w[1].len), (w[0].offset + 65536, 65536));
            }
            assert!(run.iter().all(|r| !r.write));
            scans += 1;
            k += run.len();
        }
        assert!(
            (scans as f64 - 2000.0 / 9.0 * 1.0).abs() < 40.0,
            "{scans} scans"
        );
    }

    #[test]
    fn sequential_requests_follow_each_other_and_wrap() {
        let mix = &Workload::SeqRead.points(Some(1 << 20), None).unwrap()[0].mix;
        let mut g = Generator::new(mix, 1, 0, 3 << 20);
        let offs: Vec<u64> = (0..4).map(|_| g.next_request().offset).collect();
        assert_eq!(offs, [0, 1 << 20, 2 << 20, 0]);
    }
}
