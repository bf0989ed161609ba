//! Who may take a connection's place: connections still negotiating and connections being
//! served are counted apart, so clients that connect and never finish their handshake cannot
//! lock out the ones that do.
//!
//! At most [`Limits::max_handshakes`](crate::Limits) connections negotiate at once; a new one
//! beyond them closes the one negotiating longest (a flood of half-open connections then costs
//! its own members their place, never a served client's). At most
//! [`Limits::max_connections`](crate::Limits) are served: the place is taken when the client
//! asks for an export (`NBD_OPT_GO`, `NBD_OPT_EXPORT_NAME`), before the server says yes.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

pub(crate) struct Admission {
    max_serving: usize,
    max_handshakes: usize,
    /// Connections in the transmission phase (at most `max_serving`).
    serving: AtomicUsize,
    /// Ids of the connections negotiating, oldest first (at most `max_handshakes`).
    handshaking: Mutex<BTreeSet<u64>>,
}

/// A served connection's place, given back when dropped.
pub(crate) struct ServingSlot(Arc<Admission>);

/// A negotiating connection's place, given back when dropped (or taken from it when a newer
/// connection needs it: see [`Admission::begin_handshake`]).
pub(crate) struct HandshakeSlot {
    admission: Arc<Admission>,
    id: u64,
}

impl Admission {
    pub fn new(max_serving: usize, max_handshakes: usize) -> Arc<Self> {
        assert!(
            max_serving >= 1 && max_handshakes >= 1,
            "limits are normalized"
        );
        Arc::new(Admission {
            max_serving,
            max_handshakes,
            serving: AtomicUsize::new(0),
            handshaking: Mutex::new(BTreeSet::new()),
        })
    }

    /// Whether every serving place is taken (a new client is refused at once).
    pub fn serving_full(&self) -> bool {
        self.serving.load(Ordering::Acquire) >= self.max_serving
    }

    /// A serving place, unless all are taken.
    pub fn try_serve(self: &Arc<Self>) -> Option<ServingSlot> {
        let taken = self
            .serving
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max_serving).then_some(n + 1)
            });
        taken.ok().map(|_| ServingSlot(self.clone()))
    }

    /// Counts connection `id` (ids grow with age) as negotiating; when `max_handshakes` are
    /// negotiating already, the oldest loses its place and its id is returned, for the caller
    /// to close that connection.
    pub fn begin_handshake(self: &Arc<Self>, id: u64) -> (HandshakeSlot, Option<u64>) {
        let mut set = lock(&self.handshaking);
        let evicted = if set.len() >= self.max_handshakes {
            set.pop_first()
        } else {
            None
        };
        set.insert(id);
        let slot = HandshakeSlot {
            admission: self.clone(),
            id,
        };
        (slot, evicted)
    }

    /// Connections negotiating now.
    #[cfg(test)]
    pub fn handshakes(&self) -> usize {
        lock(&self.handshaking).len()
    }
}

impl Drop for ServingSlot {
    fn drop(&mut self) {
        self.0.serving.fetch_sub(1, Ordering::AcqRel);
    }
}

impl fmt::Debug for ServingSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ServingSlot")
    }
}

impl Drop for HandshakeSlot {
    fn drop(&mut self) {
        lock(&self.admission.handshaking).remove(&self.id);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiating_connections_make_room_oldest_first_and_never_take_serving_places() {
        let a = Admission::new(1, 2);
        let (s0, none) = a.begin_handshake(0);
        assert!(none.is_none());
        let (_s1, _) = a.begin_handshake(1);
        let (_s2, evicted) = a.begin_handshake(2);
        assert_eq!(evicted, Some(0));
        assert_eq!(a.handshakes(), 2);
        // The evicted connection's slot, dropped when its task is aborted, frees nothing more.
        drop(s0);
        assert_eq!(a.handshakes(), 2);
        let served = a
            .try_serve()
            .expect("negotiating connections hold no serving place");
        assert!(a.serving_full() && a.try_serve().is_none());
        drop(served);
        assert!(!a.serving_full() && a.try_serve().is_some());
    }
}
