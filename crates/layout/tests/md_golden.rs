//! Golden pictures of md's parity rotations, derived by hand from `raid5_compute_sector`
//! (drivers/md/raid5.c) for the first stripes of a 4-member RAID 5 and a 5-member RAID 6.
//! Columns are members, rows are stripes; `Dn` is the n-th data chunk of the volume.

use nbraid_layout::{Geometry, Level, ParityLayout, Region, Role, Shape, StripeRoles};

const STRIP: u64 = 4096;

/// Draws the first `rows` stripes of a one-group parity volume through `Geometry::map`, so the
/// whole mapping path (not only the rotation table) is compared with md.
fn picture(level: Level, members: usize, layout: ParityLayout, rows: u64) -> String {
    let shape = Shape::new(level, members, None, STRIP, layout).unwrap();
    let regions = vec![
        Region {
            start: 1 << 20,
            len: 64 * STRIP
        };
        members
    ];
    let g = Geometry::new(shape, &regions).unwrap();
    let width = g.full_stripe_width().unwrap();
    let m = g.map(0, rows * width).unwrap();
    let mut cells = vec![vec![String::new(); members]; rows as usize];
    for e in m.data.iter().chain(m.parity.iter()) {
        let row = ((e.offset - (1 << 20)) / STRIP) as usize;
        cells[row][e.member] = match e.role {
            Role::Data => format!("D{}", e.logical / STRIP),
            Role::P => "P".into(),
            Role::Q => "Q".into(),
        };
    }
    cells
        .iter()
        .map(|r| r.join(" "))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn raid5_left_symmetric() {
    assert_eq!(
        picture(Level::Raid5, 4, ParityLayout::LeftSymmetric, 4),
        "D0 D1 D2 P\nD4 D5 P D3\nD8 P D6 D7\nP D9 D10 D11"
    );
}

#[test]
fn raid5_left_asymmetric() {
    assert_eq!(
        picture(Level::Raid5, 4, ParityLayout::LeftAsymmetric, 4),
        "D0 D1 D2 P\nD3 D4 P D5\nD6 P D7 D8\nP D9 D10 D11"
    );
}

#[test]
fn raid5_right_symmetric() {
    assert_eq!(
        picture(Level::Raid5, 4, ParityLayout::RightSymmetric, 4),
        "P D0 D1 D2\nD5 P D3 D4\nD7 D8 P D6\nD9 D10 D11 P"
    );
}

#[test]
fn raid5_right_asymmetric() {
    assert_eq!(
        picture(Level::Raid5, 4, ParityLayout::RightAsymmetric, 4),
        "P D0 D1 D2\nD3 P D4 D5\nD6 D7 P D8\nD9 D10 D11 P"
    );
}

#[test]
fn raid6_left_symmetric() {
    assert_eq!(
        picture(Level::Raid6, 5, ParityLayout::LeftSymmetric, 5),
        "Q D0 D1 D2 P\nD3 D4 D5 P Q\nD7 D8 P Q D6\nD11 P Q D9 D10\nP Q D12 D13 D14"
    );
}

#[test]
fn raid6_left_asymmetric() {
    assert_eq!(
        picture(Level::Raid6, 5, ParityLayout::LeftAsymmetric, 5),
        "Q D0 D1 D2 P\nD3 D4 D5 P Q\nD6 D7 P Q D8\nD9 P Q D10 D11\nP Q D12 D13 D14"
    );
}

#[test]
fn raid6_right_symmetric() {
    assert_eq!(
        picture(Level::Raid6, 5, ParityLayout::RightSymmetric, 5),
        "P Q D0 D1 D2\nD5 P Q D3 D4\nD7 D8 P Q D6\nD9 D10 D11 P Q\nQ D12 D13 D14 P"
    );
}

#[test]
fn raid6_right_asymmetric() {
    assert_eq!(
        picture(Level::Raid6, 5, ParityLayout::RightAsymmetric, 5),
        "P Q D0 D1 D2\nD3 P Q D4 D5\nD6 D7 P Q D8\nD9 D10 D11 P Q\nQ D12 D13 D14 P"
    );
}

/// md feeds data into the Q syndrome starting at the disk after Q (`raid6_d0`), so for the
/// asymmetric layouts the generator power of a chunk is not always its data index.
#[test]
fn raid6_q_slots_follow_md() {
    let sym = StripeRoles::md(ParityLayout::LeftSymmetric, 5, 2, 2);
    assert_eq!(sym.q_slot[..], [0, 1, 2]);
    // Stripe 2 of left-asymmetric: P on 2, Q on 3, data 0,1,2 on disks 0,1,4; md starts the
    // syndrome at disk 4, then 0, then 1.
    let asym = StripeRoles::md(ParityLayout::LeftAsymmetric, 5, 2, 2);
    assert_eq!((asym.p, asym.q), (2, Some(3)));
    assert_eq!(asym.data[..], [0, 1, 4]);
    assert_eq!(asym.q_slot[..], [1, 2, 0]);
    // Stripe 0: "Q D D D P", Q on disk 0, syndrome starts at disk 1.
    let first = StripeRoles::md(ParityLayout::LeftAsymmetric, 5, 2, 0);
    assert_eq!(
        (first.p, first.q, first.q_slot.to_vec()),
        (4, Some(0), vec![0, 1, 2])
    );
}
