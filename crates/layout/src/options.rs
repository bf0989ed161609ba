//! A volume's named options beside its geometry: how mirrors pick the copy that serves a read and
//! when writes are acknowledged. Defined once here, below both the config (which parses their
//! names) and the engine (which acts on them).

use std::fmt;
use std::str::FromStr;

/// How a mirror picks the copy that serves a read (meaningful for raid1 and raid10).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ReadPolicy {
    /// Alternate between copies.
    RoundRobin,
    /// The copy with the fewest reads in flight (SSDs).
    #[default]
    LeastPending,
    /// Each copy serves its own band of the address space while not much busier than the
    /// others (spinning disks: shorter seeks, denser queues).
    Nearest,
}

impl ReadPolicy {
    pub const ALL: [ReadPolicy; 3] = [
        ReadPolicy::RoundRobin,
        ReadPolicy::LeastPending,
        ReadPolicy::Nearest,
    ];

    /// The name the config writes.
    pub fn name(self) -> &'static str {
        match self {
            ReadPolicy::RoundRobin => "round-robin",
            ReadPolicy::LeastPending => "least-pending",
            ReadPolicy::Nearest => "nearest",
        }
    }
}

impl fmt::Display for ReadPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ReadPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        ReadPolicy::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| {
                let valid: Vec<&str> = ReadPolicy::ALL.iter().map(|p| p.name()).collect();
                format!("unknown read_policy \"{s}\"; valid: {}", valid.join(", "))
            })
    }
}

/// When a volume acknowledges a write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CacheMode {
    /// A write completes when it is on its members.
    WriteThrough,
    /// A write completes when it reaches the stripe cache; FLUSH and FUA force it to the
    /// members. Partial-stripe writes wait in a cache of at most `bytes` (for the whole volume,
    /// shared evenly by its parity groups) until the stripe fills, is evicted or flushed.
    WriteBack { bytes: u64 },
}

impl Default for CacheMode {
    fn default() -> Self {
        CacheMode::WriteBack { bytes: 32 << 20 }
    }
}

impl CacheMode {
    /// The names the config writes, write-back first.
    pub const NAMES: [&'static str; 2] = ["write-back", "write-through"];

    /// The name the config writes.
    pub fn name(self) -> &'static str {
        match self {
            CacheMode::WriteBack { .. } => Self::NAMES[0],
            CacheMode::WriteThrough => Self::NAMES[1],
        }
    }

    /// The mode called `name`, a write-back cache bounded by `write_back_bytes`.
    pub fn from_name(name: &str, write_back_bytes: u64) -> Result<CacheMode, String> {
        match name {
            "write-back" => Ok(CacheMode::WriteBack {
                bytes: write_back_bytes,
            }),
            "write-through" => Ok(CacheMode::WriteThrough),
            _ => Err(format!(
                "unknown cache \"{name}\"; valid: {}",
                Self::NAMES.join(", ")
            )),
        }
    }

    /// The write-back cache's bound, `None` for write-through.
    pub fn cache_bytes(self) -> Option<u64> {
        match self {
            CacheMode::WriteBack { bytes } => Some(bytes),
            CacheMode::WriteThrough => None,
        }
    }
}

impl fmt::Display for CacheMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for p in ReadPolicy::ALL {
            assert_eq!(p.name().parse::<ReadPolicy>(), Ok(p));
        }
        let e = "fastest".parse::<ReadPolicy>().unwrap_err();
        assert!(e.contains("round-robin, least-pending, nearest"), "{e}");
        for name in CacheMode::NAMES {
            assert_eq!(CacheMode::from_name(name, 7).unwrap().name(), name);
        }
        assert_eq!(
            CacheMode::from_name("write-back", 7).unwrap().cache_bytes(),
            Some(7)
        );
        let e = CacheMode::from_name("none", 7).unwrap_err();
        assert!(e.contains("write-back, write-through"), "{e}");
    }
}
