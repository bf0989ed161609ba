//! Argument checks shared by the kernels' entry points: programmer errors panic, naming the
//! argument and the operation.

use super::{Change, MAX_DATA};

pub(super) fn stripe_len(op: &str, data: &[&[u8]], lost: Option<[usize; 2]>) -> usize {
    assert!(!data.is_empty(), "parity::{op}: no data chunks");
    assert!(
        data.len() <= MAX_DATA,
        "parity::{op}: {} data chunks, at most {MAX_DATA} are supported",
        data.len()
    );
    let lost = lost.unwrap_or([usize::MAX, usize::MAX]);
    for (name, &l) in ["a", "b"].iter().zip(&lost) {
        if l != usize::MAX {
            check_slot(op, name, l, data.len());
        }
    }
    let mut len = None;
    for (i, d) in data.iter().enumerate() {
        if lost.contains(&i) {
            continue;
        }
        match len {
            None => len = Some((i, d.len())),
            Some((first, l)) => assert!(
                d.len() == l,
                "parity::{op}: data[{i}] is {} bytes but data[{first}] is {l}",
                d.len()
            ),
        }
    }
    // With every data chunk lost (k = 1, or k = 2 with two lost), the parity sets the length.
    len.map_or(usize::MAX, |(_, l)| l)
}

pub(super) fn expect_len(op: &str, what: &str, got: usize, len: usize) -> usize {
    // `usize::MAX` = not yet known (all data chunks lost): the first buffer sets it.
    assert!(
        len == usize::MAX || got == len,
        "parity::{op}: {what} is {got} bytes but the data chunks are {len}"
    );
    got
}

pub(super) fn check_slot(op: &str, name: &str, slot: usize, k: usize) {
    assert!(
        slot < k,
        "parity::{op}: slot {name} = {slot} is out of range for {k} data chunks"
    );
}

pub(super) fn check_changes(op: &str, changes: &[Change], len: usize, with_q: bool) {
    for (i, c) in changes.iter().enumerate() {
        assert!(
            c.old.len() == len && c.new.len() == len,
            "parity::{op}: change {i} has old {} / new {} bytes but p is {len}",
            c.old.len(),
            c.new.len()
        );
        if with_q {
            assert!(
                c.slot < MAX_DATA,
                "parity::{op}: change {i} has slot {}, at most {} is supported",
                c.slot,
                MAX_DATA - 1
            );
        }
    }
}

/// A stripe of `k` data chunks is one the kernels take.
pub(super) fn check_k(op: &str, k: usize) {
    assert!(k > 0, "parity::{op}: no data chunks");
    assert!(
        k <= MAX_DATA,
        "parity::{op}: {k} data chunks, at most {MAX_DATA} are supported"
    );
}

/// Split a stripe into shared survivors (lost entries replaced by `&[]`) and the lost chunks.
/// `lost[1] == lost[0]` means one lost chunk (the second output is then an empty slice);
/// `usize::MAX` means none.
pub(super) fn split_lost<'s>(
    data: &'s mut [&mut [u8]],
    lost: [usize; 2],
) -> ([&'s [u8]; MAX_DATA], [&'s mut [u8]; 2]) {
    let mut srcs: [&[u8]; MAX_DATA] = [&[]; MAX_DATA];
    let mut outs: [&mut [u8]; 2] = [&mut [], &mut []];
    for (i, d) in data.iter_mut().enumerate().take(MAX_DATA) {
        if i == lost[0] {
            outs[0] = d;
        } else if i == lost[1] {
            outs[1] = d;
        } else {
            srcs[i] = d;
        }
    }
    (srcs, outs)
}

pub(super) fn need_q<'q>(q: Option<&'q mut [u8]>, what: &str) -> &'q mut [u8] {
    match q {
        Some(q) => q,
        None => panic!("parity::recover: {what} needs Q, but no Q was given (RAID 5?)"),
    }
}
