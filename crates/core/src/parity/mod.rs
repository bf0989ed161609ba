//! Parity math: XOR, RAID-6 P+Q (md / ISA-L convention), RMW update, recovery, check.
//!
//! # Convention
//! For data chunks D₀ … D_{k-1} of one stripe, in md's syndrome-slot order:
//! P = D₀ ⊕ D₁ ⊕ … ⊕ D_{k-1} and Q = Σ gⁱ·Dᵢ over GF(2⁸) with the polynomial 0x11D and g = 2,
//! exactly as Linux md (lib/raid6) and ISA-L define them, so arrays written by those tools read
//! back the same. `k` may be 1 ..= [`MAX_DATA`] (255: beyond it gⁱ repeats and two lost chunks
//! could no longer be told apart).
//!
//! # Shape
//! - The free functions ([`xor_gen`], [`pq_gen`], [`pq_update`], [`recover_two_data`], …) run
//!   on the best path for this CPU, detected once.
//! - [`Kernels`] runs the same operations on a chosen [`Path`] (tests and benches iterate
//!   over [`Path::available`]).
//! - Kernels are written once (`kernels.rs`) against a small register trait (`vector.rs`) and
//!   instantiated for `u64` (portable SWAR, the `Scalar` path), SSSE3, AVX2, AVX-512BW and
//!   AVX-512BW + GFNI (`x86.rs`). [`reference`](mod@reference) is a byte-at-a-time oracle for tests.
//! - Every operation reads each input once and writes each output once: P and Q are
//!   accumulated in registers across all the stripe's chunks (Horner's rule for Q, two chunks
//!   per step), and recovery is fused with the syndrome computation. See `kernels.rs`.
//! - With GFNI, multiplying by a constant is one `vgf2p8affineqb` with the constant's 8×8 bit
//!   matrix (GFNI's own multiply uses the AES polynomial 0x11B, not md's 0x11D).
//!
//! # Buffers and errors
//! All chunks of one call have the same length, any length (multiples of 512 bytes are the fast
//! case; the rest is finished a register, then a byte, at a time). Recovery writes in place:
//! the `&mut [&mut [u8]]` forms take the stripe's data chunks in slot order, read the
//! survivors and overwrite the lost slots; the `_into` forms take the survivors as
//! `&[&[u8]]` (the lost slots' entries are ignored, `&[]` will do) and separate outputs.
//! No operation allocates. Mismatched lengths, out-of-range or equal slot indices and an empty or
//! oversized stripe are programmer errors: every function panics on them with a message that
//! names the argument (see each function's `# Panics`).

mod checks;
pub mod gf;
mod kernels;
mod path;
pub mod reference;
mod vector;
#[cfg(target_arch = "x86_64")]
mod x86;

#[cfg(test)]
mod tests;

use checks::*;
use kernels::{mode, PqJob, UpdJob, XorJob};
pub use path::Path;

/// The largest number of data chunks in one stripe.
pub const MAX_DATA: usize = 255;

/// Outputs at least this long (and 64-byte aligned) are written with non-temporal stores by
/// the kernels that only write them (generation, recovery; not the RMW update, which reads P
/// and Q first): such chunks are on their way to the members and would only evict the data
/// from the caches. Out of cache this is worth ~15% (measured on 1 MiB chunks); below it the
/// outputs are usually read again soon. [`Kernels::with_streaming`] turns it off.
pub const STREAM_MIN_LEN: usize = 512 * 1024;

/// One changed data chunk of a read-modify-write: its slot and its old and new contents.
#[derive(Clone, Copy, Debug)]
pub struct Change<'a> {
    /// Index of the chunk in the stripe's syndrome order (its Q coefficient is g^slot).
    pub slot: usize,
    /// The chunk as it is on the member now (covered by the current P/Q).
    pub old: &'a [u8],
    /// The chunk as it will be written.
    pub new: &'a [u8],
}

/// Which chunks of a stripe are lost, for [`recover`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loss {
    /// One data chunk (rebuilt from P; RAID 5 and RAID 6).
    Data(usize),
    /// P alone (regenerated).
    P,
    /// Q alone (regenerated).
    Q,
    /// A data chunk and P (rebuilt from Q).
    DataP(usize),
    /// A data chunk and Q (rebuilt from P).
    DataQ(usize),
    /// Two data chunks (from P and Q).
    TwoData(usize, usize),
    /// P and Q (regenerated).
    PQ,
}

// ---------------------------------------------------------------------------------------------
// Per-path entry points: the only functions with `#[target_feature]`; every kernel is inlined
// into them.

macro_rules! entry_points {
    ($name:ident, $V:ty, $U:literal $(, $feat:literal)?) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            #[allow(unused_imports)]
            #[cfg(target_arch = "x86_64")]
            use super::x86::*;

            $(#[target_feature(enable = $feat)])?
            pub(super) unsafe fn pq(job: &PqJob, mode: u8, nt: bool) -> bool {
                // SAFETY: forwarded contract of `kernels::pq`.
                unsafe { kernels::pq::<$V, $U>(job, mode, nt) }
            }
            $(#[target_feature(enable = $feat)])?
            pub(super) unsafe fn xor(job: &XorJob, nt: bool) -> bool {
                // SAFETY: forwarded contract of `kernels::xor`.
                unsafe { kernels::xor::<$V, $U>(job, nt) }
            }
            $(#[target_feature(enable = $feat)])?
            pub(super) unsafe fn update(job: &UpdJob) {
                // SAFETY: forwarded contract of `kernels::update`.
                unsafe { kernels::update::<$V, $U>(job) }
            }
        }
    };
}

entry_points!(scalar_entry, u64, 4);
#[cfg(target_arch = "x86_64")]
entry_points!(ssse3_entry, Sse, 4, "ssse3");
#[cfg(target_arch = "x86_64")]
entry_points!(avx2_entry, Avx2, 4, "avx2");
#[cfg(target_arch = "x86_64")]
entry_points!(avx512_entry, Avx512, 4, "avx512f,avx512bw");
#[cfg(target_arch = "x86_64")]
entry_points!(gfni_entry, Gfni, 4, "avx512f,avx512bw,gfni");

/// The kernels of one [`Path`]; its methods mirror the free functions of this module (which
/// use [`Kernels::best`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kernels {
    // Invariant: `path.is_available()`.
    path: Path,
    // Whether large aligned outputs use non-temporal stores (see STREAM_MIN_LEN).
    streaming: bool,
}

impl Default for Kernels {
    fn default() -> Self {
        Kernels::best()
    }
}

impl Kernels {
    /// The kernels of `path`, or `None` when this CPU cannot run it.
    pub fn new(path: Path) -> Option<Kernels> {
        path.is_available().then_some(Kernels {
            path,
            streaming: true,
        })
    }

    /// The kernels of [`Path::best`].
    pub fn best() -> Kernels {
        Kernels {
            path: Path::best(),
            streaming: true,
        }
    }

    /// The path these kernels run.
    pub fn path(&self) -> Path {
        self.path
    }

    /// Allow (default) or forbid non-temporal stores for outputs of at least
    /// [`STREAM_MIN_LEN`] bytes.
    pub fn with_streaming(self, streaming: bool) -> Kernels {
        Kernels { streaming, ..self }
    }

    fn nt(&self, len: usize, outs: &[*mut u8]) -> bool {
        self.streaming
            && self.path != Path::Scalar
            && len >= STREAM_MIN_LEN
            && outs.iter().all(|p| (*p as usize).is_multiple_of(64))
    }

    fn run_pq(&self, job: &PqJob, mode: u8) -> bool {
        // Every mode but CHECK and FOLD_PQ only writes its outputs; null (unused) outputs
        // count as aligned.
        let reads_outputs = mode == mode::CHECK || mode == mode::FOLD_PQ;
        let nt = !reads_outputs && self.nt(job.len, &[job.out0, job.out1]);
        // SAFETY: `self.path` is available (the invariant of `Kernels`), and every caller
        // builds `job` from validated slices as `PqJob` documents.
        unsafe {
            match self.path {
                Path::Scalar => scalar_entry::pq(job, mode, nt),
                #[cfg(target_arch = "x86_64")]
                Path::Ssse3 => ssse3_entry::pq(job, mode, nt),
                #[cfg(target_arch = "x86_64")]
                Path::Avx2 => avx2_entry::pq(job, mode, nt),
                #[cfg(target_arch = "x86_64")]
                Path::Avx512 => avx512_entry::pq(job, mode, nt),
                #[cfg(target_arch = "x86_64")]
                Path::Avx512Gfni => gfni_entry::pq(job, mode, nt),
                #[cfg(not(target_arch = "x86_64"))]
                _ => unreachable!("{} is never available here", self.path),
            }
        }
    }

    fn run_xor(&self, job: &XorJob) -> bool {
        // An accumulator is read before it is written: it stays in the cache.
        let nt = !job.out.is_null() && !job.acc && self.nt(job.len, &[job.out]);
        // SAFETY: as in `run_pq`.
        unsafe {
            match self.path {
                Path::Scalar => scalar_entry::xor(job, nt),
                #[cfg(target_arch = "x86_64")]
                Path::Ssse3 => ssse3_entry::xor(job, nt),
                #[cfg(target_arch = "x86_64")]
                Path::Avx2 => avx2_entry::xor(job, nt),
                #[cfg(target_arch = "x86_64")]
                Path::Avx512 => avx512_entry::xor(job, nt),
                #[cfg(target_arch = "x86_64")]
                Path::Avx512Gfni => gfni_entry::xor(job, nt),
                #[cfg(not(target_arch = "x86_64"))]
                _ => unreachable!("{} is never available here", self.path),
            }
        }
    }

    fn run_update(&self, job: &UpdJob) {
        // SAFETY: as in `run_pq`.
        unsafe {
            match self.path {
                Path::Scalar => scalar_entry::update(job),
                #[cfg(target_arch = "x86_64")]
                Path::Ssse3 => ssse3_entry::update(job),
                #[cfg(target_arch = "x86_64")]
                Path::Avx2 => avx2_entry::update(job),
                #[cfg(target_arch = "x86_64")]
                Path::Avx512 => avx512_entry::update(job),
                #[cfg(target_arch = "x86_64")]
                Path::Avx512Gfni => gfni_entry::update(job),
                #[cfg(not(target_arch = "x86_64"))]
                _ => unreachable!("{} is never available here", self.path),
            }
        }
    }

    // ----- generation -----

    /// P = ⊕ data. See [`xor_gen`].
    pub fn xor_gen(&self, data: &[&[u8]], p: &mut [u8]) {
        let len = stripe_len("xor_gen", data, None);
        let len = expect_len("xor_gen", "p", p.len(), len);
        self.run_xor(&XorJob {
            srcs: data,
            len,
            out: p.as_mut_ptr(),
            cmp: core::ptr::null(),
            acc: false,
        });
    }

    /// acc ^= ⊕ data. See [`xor_into`].
    pub fn xor_into(&self, acc: &mut [u8], data: &[&[u8]]) {
        let len = stripe_len("xor_into", data, None);
        let len = expect_len("xor_into", "acc", acc.len(), len);
        self.run_xor(&XorJob {
            srcs: data,
            len,
            out: acc.as_mut_ptr(),
            cmp: core::ptr::null(),
            acc: true,
        });
    }

    /// P and Q. See [`pq_gen`].
    pub fn pq_gen(&self, data: &[&[u8]], p: &mut [u8], q: &mut [u8]) {
        let len = stripe_len("pq_gen", data, None);
        let len = expect_len("pq_gen", "p", p.len(), len);
        let len = expect_len("pq_gen", "q", q.len(), len);
        self.run_pq(
            &PqJob {
                out0: p.as_mut_ptr(),
                out1: q.as_mut_ptr(),
                ..PqJob::new(data, len)
            },
            mode::GEN_PQ,
        );
    }

    /// Q alone. See [`q_gen`].
    pub fn q_gen(&self, data: &[&[u8]], q: &mut [u8]) {
        let len = stripe_len("q_gen", data, None);
        let len = expect_len("q_gen", "q", q.len(), len);
        self.run_pq(
            &PqJob {
                out1: q.as_mut_ptr(),
                ..PqJob::new(data, len)
            },
            mode::GEN_Q,
        );
    }

    /// P ^= ⊕ data, Q ^= Σ g^(first_slot + i)·data[i]. See [`pq_fold`].
    pub fn pq_fold(&self, data: &[&[u8]], first_slot: usize, p: &mut [u8], q: &mut [u8]) {
        let len = stripe_len("pq_fold", data, None);
        check_k("pq_fold", first_slot + data.len());
        let len = expect_len("pq_fold", "p", p.len(), len);
        let len = expect_len("pq_fold", "q", q.len(), len);
        let job = PqJob {
            m: [gf::exp2(first_slot), 0],
            out0: p.as_mut_ptr(),
            out1: q.as_mut_ptr(),
            ..PqJob::new(data, len)
        };
        self.run_pq(&job, mode::FOLD_PQ);
    }

    // ----- check -----

    /// Whether P = ⊕ data. See [`check_p`].
    pub fn check_p(&self, data: &[&[u8]], p: &[u8]) -> bool {
        let len = stripe_len("check_p", data, None);
        let len = expect_len("check_p", "p", p.len(), len);
        self.run_xor(&XorJob {
            srcs: data,
            len,
            out: core::ptr::null_mut(),
            cmp: p.as_ptr(),
            acc: false,
        })
    }

    /// Whether P and Q match the data. See [`check_pq`].
    pub fn check_pq(&self, data: &[&[u8]], p: &[u8], q: &[u8]) -> bool {
        let len = stripe_len("check_pq", data, None);
        let len = expect_len("check_pq", "p", p.len(), len);
        let len = expect_len("check_pq", "q", q.len(), len);
        self.run_pq(
            &PqJob {
                p_in: p.as_ptr(),
                q_in: q.as_ptr(),
                ..PqJob::new(data, len)
            },
            mode::CHECK,
        )
    }

    // ----- read-modify-write -----

    /// P ^= old ⊕ new. See [`xor_update`].
    pub fn xor_update(&self, p: &mut [u8], old: &[u8], new: &[u8]) {
        self.xor_update_many(p, &[Change { slot: 0, old, new }]);
    }

    /// P and Q updated for one changed chunk. See [`pq_update`].
    pub fn pq_update(&self, p: &mut [u8], q: &mut [u8], slot: usize, old: &[u8], new: &[u8]) {
        self.pq_update_many(p, q, &[Change { slot, old, new }]);
    }

    /// P updated for several changed chunks. See [`xor_update_many`].
    pub fn xor_update_many(&self, p: &mut [u8], changes: &[Change]) {
        let len = p.len();
        check_changes("xor_update", changes, len, false);
        self.run_update(&UpdJob {
            changes,
            len,
            p: p.as_mut_ptr(),
            q: core::ptr::null_mut(),
        });
    }

    /// P and Q updated for several changed chunks. See [`pq_update_many`].
    pub fn pq_update_many(&self, p: &mut [u8], q: &mut [u8], changes: &[Change]) {
        let len = p.len();
        let len = expect_len("pq_update", "q", q.len(), len);
        check_changes("pq_update", changes, len, true);
        self.run_update(&UpdJob {
            changes,
            len,
            p: p.as_mut_ptr(),
            q: q.as_mut_ptr(),
        });
    }

    // ----- recovery, separate outputs -----

    /// Data chunk `x` from P and the other data chunks. See [`recover_data_p_into`].
    pub fn recover_data_p_into(&self, data: &[&[u8]], p: &[u8], x: usize, out: &mut [u8]) {
        let len = stripe_len("recover_data_p", data, Some([x, x]));
        let len = expect_len("recover_data_p", "p", p.len(), len);
        let len = expect_len("recover_data_p", "out", out.len(), len);
        let mut srcs: [&[u8]; MAX_DATA] = [&[]; MAX_DATA];
        let mut n = 0;
        for (i, d) in data.iter().enumerate() {
            if i != x {
                srcs[n] = d;
                n += 1;
            }
        }
        srcs[n] = p;
        self.run_xor(&XorJob {
            srcs: &srcs[..=n],
            len,
            out: out.as_mut_ptr(),
            cmp: core::ptr::null(),
            acc: false,
        });
    }

    /// Data chunk `x` and P, from Q. See [`recover_data_and_p_into`].
    pub fn recover_data_and_p_into(
        &self,
        data: &[&[u8]],
        q: &[u8],
        x: usize,
        out_data: &mut [u8],
        out_p: &mut [u8],
    ) {
        let len = stripe_len("recover_data_and_p", data, Some([x, x]));
        let len = expect_len("recover_data_and_p", "q", q.len(), len);
        let len = expect_len("recover_data_and_p", "out_data", out_data.len(), len);
        let len = expect_len("recover_data_and_p", "out_p", out_p.len(), len);
        self.run_pq(
            &PqJob {
                skip: [x, x],
                m: [gf::inv(gf::exp2(x)), 0],
                q_in: q.as_ptr(),
                out0: out_data.as_mut_ptr(),
                out1: out_p.as_mut_ptr(),
                ..PqJob::new(data, len)
            },
            mode::REC_DP,
        );
    }

    /// Data chunk `x` and Q, from P. See [`recover_data_and_q_into`].
    pub fn recover_data_and_q_into(
        &self,
        data: &[&[u8]],
        p: &[u8],
        x: usize,
        out_data: &mut [u8],
        out_q: &mut [u8],
    ) {
        let len = stripe_len("recover_data_and_q", data, Some([x, x]));
        let len = expect_len("recover_data_and_q", "p", p.len(), len);
        let len = expect_len("recover_data_and_q", "out_data", out_data.len(), len);
        let len = expect_len("recover_data_and_q", "out_q", out_q.len(), len);
        self.run_pq(
            &PqJob {
                skip: [x, x],
                m: [gf::exp2(x), 0],
                p_in: p.as_ptr(),
                out0: out_data.as_mut_ptr(),
                out1: out_q.as_mut_ptr(),
                ..PqJob::new(data, len)
            },
            mode::REC_DQ,
        );
    }

    /// Data chunks `a` and `b`, from P and Q. See [`recover_two_data_into`].
    #[allow(clippy::too_many_arguments)]
    pub fn recover_two_data_into(
        &self,
        data: &[&[u8]],
        p: &[u8],
        q: &[u8],
        a: usize,
        b: usize,
        out_a: &mut [u8],
        out_b: &mut [u8],
    ) {
        assert!(
            a != b,
            "parity::recover_two_data: the lost slots must differ (both are {a})"
        );
        let len = stripe_len("recover_two_data", data, Some([a, b]));
        let len = expect_len("recover_two_data", "p", p.len(), len);
        let len = expect_len("recover_two_data", "q", q.len(), len);
        let len = expect_len("recover_two_data", "out_a", out_a.len(), len);
        let len = expect_len("recover_two_data", "out_b", out_b.len(), len);
        // Pxy = Da ⊕ Db, Qxy = g^a·Da ⊕ g^b·Db  ⇒  Da = (g^b·Pxy ⊕ Qxy) / (g^a ⊕ g^b).
        let (ga, gb) = (gf::exp2(a), gf::exp2(b));
        let den = gf::inv(ga ^ gb);
        self.run_pq(
            &PqJob {
                skip: [a, b],
                m: [gf::mul(gb, den), den],
                p_in: p.as_ptr(),
                q_in: q.as_ptr(),
                out0: out_a.as_mut_ptr(),
                out1: out_b.as_mut_ptr(),
                ..PqJob::new(data, len)
            },
            mode::REC_DD,
        );
    }

    // ----- recovery, in place -----

    /// Rebuild `data[x]` in place from P. See [`recover_data_p`].
    pub fn recover_data_p(&self, data: &mut [&mut [u8]], p: &[u8], x: usize) {
        check_k("recover_data_p", data.len());
        check_slot("recover_data_p", "x", x, data.len());
        let k = data.len();
        let (srcs, [out, _]) = split_lost(data, [x, x]);
        self.recover_data_p_into(&srcs[..k], p, x, out);
    }

    /// Rebuild `data[x]` and P in place from Q. See [`recover_data_and_p`].
    pub fn recover_data_and_p(&self, data: &mut [&mut [u8]], p: &mut [u8], q: &[u8], x: usize) {
        check_k("recover_data_and_p", data.len());
        check_slot("recover_data_and_p", "x", x, data.len());
        let k = data.len();
        let (srcs, [out, _]) = split_lost(data, [x, x]);
        self.recover_data_and_p_into(&srcs[..k], q, x, out, p);
    }

    /// Rebuild `data[x]` and Q in place from P. See [`recover_data_and_q`].
    pub fn recover_data_and_q(&self, data: &mut [&mut [u8]], p: &[u8], q: &mut [u8], x: usize) {
        check_k("recover_data_and_q", data.len());
        check_slot("recover_data_and_q", "x", x, data.len());
        let k = data.len();
        let (srcs, [out, _]) = split_lost(data, [x, x]);
        self.recover_data_and_q_into(&srcs[..k], p, x, out, q);
    }

    /// Rebuild `data[a]` and `data[b]` in place from P and Q. See [`recover_two_data`].
    pub fn recover_two_data(&self, data: &mut [&mut [u8]], p: &[u8], q: &[u8], a: usize, b: usize) {
        check_k("recover_two_data", data.len());
        check_slot("recover_two_data", "a", a, data.len());
        check_slot("recover_two_data", "b", b, data.len());
        assert!(
            a != b,
            "parity::recover_two_data: the lost slots must differ (both are {a})"
        );
        let k = data.len();
        let (srcs, [out_a, out_b]) = split_lost(data, [a, b]);
        self.recover_two_data_into(&srcs[..k], p, q, a, b, out_a, out_b);
    }

    /// Rebuild whatever `loss` names, in place. See [`recover`].
    pub fn recover(&self, data: &mut [&mut [u8]], p: &mut [u8], q: Option<&mut [u8]>, loss: Loss) {
        check_k("recover", data.len());
        match loss {
            Loss::Data(x) => self.recover_data_p(data, p, x),
            Loss::P => {
                let k = data.len();
                let (srcs, _) = split_lost(data, [usize::MAX, usize::MAX]);
                self.xor_gen(&srcs[..k], p);
            }
            Loss::Q => {
                let q = need_q(q, "Loss::Q");
                let k = data.len();
                let (srcs, _) = split_lost(data, [usize::MAX, usize::MAX]);
                self.q_gen(&srcs[..k], q);
            }
            Loss::PQ => {
                let q = need_q(q, "Loss::PQ");
                let k = data.len();
                let (srcs, _) = split_lost(data, [usize::MAX, usize::MAX]);
                self.pq_gen(&srcs[..k], p, q);
            }
            Loss::DataP(x) => {
                let q = need_q(q, "Loss::DataP");
                self.recover_data_and_p(data, p, q, x)
            }
            Loss::DataQ(x) => {
                let q = need_q(q, "Loss::DataQ");
                self.recover_data_and_q(data, p, q, x)
            }
            Loss::TwoData(a, b) => {
                let q = need_q(q, "Loss::TwoData");
                self.recover_two_data(data, p, q, a, b)
            }
        }
    }
}

impl<'a, 'b> PqJob<'a, 'b> {
    fn new(srcs: &'a [&'b [u8]], len: usize) -> Self {
        PqJob {
            srcs,
            len,
            skip: [usize::MAX, usize::MAX],
            m: [0, 0],
            p_in: core::ptr::null(),
            q_in: core::ptr::null(),
            out0: core::ptr::null_mut(),
            out1: core::ptr::null_mut(),
        }
    }
}

// ----- the free functions: best path -----

fn best() -> Kernels {
    Kernels::best()
}

/// P = D₀ ⊕ D₁ ⊕ … (RAID 5 parity, RAID 6's P).
///
/// # Panics
/// If `data` is empty or longer than [`MAX_DATA`], or the chunks and `p` differ in length.
pub fn xor_gen(data: &[&[u8]], p: &mut [u8]) {
    best().xor_gen(data, p)
}

/// acc ^= D₀ ⊕ D₁ ⊕ … in one pass, in place: P (or a lost chunk) accumulated over chunks that
/// arrive at different times, or a chunk read straight into its buffer and the others folded
/// into it, with no output buffer of its own.
///
/// # Panics
/// As [`xor_gen`] (`acc` in the place of `p`).
pub fn xor_into(acc: &mut [u8], data: &[&[u8]]) {
    best().xor_into(acc, data)
}

/// P = ⊕ Dᵢ and Q = Σ gⁱ·Dᵢ (i = index in `data`, md's syndrome-slot order).
///
/// # Panics
/// If `data` is empty or longer than [`MAX_DATA`], or the chunks, `p` and `q` differ in length.
pub fn pq_gen(data: &[&[u8]], p: &mut [u8], q: &mut [u8]) {
    best().pq_gen(data, p, q)
}

/// P ^= ⊕ Dᵢ and Q ^= Σ g^(first_slot + i)·Dᵢ, in one pass, in place: P and Q of a stripe
/// accumulated a few chunks at a time (slots `first_slot ..`), each group while it is still in
/// the CPU cache. Folding every group of a stripe into zeroed P and Q gives [`pq_gen`]'s.
///
/// # Panics
/// As [`pq_gen`], or if `first_slot + data.len()` exceeds [`MAX_DATA`].
pub fn pq_fold(data: &[&[u8]], first_slot: usize, p: &mut [u8], q: &mut [u8]) {
    best().pq_fold(data, first_slot, p, q)
}

/// Q = Σ gⁱ·Dᵢ alone (regenerate a lost Q).
///
/// # Panics
/// As [`pq_gen`].
pub fn q_gen(data: &[&[u8]], q: &mut [u8]) {
    best().q_gen(data, q)
}

/// Whether `p` is the XOR of `data`.
///
/// # Panics
/// As [`xor_gen`].
pub fn check_p(data: &[&[u8]], p: &[u8]) -> bool {
    best().check_p(data, p)
}

/// Whether `p` and `q` are the P and Q of `data`.
///
/// # Panics
/// As [`pq_gen`].
pub fn check_pq(data: &[&[u8]], p: &[u8], q: &[u8]) -> bool {
    best().check_pq(data, p, q)
}

/// Read-modify-write of RAID 5 parity: P ^= old ⊕ new.
///
/// # Panics
/// If `old`, `new` and `p` differ in length.
pub fn xor_update(p: &mut [u8], old: &[u8], new: &[u8]) {
    best().xor_update(p, old, new)
}

/// Read-modify-write of RAID 6 parity for the chunk at `slot`:
/// P ^= old ⊕ new, Q ^= g^slot·(old ⊕ new).
///
/// # Panics
/// If the buffers differ in length or `slot >= MAX_DATA`.
pub fn pq_update(p: &mut [u8], q: &mut [u8], slot: usize, old: &[u8], new: &[u8]) {
    best().pq_update(p, q, slot, old, new)
}

/// [`xor_update`] for several changed chunks in one pass over P.
///
/// # Panics
/// If any buffer differs in length from `p`.
pub fn xor_update_many(p: &mut [u8], changes: &[Change]) {
    best().xor_update_many(p, changes)
}

/// [`pq_update`] for several changed chunks (distinct slots) in one pass over P and Q.
///
/// # Panics
/// If any buffer differs in length from `p`, or a slot is `>= MAX_DATA`.
pub fn pq_update_many(p: &mut [u8], q: &mut [u8], changes: &[Change]) {
    best().pq_update_many(p, q, changes)
}

/// Rebuild `data[x]` in place from P and the other data chunks (RAID 5, or RAID 6 with P
/// intact). `data` is the whole stripe in slot order; `data[x]`'s content is ignored.
///
/// # Panics
/// If `x` is out of range, `data` is empty or longer than [`MAX_DATA`], or lengths differ.
pub fn recover_data_p(data: &mut [&mut [u8]], p: &[u8], x: usize) {
    best().recover_data_p(data, p, x)
}

/// Rebuild `data[x]` from Q, then P, in place (data chunk and P lost).
///
/// # Panics
/// As [`recover_data_p`].
pub fn recover_data_and_p(data: &mut [&mut [u8]], p: &mut [u8], q: &[u8], x: usize) {
    best().recover_data_and_p(data, p, q, x)
}

/// Rebuild `data[x]` from P, then Q, in place (data chunk and Q lost).
///
/// # Panics
/// As [`recover_data_p`].
pub fn recover_data_and_q(data: &mut [&mut [u8]], p: &[u8], q: &mut [u8], x: usize) {
    best().recover_data_and_q(data, p, q, x)
}

/// Rebuild `data[a]` and `data[b]` in place from P and Q (two data chunks lost).
///
/// # Panics
/// If `a == b`, either is out of range, or as [`recover_data_p`].
pub fn recover_two_data(data: &mut [&mut [u8]], p: &[u8], q: &[u8], a: usize, b: usize) {
    best().recover_two_data(data, p, q, a, b)
}

/// [`recover_data_p`] with the survivors shared and a separate output (`data[x]` is ignored).
///
/// # Panics
/// As [`recover_data_p`].
pub fn recover_data_p_into(data: &[&[u8]], p: &[u8], x: usize, out: &mut [u8]) {
    best().recover_data_p_into(data, p, x, out)
}

/// [`recover_data_and_p`] with the survivors shared and separate outputs.
///
/// # Panics
/// As [`recover_data_p`].
pub fn recover_data_and_p_into(
    data: &[&[u8]],
    q: &[u8],
    x: usize,
    out_data: &mut [u8],
    out_p: &mut [u8],
) {
    best().recover_data_and_p_into(data, q, x, out_data, out_p)
}

/// [`recover_data_and_q`] with the survivors shared and separate outputs.
///
/// # Panics
/// As [`recover_data_p`].
pub fn recover_data_and_q_into(
    data: &[&[u8]],
    p: &[u8],
    x: usize,
    out_data: &mut [u8],
    out_q: &mut [u8],
) {
    best().recover_data_and_q_into(data, p, x, out_data, out_q)
}

/// [`recover_two_data`] with the survivors shared and separate outputs (`data[a]`, `data[b]`
/// are ignored).
///
/// # Panics
/// As [`recover_two_data`].
pub fn recover_two_data_into(
    data: &[&[u8]],
    p: &[u8],
    q: &[u8],
    a: usize,
    b: usize,
    out_a: &mut [u8],
    out_b: &mut [u8],
) {
    best().recover_two_data_into(data, p, q, a, b, out_a, out_b)
}

/// Rebuild the chunks `loss` names, in place: data chunks into `data` (slot order), P into
/// `p`, Q into `q` (`None` for RAID 5, which only has `Loss::Data` and `Loss::P`).
///
/// # Panics
/// If the pattern needs Q and `q` is `None`, or as the specific function it calls.
pub fn recover(data: &mut [&mut [u8]], p: &mut [u8], q: Option<&mut [u8]>, loss: Loss) {
    best().recover(data, p, q, loss)
}
