//! Latency histogram (log buckets, ~1.5% resolution, fixed memory), the process's CPU time,
//! and one cell's result.

use serde::Serialize;
use std::time::Duration;

/// Sub-buckets per power of two: values are kept to 1/64 of their magnitude.
const SUB_BITS: u32 = 6;
const SUB: u64 = 1 << SUB_BITS;

#[derive(Clone, Debug)]
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
    sum_ns: u128,
    max_ns: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: vec![0; (64 * SUB) as usize],
            total: 0,
            sum_ns: 0,
            max_ns: 0,
        }
    }
}

fn bucket(ns: u64) -> usize {
    if ns < SUB {
        return ns as usize;
    }
    let top = 63 - ns.leading_zeros(); // ≥ SUB_BITS
    let shift = top - SUB_BITS;
    let sub = (ns >> shift) - SUB; // 0..SUB
    ((u64::from(shift) + 1) * SUB + sub) as usize
}

/// The middle of a bucket's range.
fn value(bucket: usize) -> u64 {
    let b = bucket as u64;
    if b < SUB {
        return b;
    }
    let shift = b / SUB - 1;
    let low = (SUB + b % SUB) << shift;
    low + ((1u64 << shift) >> 1)
}

impl Histogram {
    pub fn record(&mut self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.counts[bucket(ns)] += 1;
        self.total += 1;
        self.sum_ns += u128::from(ns);
        self.max_ns = self.max_ns.max(ns);
    }

    pub fn mean_us(&self) -> f64 {
        if self.total == 0 {
            return 0.0;
        }
        self.sum_ns as f64 / self.total as f64 / 1e3
    }

    /// The latency below which `q` (0..=1) of the samples fall, in µs.
    pub fn quantile_us(&self, q: f64) -> f64 {
        if self.total == 0 {
            return 0.0;
        }
        let rank = ((q * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return value(i).min(self.max_ns) as f64 / 1e3;
            }
        }
        self.max_ns as f64 / 1e3
    }
}

/// User plus system CPU time of this process so far.
pub fn cpu_time() -> Duration {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes a whole rusage into the pointer it is given.
    let ru = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr());
        ru.assume_init()
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// What one cell (target × point × queue depth) measured.
#[derive(Clone, Debug, Serialize)]
pub struct CellResult {
    pub target: String,
    pub point: String,
    pub x: f64,
    pub qd: usize,
    pub jobs: usize,
    pub ops: u64,
    pub reads: u64,
    pub writes: u64,
    pub bytes: u64,
    pub seconds: f64,
    pub iops: f64,
    pub mb_s: f64,
    pub lat_mean_us: f64,
    pub lat_p50_us: f64,
    pub lat_p99_us: f64,
    pub lat_p999_us: f64,
    /// CPU time of this process per I/O (µs).
    pub cpu_us_per_io: f64,
    /// Sectors read back and compared (--verify).
    pub verified_sectors: u64,
    /// IOPS against the first target's in the same cell (several targets).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio: Option<f64>,
}

impl CellResult {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        target: &str,
        point: &str,
        x: f64,
        qd: usize,
        jobs: usize,
        counts: (u64, u64, u64),
        elapsed: Duration,
        cpu: Duration,
        hist: &Histogram,
    ) -> CellResult {
        let (reads, writes, bytes) = counts;
        let ops = reads + writes;
        let seconds = elapsed.as_secs_f64().max(1e-12);
        CellResult {
            target: target.to_string(),
            point: point.to_string(),
            x,
            qd,
            jobs,
            ops,
            reads,
            writes,
            bytes,
            seconds,
            iops: ops as f64 / seconds,
            mb_s: bytes as f64 / seconds / 1e6,
            lat_mean_us: hist.mean_us(),
            lat_p50_us: hist.quantile_us(0.5),
            lat_p99_us: hist.quantile_us(0.99),
            lat_p999_us: hist.quantile_us(0.999),
            cpu_us_per_io: if ops == 0 {
                0.0
            } else {
                cpu.as_secs_f64() * 1e6 / ops as f64
            },
            verified_sectors: 0,
            ratio: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_within_two_percent() {
        let mut h = Histogram::default();
        for us in 1..=10_000u64 {
            h.record(Duration::from_micros(us));
        }
        for (q, want) in [(0.5, 5000.0), (0.99, 9900.0), (0.999, 9990.0)] {
            let got = h.quantile_us(q);
            assert!((got - want).abs() / want < 0.02, "q{q}: {got} vs {want}");
        }
        assert!((h.mean_us() - 5000.5).abs() < 1e-6);
        assert_eq!(Histogram::default().quantile_us(0.5), 0.0);
    }

    #[test]
    fn buckets_are_monotonic() {
        let mut last = 0;
        for ns in (0..1_000_000u64).step_by(997) {
            let b = bucket(ns);
            assert!(b >= last);
            assert!(value(b).abs_diff(ns) <= ns / 64 + 1, "{ns} → {}", value(b));
            last = b;
        }
    }

    #[test]
    fn cpu_time_moves() {
        let a = cpu_time();
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        assert!(cpu_time() > a);
    }
}
