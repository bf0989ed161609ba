//! ISA-L's RAID and erasure-code functions as a baseline for the parity bench, loaded at run
//! time with `dlopen` so that building and testing the workspace never needs the library.
//!
//! By default the system's `libisal.so.2` (Debian: `apt-get install libisal2`, or
//! `libisal-dev`); `NBRAID_ISAL_LIB` names other builds instead, colon-separated (e.g. an
//! ISA-L built from source: `NBRAID_ISAL_LIB=libisal.so.2:/opt/isal-2.32/bin/libisal.so`), and
//! every one is benched side by side. ISA-L dispatches to the best kernel for the CPU by
//! itself.
//!
//! The operations mirror `nbraid_core::parity` in md's convention (P = ⊕ Dᵢ, Q = Σ gⁱ·Dᵢ over
//! GF(2⁸)/0x11D, which is also ISA-L's field): `xor_gen`, `pq_gen`, two-data recovery as an
//! ISA-L user does it (invert the surviving rows of the [I; 1…1; g⁰…g^{k-1}] encode matrix,
//! `ec_init_tables` on the two lost rows, one `ec_encode_data` pass over the k survivors) and the
//! one-chunk RMW (`ec_encode_data_update` of P and Q with that chunk's column, once with the
//! old content and once with the new).

use std::ffi::{c_char, c_int, c_void, CStr, CString};

type RaidFn = unsafe extern "C" fn(c_int, c_int, *mut *mut c_void) -> c_int;
type InitTablesFn = unsafe extern "C" fn(c_int, c_int, *mut u8, *mut u8);
type EncodeFn = unsafe extern "C" fn(c_int, c_int, c_int, *mut u8, *mut *mut u8, *mut *mut u8);
type UpdateFn = unsafe extern "C" fn(c_int, c_int, c_int, c_int, *mut u8, *mut u8, *mut *mut u8);
type InvertFn = unsafe extern "C" fn(*mut u8, *mut u8, c_int) -> c_int;
type GfMulFn = unsafe extern "C" fn(u8, u8) -> u8;
type VersionStrFn = unsafe extern "C" fn() -> *const c_char;

/// One loaded ISA-L library.
pub struct Isal {
    /// As named in `NBRAID_ISAL_LIB` (or the default).
    pub lib: String,
    /// "2.32.0", from `isal_get_version_str` (2.31+) or the library's file name.
    pub version: String,
    xor_gen: RaidFn,
    pq_gen: RaidFn,
    ec_init_tables: InitTablesFn,
    ec_encode_data: EncodeFn,
    ec_encode_data_update: UpdateFn,
    gf_invert_matrix: InvertFn,
    gf_mul: GfMulFn,
}

// SAFETY: the handle is never closed and ISA-L's functions keep no mutable global state once
// its dispatchers have resolved (which they do atomically on first call).
unsafe impl Send for Isal {}
unsafe impl Sync for Isal {}

/// The libraries `NBRAID_ISAL_LIB` names (default: the system's `libisal.so.2`).
pub fn lib_names() -> Vec<String> {
    match std::env::var("NBRAID_ISAL_LIB") {
        Ok(v) if !v.is_empty() => v.split(':').map(str::to_string).collect(),
        _ => vec!["libisal.so.2".to_string()],
    }
}

fn dl_error() -> String {
    // SAFETY: dlerror returns null or a C string valid until the next dl* call.
    unsafe {
        let e = libc::dlerror();
        if e.is_null() {
            "unknown dlopen error".into()
        } else {
            CStr::from_ptr(e).to_string_lossy().into_owned()
        }
    }
}

impl Isal {
    /// Load `lib` (a file name searched as `dlopen` does, or a path). Each library gets its own
    /// namespace (`RTLD_LOCAL`), so two versions can be loaded side by side.
    pub fn load(lib: &str) -> Result<Isal, String> {
        let name = CString::new(lib).map_err(|_| format!("{lib}: NUL in the name"))?;
        // SAFETY: a valid C string; the handle is kept for the life of the process.
        let h = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if h.is_null() {
            return Err(format!(
                "{lib}: {} (install libisal2, or set NBRAID_ISAL_LIB)",
                dl_error()
            ));
        }
        let sym = |s: &str| -> Result<*mut c_void, String> {
            let c = CString::new(s).expect("symbol names have no NUL");
            // SAFETY: `h` is a live handle and `c` a valid C string.
            let p = unsafe { libc::dlsym(h, c.as_ptr()) };
            if p.is_null() {
                Err(format!("{lib}: no symbol {s}"))
            } else {
                Ok(p)
            }
        };
        // SAFETY (each transmute): the symbols are ISA-L's exported functions with these C
        // signatures (include/raid.h, include/erasure_code.h).
        let isal = unsafe {
            Isal {
                lib: lib.to_string(),
                version: String::new(),
                xor_gen: std::mem::transmute::<*mut c_void, RaidFn>(sym("xor_gen")?),
                pq_gen: std::mem::transmute::<*mut c_void, RaidFn>(sym("pq_gen")?),
                ec_init_tables: std::mem::transmute::<*mut c_void, InitTablesFn>(sym(
                    "ec_init_tables",
                )?),
                ec_encode_data: std::mem::transmute::<*mut c_void, EncodeFn>(sym(
                    "ec_encode_data",
                )?),
                ec_encode_data_update: std::mem::transmute::<*mut c_void, UpdateFn>(sym(
                    "ec_encode_data_update",
                )?),
                gf_invert_matrix: std::mem::transmute::<*mut c_void, InvertFn>(sym(
                    "gf_invert_matrix",
                )?),
                gf_mul: std::mem::transmute::<*mut c_void, GfMulFn>(sym("gf_mul")?),
            }
        };
        let version = match sym("isal_get_version_str") {
            // SAFETY: `const char *isal_get_version_str(void)` returns a static string.
            Ok(f) => unsafe {
                let f = std::mem::transmute::<*mut c_void, VersionStrFn>(f);
                CStr::from_ptr(f()).to_string_lossy().into_owned()
            },
            Err(_) => version_from_file(sym("xor_gen")?),
        };
        Ok(Isal { version, ..isal })
    }

    /// A short label for bench ids: `isal-2.30.0`.
    pub fn label(&self) -> String {
        format!("isal-{}", self.version)
    }

    /// P = ⊕ data (`xor_gen`; chunks 64-byte aligned, a length multiple of 32).
    pub fn xor_gen(&self, data: &[&[u8]], p: &mut [u8]) {
        let mut ptrs: Vec<*mut c_void> = data.iter().map(|d| d.as_ptr() as *mut c_void).collect();
        ptrs.push(p.as_mut_ptr().cast());
        check_lens(data, p.len());
        check_aligned(&ptrs, p.len());
        // SAFETY: k + 1 valid pointers of `p.len()` bytes; ISA-L only writes the last one.
        let rc =
            unsafe { (self.xor_gen)(ptrs.len() as c_int, p.len() as c_int, ptrs.as_mut_ptr()) };
        assert_eq!(rc, 0, "ISA-L xor_gen refused the arguments");
    }

    /// P and Q (`pq_gen`; at least two data chunks, lengths as [`Isal::xor_gen`]).
    pub fn pq_gen(&self, data: &[&[u8]], p: &mut [u8], q: &mut [u8]) {
        let mut ptrs: Vec<*mut c_void> = data.iter().map(|d| d.as_ptr() as *mut c_void).collect();
        ptrs.push(p.as_mut_ptr().cast());
        ptrs.push(q.as_mut_ptr().cast());
        check_lens(data, p.len());
        assert_eq!(q.len(), p.len());
        check_aligned(&ptrs, p.len());
        // SAFETY: k + 2 valid pointers of `p.len()` bytes; ISA-L only writes the last two.
        let rc = unsafe { (self.pq_gen)(ptrs.len() as c_int, p.len() as c_int, ptrs.as_mut_ptr()) };
        assert_eq!(rc, 0, "ISA-L pq_gen refused the arguments");
    }

    /// The `ec_init_tables` expansion of `rows` × `k` coefficients (row-major).
    fn tables(&self, k: usize, rows: usize, coefs: &mut [u8]) -> Vec<u8> {
        assert_eq!(coefs.len(), k * rows);
        let mut t = vec![0u8; 32 * k * rows];
        // SAFETY: `coefs` holds rows·k bytes and `t` the 32·k·rows ISA-L fills.
        unsafe {
            (self.ec_init_tables)(
                k as c_int,
                rows as c_int,
                coefs.as_mut_ptr(),
                t.as_mut_ptr(),
            )
        };
        t
    }

    /// Tables that rebuild data chunks `a` and `b` of a k-chunk stripe from the k survivors in
    /// the order [`Isal::recover_two`] takes them: data slots other than a, b ascending, then
    /// P, then Q.
    pub fn recovery_tables(&self, k: usize, a: usize, b: usize) -> Vec<u8> {
        // The survivors' rows of the (k+2)×k encode matrix [I; 1…1; g⁰…g^{k-1}].
        let mut m = vec![0u8; k * k];
        let mut r = 0;
        for slot in (0..k).filter(|&s| s != a && s != b) {
            m[r * k + slot] = 1;
            r += 1;
        }
        let mut g = 1u8;
        for c in 0..k {
            m[r * k + c] = 1;
            m[(r + 1) * k + c] = g;
            // SAFETY: a pure function of two bytes.
            g = unsafe { (self.gf_mul)(g, 2) };
        }
        let mut inv = vec![0u8; k * k];
        // SAFETY: both are k×k; ISA-L overwrites `m` while inverting.
        let rc = unsafe { (self.gf_invert_matrix)(m.as_mut_ptr(), inv.as_mut_ptr(), k as c_int) };
        assert_eq!(rc, 0, "the survivors' matrix is invertible for a != b");
        let mut rows = [&inv[a * k..(a + 1) * k], &inv[b * k..(b + 1) * k]].concat();
        self.tables(k, 2, &mut rows)
    }

    /// Data chunks a and b (into `out_a`, `out_b`) from the k survivors, ordered as
    /// [`Isal::recovery_tables`] documents.
    pub fn recover_two(
        &self,
        tables: &[u8],
        survivors: &[&[u8]],
        out_a: &mut [u8],
        out_b: &mut [u8],
    ) {
        let k = survivors.len();
        assert_eq!(tables.len(), 32 * k * 2);
        check_lens(survivors, out_a.len());
        assert_eq!(out_b.len(), out_a.len());
        let mut srcs: Vec<*mut u8> = survivors.iter().map(|d| d.as_ptr() as *mut u8).collect();
        let mut outs = [out_a.as_mut_ptr(), out_b.as_mut_ptr()];
        // SAFETY: k sources and 2 outputs of `len` bytes, tables for a 2×k matrix; ISA-L reads
        // the tables and sources only.
        unsafe {
            (self.ec_encode_data)(
                out_a.len() as c_int,
                k as c_int,
                2,
                tables.as_ptr() as *mut u8,
                srcs.as_mut_ptr(),
                outs.as_mut_ptr(),
            )
        };
    }

    /// Tables for [`Isal::pq_update`]: the 2×k matrix [1…1; g⁰…g^{k-1}].
    pub fn update_tables(&self, k: usize) -> Vec<u8> {
        let mut rows = vec![0u8; 2 * k];
        let mut g = 1u8;
        for c in 0..k {
            rows[c] = 1;
            rows[k + c] = g;
            // SAFETY: a pure function of two bytes.
            g = unsafe { (self.gf_mul)(g, 2) };
        }
        self.tables(k, 2, &mut rows)
    }

    /// RMW of data chunk `slot`: P ^= old ⊕ new and Q ^= g^slot·(old ⊕ new), as two
    /// `ec_encode_data_update` passes (one with `old`, one with `new`). (Forming old ⊕ new
    /// first with `xor_gen` is slower: its non-temporal stores send the scratch chunk to DRAM.)
    /// `tables` come from [`Isal::update_tables`] for the stripe's k.
    pub fn pq_update(
        &self,
        tables: &[u8],
        slot: usize,
        p: &mut [u8],
        q: &mut [u8],
        old: &[u8],
        new: &[u8],
    ) {
        let k = tables.len() / 64;
        assert!(slot < k && tables.len() == 32 * k * 2);
        let len = p.len();
        check_lens(&[old, new, q], len);
        let mut outs = [p.as_mut_ptr(), q.as_mut_ptr()];
        for src in [old, new] {
            // SAFETY: one source and two outputs of `len` bytes; tables for a 2×k matrix;
            // ISA-L only reads the source.
            unsafe {
                (self.ec_encode_data_update)(
                    len as c_int,
                    k as c_int,
                    2,
                    slot as c_int,
                    tables.as_ptr() as *mut u8,
                    src.as_ptr() as *mut u8,
                    outs.as_mut_ptr(),
                )
            };
        }
    }
}

fn check_lens(data: &[&[u8]], len: usize) {
    assert!(len <= c_int::MAX as usize);
    for d in data {
        assert_eq!(d.len(), len, "ISA-L: chunks of one call have one length");
    }
}

/// `xor_gen` and `pq_gen` load and store with aligned instructions (a misaligned chunk
/// faults) and want whole 32-byte vectors.
fn check_aligned(ptrs: &[*mut c_void], len: usize) {
    assert!(
        ptrs.iter().all(|p| (*p as usize).is_multiple_of(64)),
        "ISA-L xor_gen/pq_gen need 64-byte-aligned chunks"
    );
    assert!(
        len.is_multiple_of(32),
        "ISA-L xor_gen/pq_gen need a length multiple of 32"
    );
}

/// "2.30.0" from the file a symbol lives in (`libisal.so.2.0.30`), for libraries older than
/// `isal_get_version_str`.
fn version_from_file(sym: *mut c_void) -> String {
    // SAFETY: dladdr only reads the loader's tables; `info` is plain data.
    let file = unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        if libc::dladdr(sym, &mut info) == 0 || info.dli_fname.is_null() {
            return "unknown".into();
        }
        CStr::from_ptr(info.dli_fname)
            .to_string_lossy()
            .into_owned()
    };
    let real = std::fs::canonicalize(&file).map_or(file, |p| p.display().to_string());
    // libisal.so.2.0.30 → 2.30.0 (libtool's current.age.revision: major 2, minor = revision).
    match real
        .rsplit_once(".so.")
        .map(|(_, v)| v.split('.').collect::<Vec<_>>())
    {
        Some(v) if v.len() == 3 => format!("{}.{}.0", v[0], v[2]),
        _ => format!("unknown ({real})"),
    }
}

#[cfg(test)]
mod tests {
    use super::Isal;
    use nbraid_core::parity::reference;

    /// `len` bytes at a 64-byte boundary inside `v`.
    fn aligned(v: &mut Vec<u8>, len: usize) -> &mut [u8] {
        v.resize(len + 64, 0);
        let off = v.as_ptr().align_offset(64);
        &mut v[off..off + len]
    }

    /// The FFI bindings agree with the byte-at-a-time reference (so the bench's baseline does
    /// the same work as ours). Needs the system's ISA-L (scripts/test installs libisal2).
    #[test]
    fn isal_agrees_with_the_reference() {
        let isal = Isal::load("libisal.so.2").expect("ISA-L (apt-get install libisal2)");
        assert!(isal.version.starts_with("2."), "version {}", isal.version);
        let len = 4096 + 96;
        for k in [2usize, 3, 8, 22] {
            let mut store: Vec<Vec<u8>> = vec![Vec::new(); k + 3];
            let (bufs, outs) = store.split_at_mut(k);
            let data: Vec<&[u8]> = bufs
                .iter_mut()
                .enumerate()
                .map(|(i, v)| {
                    let d = aligned(v, len);
                    for (j, x) in d.iter_mut().enumerate() {
                        *x = (j * 7 + i * 131 + j / 5) as u8;
                    }
                    &*d
                })
                .collect();
            let refs = data.clone();
            let (mut p, mut q) = (vec![0u8; len], vec![0u8; len]);
            reference::pq_gen(&refs, &mut p, &mut q);

            let [ov0, ov1, _] = outs else { unreachable!() };
            let (ip, iq) = (aligned(ov0, len), aligned(ov1, len));
            isal.pq_gen(&refs, ip, iq);
            assert!(*ip == p[..] && *iq == q[..], "pq_gen k={k}");
            ip.fill(0);
            isal.xor_gen(&refs, ip);
            assert!(*ip == p[..], "xor_gen k={k}");

            for (a, b) in [(0, 1), (0, k - 1), (k / 2, k - 1)] {
                if a == b {
                    continue;
                }
                let mut surv: Vec<&[u8]> = (0..k)
                    .filter(|&i| i != a && i != b)
                    .map(|i| refs[i])
                    .collect();
                surv.extend([&p[..], &q[..]]);
                let t = isal.recovery_tables(k, a, b);
                let (mut oa, mut ob) = (vec![0u8; len], vec![0u8; len]);
                isal.recover_two(&t, &surv, &mut oa, &mut ob);
                assert!(oa == data[a] && ob == data[b], "recovery k={k} a={a} b={b}");
            }

            let slot = k - 1;
            let new: Vec<u8> = data[slot].iter().map(|x| x.rotate_left(3) ^ 0x5a).collect();
            let mut after = refs.clone();
            after[slot] = &new;
            let (mut p2, mut q2) = (vec![0u8; len], vec![0u8; len]);
            reference::pq_gen(&after, &mut p2, &mut q2);
            let t = isal.update_tables(k);
            isal.pq_update(&t, slot, &mut p, &mut q, data[slot], &new);
            assert!(p == p2 && q == q2, "update k={k}");
        }
    }
}
