//! Where each volume's regions go on its members: after the regions earlier volumes took,
//! with messages that say how much is needed and how much is free.

use super::size::{format_size, format_size_exact};
use crate::model::{Member, VolumeSize, JBOD_ALIGN, METADATA_RESERVED};
use nbraid_layout::{Level, Region, Shape};

/// What allocation needs to know of a volume's layout: a named level's [`Shape`] or a declared
/// tree.
pub(super) trait Sizing {
    /// `raid5`, `the tree`: for messages.
    fn name(&self) -> String;
    /// JBOD: members give unequal amounts, filled in order.
    fn concatenates_members(&self) -> bool;
    /// Every member's region is a whole number of these.
    fn unit(&self) -> u64;
    /// Volume capacity when every member gives `member_len` bytes (a multiple of `unit`).
    fn capacity_at(&self, member_len: u64) -> u64;
    /// Bytes each member gives for a volume of at least `capacity` bytes (a multiple of
    /// `unit`; more than any member has when it cannot be done).
    fn member_len_for(&self, capacity: u64) -> u64;
}

impl Sizing for Shape {
    fn name(&self) -> String {
        self.level.to_string()
    }

    fn concatenates_members(&self) -> bool {
        self.level == Level::Jbod
    }

    fn unit(&self) -> u64 {
        self.strip
    }

    fn capacity_at(&self, member_len: u64) -> u64 {
        member_len / self.strip * self.strip * self.data_members() as u64
    }

    fn member_len_for(&self, capacity: u64) -> u64 {
        Shape::member_len_for(self, capacity)
    }
}

/// Where a member's free space begins and who took the space before it; `tail_bytes` kept
/// free at the member's end for the volume being placed (a checksum area after its region).
#[derive(Clone, Default)]
pub(super) struct Usage {
    pub(super) cursor: u64,
    pub(super) users: Vec<(String, u64)>,
    pub(super) tail_bytes: u64,
}

/// "4 GiB, minus the 1 MiB metadata reserve, minus 2 GiB used by volume "a"".
fn describe_free(m: &Member, u: &Usage) -> String {
    let mut s = format!(
        "{} free: {} minus the {} metadata reserve",
        format_size(m.size.saturating_sub(u.cursor)),
        format_size(m.size),
        format_size(METADATA_RESERVED)
    );
    for (what, len) in &u.users {
        s.push_str(&format!(", minus {} used by {what}", format_size(*len)));
    }
    s
}

/// Places a volume's regions after the regions already taken on its members. The error is a
/// message saying how much is needed and how much is there.
pub(super) fn allocate(
    who: &str,
    shape: &dyn Sizing,
    requested: VolumeSize,
    idx: &[usize],
    members: &[Member],
    usage: &[Usage],
) -> Result<Vec<Region>, String> {
    let free = |i: usize| {
        (members[i].size.saturating_sub(usage[i].cursor)).saturating_sub(usage[i].tail_bytes)
    };
    let level = shape.name();
    if shape.concatenates_members() {
        let aligned = |i: usize| free(i) / JBOD_ALIGN * JBOD_ALIGN;
        let total: u64 = idx.iter().map(|&i| aligned(i)).sum();
        let want = match requested {
            VolumeSize::All => {
                if let Some(&i) = idx.iter().find(|&&i| aligned(i) == 0) {
                    return Err(format!(
                        "{who}: no room left on member \"{}\" ({}); jbod with size = \"all\" takes at least 4 KiB of every member",
                        members[i].id,
                        describe_free(&members[i], &usage[i])
                    ));
                }
                total
            }
            VolumeSize::Bytes(b) => {
                let want = b.div_ceil(JBOD_ALIGN) * JBOD_ALIGN;
                if want > total {
                    let each: Vec<String> = idx
                        .iter()
                        .map(|&i| {
                            format!(
                                "\"{}\" {}",
                                members[i].id,
                                describe_free(&members[i], &usage[i])
                            )
                        })
                        .collect();
                    return Err(format!(
                        "{who}: does not fit: jbod needs {} ({want} bytes) in total, but its members have only {} ({total} bytes) free; members: {}",
                        format_size(want),
                        format_size(total),
                        each.join("; ")
                    ));
                }
                want
            }
        };
        let mut left = want;
        return Ok(idx
            .iter()
            .map(|&i| {
                let len = aligned(i).min(left);
                left -= len;
                Region {
                    start: usage[i].cursor,
                    len,
                }
            })
            .collect());
    }

    let strip = shape.unit();
    let (tightest, min_free) = idx
        .iter()
        .map(|&i| (i, free(i)))
        .min_by_key(|&(_, f)| f)
        .expect("a shape has members");
    let len = match requested {
        VolumeSize::All => {
            let len = min_free / strip * strip;
            if len == 0 {
                return Err(format!(
                    "{who}: no room left on member \"{}\" ({}); {level} needs at least one {} strip on each member",
                    members[tightest].id,
                    describe_free(&members[tightest], &usage[tightest]),
                    format_size(strip)
                ));
            }
            len
        }
        VolumeSize::Bytes(b) => {
            let need = shape.member_len_for(b);
            if need > min_free {
                let fits = shape.capacity_at(min_free / strip * strip);
                return Err(format!(
                    "{who}: size {} does not fit: {level} over {} members needs {} ({need} bytes) on each member, but member \"{}\" has only {}; at most {} fits (size = \"{}\")",
                    format_size(b),
                    idx.len(),
                    format_size(need),
                    members[tightest].id,
                    describe_free(&members[tightest], &usage[tightest]),
                    format_size(fits),
                    format_size_exact(fits)
                ));
            }
            need
        }
    };
    Ok(idx
        .iter()
        .map(|&i| Region {
            start: usage[i].cursor,
            len,
        })
        .collect())
}
