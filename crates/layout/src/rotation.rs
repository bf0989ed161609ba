//! Parity placement inside one stripe, exactly as Linux md's `raid5_compute_sector` places it.
//!
//! For stripe number `s` of a group of `disks` members with `p` parity chunks, md computes the
//! P disk (and for RAID 6 the Q disk) and where each data chunk goes. md also fixes the order in
//! which data chunks enter the Q syndrome: starting at the disk after Q and walking the disks
//! in order (`raid6_d0`/`raid6_idx_to_slot`). For the symmetric layouts that order is the data
//! index order; for the asymmetric ones it is not, and we follow md so arrays interoperate.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// md's four classic RAID 5/6 parity rotations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum ParityLayout {
    /// md's default (`ALGORITHM_LEFT_SYMMETRIC`): parity walks from the last disk leftwards,
    /// data continues on the disk after parity.
    #[default]
    LeftSymmetric,
    /// `ALGORITHM_LEFT_ASYMMETRIC`: parity walks leftwards, data fills the other disks in order.
    LeftAsymmetric,
    /// `ALGORITHM_RIGHT_SYMMETRIC`: parity walks from the first disk rightwards.
    RightSymmetric,
    /// `ALGORITHM_RIGHT_ASYMMETRIC`.
    RightAsymmetric,
}

impl ParityLayout {
    pub const ALL: [ParityLayout; 4] = [
        ParityLayout::LeftSymmetric,
        ParityLayout::LeftAsymmetric,
        ParityLayout::RightSymmetric,
        ParityLayout::RightAsymmetric,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ParityLayout::LeftSymmetric => "left-symmetric",
            ParityLayout::LeftAsymmetric => "left-asymmetric",
            ParityLayout::RightSymmetric => "right-symmetric",
            ParityLayout::RightAsymmetric => "right-asymmetric",
        }
    }

    fn is_left(self) -> bool {
        matches!(
            self,
            ParityLayout::LeftSymmetric | ParityLayout::LeftAsymmetric
        )
    }

    fn is_symmetric(self) -> bool {
        matches!(
            self,
            ParityLayout::LeftSymmetric | ParityLayout::RightSymmetric
        )
    }
}

impl fmt::Display for ParityLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ParityLayout {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        ParityLayout::ALL
            .into_iter()
            .find(|l| l.name() == s)
            .ok_or_else(|| {
                format!(
                    "unknown parity layout `{s}`; valid: left-symmetric, left-asymmetric, right-symmetric, right-asymmetric"
                )
            })
    }
}

/// A list with one entry per disk (or data chunk) of a parity group: inline for groups of up
/// to 16 disks, so the roles of a stripe (asked for on every request) cost no allocation.
pub type PerDisk = smallvec::SmallVec<[usize; 16]>;

/// Which disk of the group holds what in one stripe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StripeRoles {
    /// Disk holding P.
    pub p: usize,
    /// Disk holding Q (RAID 6 only).
    pub q: Option<usize>,
    /// `data[i]` is the disk holding data chunk `i` (logical order within the stripe).
    pub data: PerDisk,
    /// `q_slot[i]` is the power of the generator that multiplies data chunk `i` in Q
    /// (md's syndrome slot). Equal to `i` for the symmetric layouts.
    pub q_slot: PerDisk,
}

impl StripeRoles {
    /// md's placement of stripe `stripe` for `disks` members with `parity` (1 or 2) parity chunks.
    pub fn md(layout: ParityLayout, disks: usize, parity: usize, stripe: u64) -> StripeRoles {
        assert!(parity == 1 || parity == 2, "parity must be 1 or 2");
        assert!(
            disks > parity,
            "a parity group needs more disks than parity chunks"
        );
        let data_disks = disks - parity;
        let turn = (stripe % disks as u64) as usize;
        let p = if layout.is_left() {
            disks - 1 - turn
        } else {
            turn
        };
        let mut q = None;
        let data: PerDisk = (0..data_disks)
            .map(|dd| {
                if parity == 1 {
                    if layout.is_symmetric() {
                        (p + 1 + dd) % disks
                    } else if dd >= p {
                        dd + 1
                    } else {
                        dd
                    }
                } else if layout.is_symmetric() {
                    (p + 2 + dd) % disks
                } else if p == disks - 1 {
                    // "Q D D D P": Q wraps to disk 0.
                    dd + 1
                } else if dd >= p {
                    // "D D P Q D"
                    dd + 2
                } else {
                    dd
                }
            })
            .collect();
        if parity == 2 {
            q = Some(if !layout.is_symmetric() && p == disks - 1 {
                0
            } else {
                (p + 1) % disks
            });
        }
        // md's syndrome order: walk disks from the one after Q (or from disk 0 when Q is last).
        let q_slot = match q {
            None => (0..data_disks).collect(),
            Some(qd) => {
                let d0 = if qd == disks - 1 { 0 } else { qd + 1 };
                let mut slot_of_disk = PerDisk::from_elem(usize::MAX, disks);
                let mut slot = 0;
                for k in 0..disks {
                    let disk = (d0 + k) % disks;
                    if disk != p && disk != qd {
                        slot_of_disk[disk] = slot;
                        slot += 1;
                    }
                }
                data.iter().map(|&d| slot_of_disk[d]).collect()
            }
        };
        StripeRoles { p, q, data, q_slot }
    }

    /// The role of `disk` in this stripe.
    pub fn role_of(&self, disk: usize) -> Role {
        if disk == self.p {
            Role::P
        } else if Some(disk) == self.q {
            Role::Q
        } else {
            Role::Data
        }
    }

    /// Data index held by `disk`, if it holds data in this stripe.
    pub fn data_index_of(&self, disk: usize) -> Option<usize> {
        self.data.iter().position(|&d| d == disk)
    }
}

/// What a chunk of a stripe holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Role {
    Data,
    P,
    Q,
}

impl Role {
    pub fn letter(self) -> char {
        match self {
            Role::Data => 'D',
            Role::P => 'P',
            Role::Q => 'Q',
        }
    }
}
