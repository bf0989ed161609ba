//! A request or a maintenance step spread over children, written once: pieces grouped into
//! runs contiguous on one child, the runs issued together, and of the errors the most
//! telling one reported (member I/O errors first: they say the most).

use super::{ArrayNode, CacheUsage, ZeroKind};
use crate::buf::{Buf, SharedBuf};
use crate::error::{VolumeError, VolumeResult};
use futures::future::{join_all, BoxFuture};
use nbraid_layout::ChildPiece;
use std::time::Duration;

/// The first error of a set of results (member I/O errors first: they say the most).
pub(crate) fn first_error(errors: Vec<VolumeError>) -> Option<VolumeError> {
    let mut errors = errors;
    let pos = errors
        .iter()
        .position(VolumeError::is_member_io)
        .unwrap_or(0);
    (!errors.is_empty()).then(|| errors.swap_remove(pos))
}

/// Ok when every result is, else the most telling error.
pub(crate) fn all_ok(results: Vec<VolumeResult<()>>) -> VolumeResult<()> {
    match first_error(results.into_iter().filter_map(Result::err).collect()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Collects buffers in order, or the most telling error.
pub(crate) fn collect_bufs(results: Vec<VolumeResult<Buf>>) -> VolumeResult<Vec<Buf>> {
    let mut ok = Vec::with_capacity(results.len());
    let mut errors = Vec::new();
    for r in results {
        match r {
            Ok(b) => ok.push(b),
            Err(e) => errors.push(e),
        }
    }
    match first_error(errors) {
        Some(e) => Err(e),
        None => Ok(ok),
    }
}

/// Pieces that lie side by side on one child: one vectored operation instead of one per
/// piece.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ChildRun {
    pub child: usize,
    /// Where the run begins in the child's address space.
    pub offset: u64,
    /// Indices of the run's pieces, in order.
    pub pieces: Vec<usize>,
}

impl ChildRun {
    /// Bytes the run covers on its child.
    pub fn len(&self, pieces: &[ChildPiece]) -> u64 {
        self.pieces.iter().map(|&i| pieces[i].len).sum()
    }
}

/// Groups pieces into runs that are contiguous on one child. A stripe request covering
/// several rows puts each child's units side by side on that child.
pub(crate) fn child_runs(children: usize, pieces: &[ChildPiece]) -> Vec<ChildRun> {
    let mut runs: Vec<ChildRun> = Vec::new();
    // Per child: its latest run and where that run ends on the child.
    let mut open: Vec<Option<(usize, u64)>> = vec![None; children];
    for (i, p) in pieces.iter().enumerate() {
        match open[p.child] {
            Some((r, end)) if end == p.offset => runs[r].pieces.push(i),
            _ => {
                runs.push(ChildRun {
                    child: p.child,
                    offset: p.offset,
                    pieces: vec![i],
                });
                open[p.child] = Some((runs.len() - 1, p.offset));
            }
        }
        if let Some((_, end)) = open[p.child].as_mut() {
            *end = p.offset + p.len;
        }
    }
    runs
}

/// Runs `op(child, offset, len)` on every run of `pieces` at once; every run is attempted
/// and the most telling error reported.
pub(crate) async fn each_run<'a, F>(
    children: &'a [Box<dyn ArrayNode>],
    pieces: &[ChildPiece],
    op: F,
) -> VolumeResult<()>
where
    F: Fn(&'a dyn ArrayNode, u64, u64) -> BoxFuture<'a, VolumeResult<()>>,
{
    let runs = child_runs(children.len(), pieces);
    let results = join_all(
        runs.iter()
            .map(|r| op(children[r.child].as_ref(), r.offset, r.len(pieces))),
    )
    .await;
    all_ok(results)
}

/// Reads every run of `pieces` concurrently, piece `i` into `bufs[i]` (taken, and put back
/// filled when its run succeeds); `failed` hears of each run that did not (a parity group
/// rebuilds its pieces, others report the most telling error).
pub(crate) async fn read_runs(
    children: &[Box<dyn ArrayNode>],
    pieces: &[ChildPiece],
    bufs: &mut [Option<Buf>],
    mut failed: impl FnMut(&ChildRun, VolumeError),
) {
    let runs = child_runs(children.len(), pieces);
    let futs = runs.iter().map(|run| {
        let mut mine: Vec<Buf> = run
            .pieces
            .iter()
            .map(|&i| bufs[i].take().expect("each piece in one run"))
            .collect();
        let child = &children[run.child];
        async move {
            if mine.len() == 1 {
                let b = mine.pop().expect("one");
                child.read(run.offset, b).await.map(|b| vec![b])
            } else {
                child.read_vectored(run.offset, mine).await
            }
        }
    });
    let results = join_all(futs).await;
    for (run, r) in runs.iter().zip(results) {
        match r {
            Ok(got) => {
                for (&i, b) in run.pieces.iter().zip(got) {
                    bufs[i] = Some(b);
                }
            }
            Err(e) => failed(run, e),
        }
    }
}

/// Reads pieces (in logical order, covering `buf`) from children concurrently and joins them.
pub(crate) async fn read_pieces(
    children: &[Box<dyn ArrayNode>],
    pieces: &[ChildPiece],
    buf: Buf,
) -> VolumeResult<Buf> {
    if let [p] = pieces {
        return children[p.child].read(p.offset, buf).await;
    }
    let lens: Vec<usize> = pieces.iter().map(|p| p.len as usize).collect();
    let mut bufs: Vec<Option<Buf>> = buf.split_lengths(&lens).into_iter().map(Some).collect();
    let mut errors = Vec::new();
    read_runs(children, pieces, &mut bufs, |_, e| errors.push(e)).await;
    if let Some(e) = first_error(errors) {
        return Err(e);
    }
    Ok(Buf::join(
        bufs.into_iter()
            .map(|b| b.expect("every piece filled"))
            .collect(),
    ))
}

/// Writes pieces (slices of `data`, which starts at `base` in the parent's address space).
pub(crate) async fn write_pieces(
    children: &[Box<dyn ArrayNode>],
    pieces: &[ChildPiece],
    base: u64,
    data: SharedBuf,
    fua: bool,
) -> VolumeResult<()> {
    if let [p] = pieces {
        return children[p.child].write(p.offset, data, fua).await;
    }
    let runs = child_runs(children.len(), pieces);
    let results = join_all(runs.iter().map(|run| {
        let mut mine: Vec<SharedBuf> = run
            .pieces
            .iter()
            .map(|&i| {
                let at = (pieces[i].logical - base) as usize;
                data.slice(at..at + pieces[i].len as usize)
            })
            .collect();
        let child = &children[run.child];
        if mine.len() == 1 {
            child.write(run.offset, mine.pop().expect("one"), fua)
        } else {
            child.write_vectored(run.offset, mine, fua)
        }
    }))
    .await;
    all_ok(results)
}

/// Zeroes pieces, one operation per run of pieces contiguous on one child.
pub(crate) async fn zero_pieces(
    children: &[Box<dyn ArrayNode>],
    pieces: &[ChildPiece],
    kind: ZeroKind,
) -> VolumeResult<()> {
    each_run(children, pieces, |c, at, len| c.zero(at, len, kind)).await
}

/// Flushes every child at once.
pub(crate) async fn flush_children(children: &[Box<dyn ArrayNode>]) -> VolumeResult<()> {
    all_ok(join_all(children.iter().map(|c| c.flush())).await)
}

/// What the children's write-back caches hold, together.
pub(crate) fn children_cache_usage(children: &[Box<dyn ArrayNode>]) -> CacheUsage {
    children
        .iter()
        .fold(CacheUsage::default(), |u, c| u.plus(c.cache_usage()))
}

/// Every child destages its aged stripes, at once.
pub(crate) async fn children_destage_aged(children: &[Box<dyn ArrayNode>], older_than: Duration) {
    join_all(children.iter().map(|c| c.destage_aged(older_than))).await;
}

/// Every child resyncs, one after another (stopping at the first error).
pub(crate) async fn resync_children(children: &[Box<dyn ArrayNode>]) -> VolumeResult<()> {
    for c in children {
        c.resync().await?;
    }
    Ok(())
}
