//! One read of a stripe's rows across its rounds ([`super::Reader::read_rows_ex`]): which
//! children are lost, what the next round reads into which buffer, what came back, and the
//! rows handed to the rebuild.

use super::super::chunks::Lost;
use super::super::plan::Target;
use super::*;

/// A row read's state between rounds: each round reads what the rebuild (if any) needs and
/// is not read yet; a read that fails marks its child lost and starts another.
pub(super) struct RowGather {
    /// Per child: unreadable here, failed a read, or treated as lost.
    pub(super) lost: Lost,
    data: Vec<Gathered>,
    p: Option<Buf>,
    q: Option<Buf>,
    /// Children whose reads returned a member I/O error (candidates for repair).
    pub(super) bad: Vec<BadRead>,
    /// The failed reads' errors, in order.
    pub(super) errors: Vec<VolumeError>,
    len_bytes: usize,
}

/// The rows a gather ends with, in data order, and P and Q as read (P taken when the lost
/// chunk was folded into its buffer).
pub(super) struct Rows {
    pub(super) data: Vec<Buf>,
    pub(super) p: Option<Buf>,
    pub(super) q: Option<Buf>,
}

/// One data chunk's rows while a read gathers them.
enum Gathered {
    /// Not read yet: the caller's buffer for it, if one was given (and not lost to a failed
    /// read).
    Pending(Option<Buf>),
    /// Read from its child.
    Read(Buf),
}

impl RowGather {
    /// A gather of `len_bytes` rows into the caller's buffers `bufs` (per data chunk, if
    /// given), with the children `lost` lost from the start.
    pub(super) fn new(lost: Lost, bufs: Vec<Option<Buf>>, len_bytes: usize) -> RowGather {
        RowGather {
            lost,
            data: bufs.into_iter().map(Gathered::Pending).collect(),
            p: None,
            q: None,
            bad: Vec::new(),
            errors: Vec::new(),
            len_bytes,
        }
    }

    /// Whether a data chunk `want` names is lost: the rows are rebuilt.
    pub(super) fn rebuilds(&self, roles: &StripeRoles, want: &[bool]) -> bool {
        (want.iter().zip(&roles.data)).any(|(&w, &c)| w && self.lost[c])
    }

    /// The reads a round issues, each `(child, what it is, the buffer it reads into)`: every
    /// readable data chunk not read yet that is wanted (all of them when `plan` rebuilds),
    /// and P and Q when `plan` needs them and they are not read yet.
    pub(super) fn reads(
        &mut self,
        roles: &StripeRoles,
        want: &[bool],
        plan: Option<(Loss, bool, bool)>,
    ) -> Vec<(usize, Target, Buf)> {
        let n = self.len_bytes;
        let mut todo = Vec::new();
        for (i, slot) in self.data.iter_mut().enumerate() {
            if let Gathered::Pending(given) = slot {
                if !self.lost[roles.data[i]] && (want[i] || plan.is_some()) {
                    let b = given.take().unwrap_or_else(|| Buf::new(n));
                    todo.push((roles.data[i], Target::Data(i), b));
                }
            }
        }
        let (need_p, need_q) = plan.map_or((false, false), |(_, np, nq)| (np, nq));
        if need_p && self.p.is_none() {
            // One data chunk rebuilt from P: P is read straight into that chunk's buffer
            // and the survivors are folded into it (`fold_into_p`).
            let into = plan.and_then(|(loss, _, _)| p_target(roles, loss));
            let b = into
                .and_then(|x| match &mut self.data[x] {
                    Gathered::Pending(given) => given.take(),
                    Gathered::Read(_) => None,
                })
                .unwrap_or_else(|| Buf::new(n));
            todo.push((roles.p, Target::P, b));
        }
        if need_q && self.q.is_none() {
            let qc = roles.q.expect("need_q only with Q");
            todo.push((qc, Target::Q, Buf::new(n)));
        }
        todo
    }

    /// Takes a round's results (`issued[i]` answered by `results[i]`); false when a read
    /// failed: its child is now lost, and another round decides again.
    pub(super) fn take(
        &mut self,
        issued: Vec<(usize, Target)>,
        results: Vec<VolumeResult<Buf>>,
    ) -> bool {
        let mut all_read = true;
        for ((c, target), r) in issued.into_iter().zip(results) {
            match (r, target) {
                (Ok(b), Target::Data(i)) => self.data[i] = Gathered::Read(b),
                (Ok(b), Target::P) => self.p = Some(b),
                (Ok(b), Target::Q) => self.q = Some(b),
                (Err(e), _) => {
                    self.lost[c] = true;
                    all_read = false;
                    if e.is_member_io() {
                        self.bad.push(BadRead::of(c, &e));
                    }
                    self.errors.push(e);
                }
            }
        }
        all_read
    }

    /// The data chunk `loss` rebuilds by folding the survivors into P's buffer: the one
    /// chunk P alone rebuilds, when the caller gave no buffer for it and P was read.
    pub(super) fn fold_target(&self, roles: &StripeRoles, loss: Loss) -> Option<usize> {
        p_target(roles, loss)
            .filter(|&x| matches!(self.data[x], Gathered::Pending(None)) && self.p.is_some())
    }

    /// The rows as gathered: each data chunk's buffer (read, or the caller's unread one, or
    /// new), chunk `fold_x` in P's buffer.
    pub(super) fn take_rows(&mut self, fold_x: Option<usize>) -> Rows {
        let n = self.len_bytes;
        let mut p = self.p.take();
        let data = (std::mem::take(&mut self.data).into_iter().enumerate())
            .map(|(i, g)| match g {
                Gathered::Read(b) | Gathered::Pending(Some(b)) => b,
                Gathered::Pending(None) if fold_x == Some(i) => p.take().expect("read P"),
                Gathered::Pending(None) => Buf::new(n),
            })
            .collect();
        Rows {
            data,
            p,
            q: self.q.take(),
        }
    }
}

/// The data index of the one chunk `loss` rebuilds from P alone, if it is such a loss.
fn p_target(roles: &StripeRoles, loss: Loss) -> Option<usize> {
    match loss {
        Loss::Data(slot) => roles.q_slot.iter().position(|&s| s == slot),
        _ => None,
    }
}
