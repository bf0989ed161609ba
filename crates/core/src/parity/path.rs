//! Which implementation of the kernels runs: the paths, and what the CPU offers.

use std::fmt;
use std::sync::OnceLock;

/// An implementation of the kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Path {
    /// Portable: 64-bit words (SWAR), any CPU.
    Scalar,
    /// x86-64 SSSE3: 16-byte registers, PSHUFB multiplication.
    Ssse3,
    /// x86-64 AVX2: 32-byte registers.
    Avx2,
    /// x86-64 AVX-512F+BW: 64-byte registers, PSHUFB multiplication.
    Avx512,
    /// x86-64 AVX-512F+BW with GFNI: multiplication as one affine transform.
    Avx512Gfni,
}

impl Path {
    /// Every path, slowest first.
    pub const ALL: [Path; 5] = [
        Path::Scalar,
        Path::Ssse3,
        Path::Avx2,
        Path::Avx512,
        Path::Avx512Gfni,
    ];

    /// A short lowercase name (used in bench ids and test messages).
    pub fn name(self) -> &'static str {
        match self {
            Path::Scalar => "scalar",
            Path::Ssse3 => "ssse3",
            Path::Avx2 => "avx2",
            Path::Avx512 => "avx512",
            Path::Avx512Gfni => "avx512-gfni",
        }
    }

    /// The CPU features this path needs.
    pub fn features(self) -> &'static [&'static str] {
        match self {
            Path::Scalar => &[],
            Path::Ssse3 => &["ssse3"],
            Path::Avx2 => &["avx2"],
            Path::Avx512 => &["avx512f", "avx512bw"],
            Path::Avx512Gfni => &["avx512f", "avx512bw", "gfni"],
        }
    }

    /// The features this path needs that the CPU (or the target architecture) lacks; empty
    /// when the path can run.
    pub fn missing_features(self) -> Vec<&'static str> {
        self.features()
            .iter()
            .copied()
            .filter(|f| !cpu_has(f))
            .collect()
    }

    /// Whether this path can run here.
    pub fn is_available(self) -> bool {
        match self {
            Path::Scalar => true,
            _ => cfg!(target_arch = "x86_64") && self.missing_features().is_empty(),
        }
    }

    /// The paths that can run here, slowest first.
    pub fn available() -> Vec<Path> {
        Path::ALL.into_iter().filter(|p| p.is_available()).collect()
    }

    /// The fastest path that can run here (detected once).
    pub fn best() -> Path {
        static BEST: OnceLock<Path> = OnceLock::new();
        *BEST.get_or_init(|| {
            *Path::available()
                .last()
                .expect("Scalar is always available")
        })
    }

    /// Why this path cannot run, as "CPU lacks avx512bw, gfni"; `None` when it can.
    pub fn unavailable_reason(self) -> Option<String> {
        if self.is_available() {
            None
        } else if !cfg!(target_arch = "x86_64") {
            Some("not an x86-64 build".to_string())
        } else {
            Some(format!("CPU lacks {}", self.missing_features().join(", ")))
        }
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(target_arch = "x86_64")]
fn cpu_has(feature: &str) -> bool {
    match feature {
        "ssse3" => is_x86_feature_detected!("ssse3"),
        "avx2" => is_x86_feature_detected!("avx2"),
        "avx512f" => is_x86_feature_detected!("avx512f"),
        "avx512bw" => is_x86_feature_detected!("avx512bw"),
        "gfni" => is_x86_feature_detected!("gfni"),
        _ => false,
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn cpu_has(_feature: &str) -> bool {
    false
}
