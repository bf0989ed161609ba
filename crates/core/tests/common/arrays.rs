//! Arrays over memory members for the integration tests: members loaded, arrays created and
//! opened, a model of the volume's bytes with deterministic writes, and reads compared with
//! it. The tests' own options and trees stay in each test; what every test built alike is
//! here.

use super::MIB;
use futures::executor::block_on;
use futures::future::BoxFuture;
use futures::FutureExt;
use nbraid_core::metadata::disk_rule::Consent;
use nbraid_core::metadata::{Array, ArrayOptions, MemberMeta, OpenReport};
use nbraid_core::{Buf, Member, MemberResult, MemoryMember, Volume, VolumeOptions};
use nbraid_layout::{Geometry, Node};
use nbraid_sim::Rng;
use std::sync::Arc;
use std::time::Duration;

/// A member's superblock, loaded as the daemon's assembly would.
pub fn load(m: Arc<dyn Member>) -> Arc<MemberMeta> {
    block_on(MemberMeta::load(m))
}

/// [`load`] of every disk, in order.
pub fn metas<D: Member + 'static>(disks: &[Arc<D>]) -> Vec<Arc<MemberMeta>> {
    disks
        .iter()
        .map(|d| load(d.clone() as Arc<dyn Member>))
        .collect()
}

/// Array "vol" of `tree` created over the first `tree.member_count()` of `disks` (a
/// reshape's old shape: the disks after them are the members it adds); `Err` says why not.
pub fn create_first<D: Member + 'static>(
    tree: &Node,
    disks: &[Arc<D>],
    opts: ArrayOptions,
    assume_clean: bool,
) -> Result<Array, String> {
    let first = metas(&disks[..tree.member_count()]);
    let created = Array::create("vol", tree.clone(), first, opts, assume_clean, &|_, _| {});
    block_on(created)
        .map(|(a, _)| a)
        .map_err(|e| format!("create: {e}"))
}

/// Array "vol" of `config` opened over every disk of `disks`, with what the open found;
/// `Err` says why not.
pub fn open_every<D: Member + 'static>(
    config: &Node,
    disks: &[Arc<D>],
    opts: ArrayOptions,
) -> Result<(Array, OpenReport), String> {
    let present = metas(disks).into_iter().map(Some).collect();
    block_on(Array::open("vol", config, present, opts, &|_, _| {}))
        .map_err(|e| format!("open: {e}"))
}

/// Writes `bytes` from the volume's first byte (in pieces of 4 MiB: a volume of big strips
/// is larger than one request should be), flushes, and records the array clean: its
/// redundancy agrees with its data everywhere.
pub fn write_clean(a: &Array, bytes: &[u8]) -> Result<(), String> {
    const PIECE_BYTES: usize = 4 << 20;
    block_on(async {
        for (i, piece) in bytes.chunks(PIECE_BYTES).enumerate() {
            a.write((i * PIECE_BYTES) as u64, Buf::copy_from(piece), false)
                .await?;
        }
        a.flush().await?;
        a.mark_clean().await.map(|_| ())
    })
    .map_err(|e| format!("write, flush, mark clean: {e}"))
}

/// The operator's consent to take disks whatever they hold (`--force`).
pub fn forced() -> Consent {
    Consent {
        force: true,
        ..Consent::default()
    }
}

/// `len_bytes` bytes from `rng`.
pub fn seeded(rng: &mut Rng, len_bytes: u64) -> Vec<u8> {
    (0..len_bytes).map(|_| rng.next_u64() as u8).collect()
}

/// [`load`] of a memory disk.
pub fn meta(d: &Arc<MemoryMember>) -> Arc<MemberMeta> {
    load(d.clone() as Arc<dyn Member>)
}

/// A new array named "vol" of `tree` over `disks` (blank: no consent asked), its rebuild
/// window at 256 KiB so rebuilds take many steps on small test members.
pub fn create(tree: &Node, disks: &[Arc<MemoryMember>], opts: ArrayOptions) -> Array {
    let metas = disks.iter().map(meta).collect();
    let created = Array::create("vol", tree.clone(), metas, opts, true, &|_, _| {});
    let (a, _) = block_on(created).expect("create");
    a.set_rebuild_window_bytes(256 << 10);
    a
}

/// Array "vol" of `tree` opened over `disks` (`None`: that role's disk is absent), rebuild
/// window as in [`create`].
pub fn open(tree: &Node, disks: &[Option<Arc<MemoryMember>>], opts: ArrayOptions) -> Array {
    let metas = disks.iter().map(|d| d.as_ref().map(meta)).collect();
    let (a, _) = block_on(Array::open("vol", tree, metas, opts, &|_, _| {})).expect("open");
    a.set_rebuild_window_bytes(256 << 10);
    a
}

/// Every disk present, for [`open`].
pub fn all(disks: &[Arc<MemoryMember>]) -> Vec<Option<Arc<MemoryMember>>> {
    disks.iter().cloned().map(Some).collect()
}

/// A member operation that never ends (a disk that stopped answering).
pub fn never<T: Send + 'static>() -> BoxFuture<'static, MemberResult<T>> {
    futures::future::pending().boxed()
}

/// The volume's bytes, and deterministic writes applied to them.
pub struct Model {
    pub bytes: Vec<u8>,
    seed: u64,
}

impl Model {
    /// A model of `a`'s volume as zeros (nothing written yet).
    pub fn zeroed(a: &Array, seed: u64) -> Model {
        Model {
            bytes: vec![0; a.volume().capacity() as usize],
            seed,
        }
    }

    /// A model whose volume holds `bytes`.
    pub fn of(bytes: Vec<u8>, seed: u64) -> Model {
        Model { bytes, seed }
    }

    /// A model of `a`'s volume with every byte written (so every block of every member is).
    pub fn filled(a: &Array, seed: u64) -> Model {
        let mut m = Model::zeroed(a, seed);
        m.fill(a);
        m
    }

    /// Writes a fixed pattern over the whole volume, in 1 MiB requests.
    pub fn fill(&mut self, a: &Array) {
        for (i, x) in self.bytes.iter_mut().enumerate() {
            *x = (i as u8).wrapping_mul(29) ^ (i / 4096) as u8;
        }
        let piece = 1 << 20;
        block_on(async {
            for (i, chunk) in self.bytes.chunks(piece).enumerate() {
                let at = (i * piece) as u64;
                a.write(at, Buf::copy_from(chunk), false)
                    .await
                    .expect("fill");
            }
        });
    }

    /// `n` writes of 4 KiB .. `max_blocks` × 4 KiB at 4 KiB-aligned places (deterministic),
    /// applied to the model; the caller sends them.
    pub fn writes(&mut self, n: usize, max_blocks: u64) -> Vec<(u64, Buf)> {
        let cap = self.bytes.len() as u64;
        (0..n)
            .map(|_| {
                self.seed = (self.seed)
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let len = ((self.seed >> 33) % max_blocks + 1) * 4096;
                let at = (self.seed >> 7) % ((cap - len) / 4096) * 4096;
                let mut b = Buf::new(len as usize);
                for (i, x) in b.iter_mut().enumerate() {
                    *x = (self.seed as usize ^ (i * 31) ^ (i >> 9)) as u8;
                }
                self.bytes[at as usize..(at + len) as usize].copy_from_slice(&b);
                (at, b)
            })
            .collect()
    }
}

/// Sends `writes` one after another, pausing 50 µs after each so a pass running in the same
/// executor (a rebuild) interleaves with them.
pub async fn apply(a: &Array, writes: Vec<(u64, Buf)>) {
    for (at, b) in writes {
        a.write(at, b, false).await.expect("write");
        nbraid_core::timer::sleep(Duration::from_micros(50)).await;
    }
}

/// Reads the whole volume `passes` times in pieces whose size changes per pass (4 KiB ..
/// 64 KiB, the pass number times `step` decides it: a mirror's reads reach each copy);
/// returns the last pass's bytes.
pub fn read_all(a: &Array, passes: u64, step: u64) -> Vec<u8> {
    block_on(async {
        let cap = a.volume().capacity();
        let mut out = Vec::with_capacity(cap as usize);
        for pass in 0..passes {
            out.clear();
            let mut at = 0;
            while at < cap {
                let n = (cap - at).min(4096 * (pass * step % 16 + 1));
                out.extend_from_slice(&a.read(at, n).await.expect("read"));
                at += n;
            }
        }
        out
    })
}

/// Bytes a test reads at most in one request when it compares a volume (below the engine's
/// request limit).
const COMPARE_PIECE_BYTES: usize = 4 << 20;

/// `Err` naming `when` and the first byte of `a`'s volume that differs from `want` (or the
/// read that failed); `Ok` when every byte of `want` reads back.
pub fn same(a: &Array, want: &[u8], when: &str) -> Result<(), String> {
    for (i, piece) in want.chunks(COMPARE_PIECE_BYTES).enumerate() {
        let at = (i * COMPARE_PIECE_BYTES) as u64;
        let back = block_on(a.read(at, piece.len() as u64)).map_err(|e| format!("{when}: {e}"))?;
        if let Some(d) = back.iter().zip(piece).position(|(x, y)| x != y) {
            let d = d as u64 + at;
            let (got, wrote) = (back[(d - at) as usize], want[d as usize]);
            return Err(format!(
                "{when}: byte {d} reads {got:#04x}, written {wrote:#04x}"
            ));
        }
    }
    Ok(())
}

/// Every view of `members` (in role order) losing up to two members the layout tolerates
/// reads `want` (plain volumes over the regions: nothing is written).
pub fn every_view_reads(tree: &Node, members: &[Arc<dyn Member>], want: &[u8], what: &str) {
    let g = Geometry::from_tree(tree.clone());
    let n = members.len();
    let mut sets: Vec<Vec<usize>> = vec![vec![]];
    sets.extend((0..n).map(|a| vec![a]));
    for a in 0..n {
        sets.extend((a + 1..n).map(|b| vec![a, b]));
    }
    for lost in sets.into_iter().filter(|s| g.survives(s)) {
        let opts = VolumeOptions {
            members_known_zero: true,
            ..VolumeOptions::default()
        };
        let v = Volume::new(g.clone(), members.to_vec(), opts).expect("view");
        for &m in &lost {
            v.fail_member(m, "view");
        }
        let mut at = 0;
        while at < v.capacity() {
            let len = (v.capacity() - at).min(MIB);
            let got = block_on(v.read(at, len)).expect("read");
            let end = (at + len) as usize;
            assert!(
                got[..] == want[at as usize..end],
                "{what}: the view losing {lost:?} differs from the model in {at}+{len}"
            );
            at += len;
        }
    }
}

/// `a` flushed, read against `want` and recorded clean, then closed; then every view of
/// `disks` with the members of `put` (role, member) in those roles reads `want`
/// ([`every_view_reads`]).
pub fn closed_and_every_view_reads(
    a: Array,
    (tree, disks): (&Node, &[Arc<MemoryMember>]),
    put: Vec<(usize, Arc<dyn Member>)>,
    want: &[u8],
    what: &str,
) {
    block_on(a.flush()).expect("flush");
    same(&a, want, what).expect("the volume reads the model");
    assert!(block_on(a.mark_clean()).expect("clean").is_recorded());
    drop(a);
    let mut members: Vec<Arc<dyn Member>> =
        disks.iter().map(|d| d.clone() as Arc<dyn Member>).collect();
    for (role, m) in put {
        members[role] = m;
    }
    every_view_reads(tree, &members, want, what);
}

/// Runs `a`'s rebuild (slow enough to stop there) and stops it half-way through the volume.
pub fn rebuild_half_way(a: &Array) {
    let cap = a.volume().capacity();
    let ctl = nbraid_core::PassControl::new(cap * 4);
    let half = async {
        while ctl.position_bytes() < cap / 2 && ctl.state() != nbraid_core::PassState::Done {
            nbraid_core::timer::sleep(Duration::from_micros(200)).await;
        }
        ctl.cancel();
    };
    let (r, ()) = block_on(futures::future::join(a.rebuild(&ctl), half));
    assert_eq!(r.expect("rebuild").state, nbraid_core::PassState::Cancelled);
}

/// What a start is given: `disks` (the config's members), then `extra` at the next position
/// (a spare or a replacement, as the daemon passes them).
pub fn members_then(
    disks: &[Arc<MemoryMember>],
    extra: Arc<dyn Member>,
) -> Vec<Option<Arc<MemberMeta>>> {
    let mut metas: Vec<Option<Arc<MemberMeta>>> = disks.iter().map(|d| Some(meta(d))).collect();
    metas.push(Some(load(extra)));
    metas
}
