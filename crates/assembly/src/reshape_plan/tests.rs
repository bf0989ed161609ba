use super::*;
use nbraid_layout::{Region, Shape, STRIP_DEFAULT};

const MIB: u64 = 1 << 20;

fn tree_of(level: Level, members: usize, spans: Option<usize>, strip: u64, len: u64) -> Node {
    tree_laid(level, members, spans, strip, len, ParityLayout::default())
}

fn tree_laid(
    level: Level,
    members: usize,
    spans: Option<usize>,
    strip: u64,
    len: u64,
    layout: ParityLayout,
) -> Node {
    let shape = Shape::new(level, members, spans, strip, layout).expect("valid shape");
    let regions = vec![Region { start: MIB, len }; members];
    shape.build(&regions).expect("builds")
}

fn online(p: &VolumePlan) -> &Move {
    match &p.action {
        Action::Online(m) => m,
        other => panic!("expected an online move, got {other:?}"),
    }
}

fn refused(p: &VolumePlan) -> &str {
    match &p.action {
        Action::Refused { reason } => reason,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn outline_recognizes_every_named_level() {
    for level in Level::ALL {
        let members = level.min_members()
            + if level.has_spans() {
                level.min_members() / 2
            } else {
                1
            };
        let spans = level.has_spans().then_some(3).filter(|_| members % 3 == 0);
        let Ok(shape) = Shape::new(
            level,
            members,
            spans,
            STRIP_DEFAULT,
            ParityLayout::default(),
        ) else {
            continue;
        };
        let tree = shape
            .build(&vec![
                Region {
                    start: 0,
                    len: 8 * MIB
                };
                members
            ])
            .unwrap();
        let o = outline(&tree);
        assert_eq!(o.level, Some(level), "{level}");
        assert_eq!(o.members, members);
        assert_eq!(o.spans, shape.spans, "{level}");
        assert_eq!(o.capacity_bytes, tree.capacity());
        let parity = matches!(
            level,
            Level::Raid5 | Level::Raid6 | Level::Raid50 | Level::Raid60
        );
        assert_eq!(o.parity_layout.is_some(), parity, "{level}");
        if !matches!(level, Level::Jbod | Level::Raid1) {
            assert_eq!(o.strip_bytes, Some(STRIP_DEFAULT), "{level}");
        }
    }
}

#[test]
fn the_same_tree_is_unchanged() {
    let t = tree_of(Level::Raid6, 5, None, STRIP_DEFAULT, 64 * MIB);
    let p = plan("v", &t, &t, 0);
    assert_eq!(p.action, Action::Unchanged);
    assert!(p.changes.is_empty());
}

#[test]
fn members_added_restripe_raid0_5_6_at_every_strip() {
    let mut strip = 4 << 10;
    while strip <= MIB {
        for (level, n) in [(Level::Raid0, 2), (Level::Raid5, 3), (Level::Raid6, 4)] {
            let old = tree_of(level, n, None, strip, 64 * MIB);
            let new = tree_of(level, n + 1, None, strip, 64 * MIB);
            let p = plan("v", &old, &new, 100 * MIB);
            let m = online(&p);
            assert_eq!(m.kind, MoveKind::Restripe, "{level} {strip}");
            assert_eq!(m.walked_bytes, old.capacity());
            assert_eq!(m.seconds_at_rate, Some(old.capacity().div_ceil(100 * MIB)));
            assert_eq!(m.tolerance_during, level.parity());
            assert_eq!(m.tolerance_after, level.parity());
            // Parity and data of the new shape: members / data members per logical byte.
            let data = new.data_members() as u64;
            assert_eq!(m.written_bytes, old.capacity() * (n as u64 + 1) / data);
            assert!(p.changes.contains(&Change::Members { from: n, to: n + 1 }));
            assert!(p.changes.iter().any(|c| matches!(c, Change::Size { .. })));
        }
        strip *= 4;
    }
}

#[test]
fn spans_join_whole() {
    for (level, per) in [(Level::Raid10, 2), (Level::Raid50, 3), (Level::Raid60, 4)] {
        let old = tree_of(level, 2 * per, Some(2), STRIP_DEFAULT, 32 * MIB);
        let new = tree_of(level, 3 * per, Some(3), STRIP_DEFAULT, 32 * MIB);
        let p = plan("v", &old, &new, 0);
        assert_eq!(online(&p).kind, MoveKind::Restripe, "{level}");
        assert_eq!(
            online(&p).seconds_at_rate,
            None,
            "an unlimited rate has no time"
        );
        // Wider spans: refused, naming the width.
        let wider = tree_of(level, 2 * (per + 1), Some(2), STRIP_DEFAULT, 32 * MIB);
        let why = refused(&plan("v", &old, &wider, 0)).to_string();
        assert!(why.contains(&format!("whole spans of {per}")), "{why}");
    }
}

#[test]
fn the_two_online_level_changes() {
    let r5 = tree_of(Level::Raid5, 3, None, STRIP_DEFAULT, 64 * MIB);
    let r6 = tree_of(Level::Raid6, 4, None, STRIP_DEFAULT, 64 * MIB);
    let p = plan("v", &r5, &r6, 0);
    let m = online(&p);
    assert_eq!(
        (m.kind, m.tolerance_during, m.tolerance_after),
        (MoveKind::Restripe, 1, 2)
    );
    assert!(p.changes.contains(&Change::Level {
        from: "raid5".into(),
        to: "raid6".into()
    }));

    let r6_same = tree_of(Level::Raid6, 3 + 1, None, STRIP_DEFAULT, 64 * MIB);
    let r5_four = tree_of(Level::Raid5, 4, None, STRIP_DEFAULT, 64 * MIB);
    let why = refused(&plan("v", &r5_four, &r6_same, 0)).to_string();
    assert!(why.contains("needs a member added"), "{why}");

    let r1 = tree_of(Level::Raid1, 2, None, STRIP_DEFAULT, 64 * MIB);
    let p = plan("v", &r1, &r5, 0);
    let m = online(&p);
    assert_eq!(
        (m.kind, m.tolerance_during, m.tolerance_after),
        (MoveKind::Restripe, 1, 1)
    );
    assert_eq!(m.walked_bytes, r1.capacity());
}

#[test]
fn other_level_changes_are_refused_with_the_reason() {
    let r0 = tree_of(Level::Raid0, 4, None, STRIP_DEFAULT, 64 * MIB);
    let r5 = tree_of(Level::Raid5, 4, None, STRIP_DEFAULT, 64 * MIB);
    let r6 = tree_of(Level::Raid6, 5, None, STRIP_DEFAULT, 64 * MIB);
    let why = refused(&plan(
        "v",
        &r6,
        &tree_of(Level::Raid5, 5, None, STRIP_DEFAULT, 64 * MIB),
        0,
    ))
    .to_string();
    assert!(why.contains("lowers the redundancy from 2 to 1"), "{why}");
    let why = refused(&plan("v", &r5, &r0, 0)).to_string();
    assert!(why.contains("lowers the redundancy"), "{why}");
    let why = refused(&plan(
        "v",
        &r0,
        &tree_of(Level::Raid5, 5, None, STRIP_DEFAULT, 64 * MIB),
        0,
    ))
    .to_string();
    assert!(why.contains("raid0 → raid5 is not done online"), "{why}");
}

#[test]
fn a_strip_change_restripes() {
    let old = tree_of(Level::Raid5, 4, None, 64 << 10, 64 * MIB);
    let new = tree_of(Level::Raid5, 4, None, MIB, 64 * MIB);
    let p = plan("v", &old, &new, 0);
    assert_eq!(online(&p).kind, MoveKind::Restripe);
    assert_eq!(
        p.changes,
        vec![Change::Strip {
            from_bytes: 64 << 10,
            to_bytes: MIB
        }]
    );
}

#[test]
fn removing_shrinking_and_moving_are_refused() {
    let r6 = tree_of(Level::Raid6, 5, None, STRIP_DEFAULT, 64 * MIB);
    let fewer = tree_of(Level::Raid6, 4, None, STRIP_DEFAULT, 64 * MIB);
    assert!(refused(&plan("v", &r6, &fewer, 0)).contains("removing members is not done online"));
    let smaller = tree_of(Level::Raid6, 5, None, STRIP_DEFAULT, 32 * MIB);
    let why = refused(&plan("v", &r6, &smaller, 0)).to_string();
    assert!(why.contains("shrinking is not done online"), "{why}");
    let shape = Shape::new(
        Level::Raid6,
        5,
        None,
        STRIP_DEFAULT,
        ParityLayout::default(),
    )
    .unwrap();
    let mut regions = vec![
        Region {
            start: MIB,
            len: 64 * MIB
        };
        5
    ];
    regions[2].start = 2 * MIB;
    let moved = shape.build(&regions).unwrap();
    let why = refused(&plan("v", &r6, &moved, 0)).to_string();
    assert!(
        why.contains("role 2's region starts at byte 2097152"),
        "{why}"
    );
    // A role the config no longer has (its member renumbered away as a new one) is named.
    let without_4 = tree_of(Level::Raid6, 6, None, STRIP_DEFAULT, 64 * MIB).renumbered(&|i| {
        if i == 4 {
            6
        } else {
            i
        }
    });
    let why = refused(&plan("v", &r6, &without_4, 0)).to_string();
    assert!(why.contains("role 4 has no member"), "{why}");
}

#[test]
fn grown_regions_append_and_keep_every_old_byte_in_place() {
    for (level, n, spans) in [
        (Level::Raid0, 3, None),
        (Level::Raid1, 2, None),
        (Level::Raid5, 4, None),
        (Level::Raid6, 5, None),
        (Level::Raid10, 4, Some(2)),
        (Level::Raid50, 6, Some(2)),
        (Level::Raid60, 8, Some(2)),
    ] {
        let old = tree_of(level, n, spans, STRIP_DEFAULT, 16 * MIB);
        let new = tree_of(level, n, spans, STRIP_DEFAULT, 24 * MIB);
        let p = plan("v", &old, &new, MIB);
        let m = online(&p);
        assert_eq!(m.kind, MoveKind::Append, "{level}");
        assert_eq!(m.walked_bytes, new.capacity() - old.capacity());
        assert_eq!(m.tolerance_during, m.tolerance_after);
        // The promise an append makes: every old byte stays where it was.
        let step = old.capacity() / 97;
        for i in 0..97 {
            let at = i * step;
            assert_eq!(
                nbraid_layout::map(&old, at, 4096).unwrap(),
                nbraid_layout::map(&new, at, 4096).unwrap(),
                "{level} at {at}"
            );
        }
    }
}

#[test]
fn a_jbod_grows_at_its_end_only() {
    let shape =
        |n| Shape::new(Level::Jbod, n, None, STRIP_DEFAULT, ParityLayout::default()).unwrap();
    let old = shape(2)
        .build(
            &[Region {
                start: 0,
                len: 8 * MIB,
            }; 2],
        )
        .unwrap();
    let added = shape(3)
        .build(
            &[Region {
                start: 0,
                len: 8 * MIB,
            }; 3],
        )
        .unwrap();
    let m = online(&plan("v", &old, &added, 0)).clone();
    assert_eq!((m.kind, m.walked_bytes), (MoveKind::Append, 8 * MIB));
    let last_grows = shape(2)
        .build(&[
            Region {
                start: 0,
                len: 8 * MIB,
            },
            Region {
                start: 0,
                len: 12 * MIB,
            },
        ])
        .unwrap();
    assert_eq!(
        online(&plan("v", &old, &last_grows, 0)).kind,
        MoveKind::Append
    );
    let first_grows = shape(2)
        .build(&[
            Region {
                start: 0,
                len: 12 * MIB,
            },
            Region {
                start: 0,
                len: 8 * MIB,
            },
        ])
        .unwrap();
    let why = refused(&plan("v", &old, &first_grows, 0)).to_string();
    assert!(
        why.contains("only its last member's region may change"),
        "{why}"
    );
}

#[test]
fn a_mirror_gains_copies() {
    let two = tree_of(Level::Raid1, 2, None, STRIP_DEFAULT, 16 * MIB);
    let three = tree_of(Level::Raid1, 3, None, STRIP_DEFAULT, 16 * MIB);
    let m = online(&plan("v", &two, &three, 0)).clone();
    assert_eq!(m.kind, MoveKind::Copy);
    assert_eq!((m.walked_bytes, m.written_bytes), (16 * MIB, 16 * MIB));
    assert_eq!((m.tolerance_during, m.tolerance_after), (1, 2));
}

#[test]
fn declared_trees_and_rotation_changes_are_refused() {
    let leaves = |base: usize| {
        (0..2)
            .map(|i| Node::member(base + i, 0, 8 * MIB))
            .collect::<Vec<_>>()
    };
    let mirrors = (0..3)
        .map(|s| Node::mirror(leaves(2 * s)).unwrap())
        .collect();
    let declared = Node::parity(STRIP_DEFAULT, 1, ParityLayout::default(), mirrors).unwrap();
    let r5 = tree_of(Level::Raid5, 6, None, STRIP_DEFAULT, 8 * MIB);
    assert!(refused(&plan("v", &declared, &r5, 0)).contains("declared trees"));
    let other = ParityLayout::ALL
        .into_iter()
        .find(|l| *l != ParityLayout::default())
        .unwrap();
    let rotated = tree_laid(Level::Raid5, 6, None, STRIP_DEFAULT, 8 * MIB, other);
    assert!(refused(&plan("v", &r5, &rotated, 0)).contains("parity rotation"));
}

#[test]
fn the_config_is_compared_by_recorded_role() {
    // Positions 0 and 1 hold roles 1 and 0; position 2 is new; position 3 holds role 2.
    let config = tree_of(Level::Raid5, 4, None, STRIP_DEFAULT, 8 * MIB);
    let by_role = config_by_role(&config, &[Some(1), Some(0), None, Some(2)], 3);
    assert_eq!(by_role.member_indices(), vec![1, 0, 3, 2]);
    assert_eq!(by_role.capacity(), config.capacity());
}

/// Every restripe the plan accepts can be copied in place: walking it window by window, the
/// layout's critical-section rule never meets a window that would overtake the bytes not yet
/// copied (at the shortest window, as the engine falls back to).
#[test]
fn every_accepted_restripe_copies_in_place() {
    let cases = [
        (
            tree_of(Level::Raid0, 2, None, 4096, MIB),
            tree_of(Level::Raid0, 5, None, 4096, MIB),
        ),
        (
            tree_of(Level::Raid5, 3, None, 8192, MIB),
            tree_of(Level::Raid5, 4, None, 8192, MIB),
        ),
        (
            tree_of(Level::Raid6, 4, None, 4096, MIB),
            tree_of(Level::Raid6, 6, None, 4096, MIB),
        ),
        (
            tree_of(Level::Raid5, 3, None, 4096, MIB),
            tree_of(Level::Raid6, 4, None, 4096, MIB),
        ),
        (
            tree_of(Level::Raid1, 2, None, 4096, MIB),
            tree_of(Level::Raid5, 3, None, 4096, MIB),
        ),
        (
            tree_of(Level::Raid5, 4, None, 64 << 10, MIB),
            tree_of(Level::Raid5, 4, None, 4096, MIB),
        ),
        (
            tree_of(Level::Raid5, 4, None, 4096, MIB),
            tree_of(Level::Raid5, 4, None, 64 << 10, MIB),
        ),
        (
            tree_of(Level::Raid50, 6, Some(2), 4096, MIB),
            tree_of(Level::Raid50, 9, Some(3), 4096, MIB),
        ),
        (
            tree_of(Level::Raid10, 4, Some(2), 4096, MIB),
            tree_of(Level::Raid10, 6, Some(3), 4096, MIB),
        ),
    ];
    for (old, new) in cases {
        assert_eq!(online(&plan("v", &old, &new, 0)).kind, MoveKind::Restripe);
        let r = nbraid_layout::Reshape::new(old.clone(), new.clone()).unwrap();
        let mut p = 0;
        while let Some(w) = r.window(p, r.unit()).unwrap() {
            assert_ne!(
                w.rule,
                nbraid_layout::WindowRule::Overtakes,
                "{:?} at {p}",
                outline(&new)
            );
            p += w.len;
        }
        assert_eq!(p, old.capacity());
    }
}

/// Roles in another leaf order (paths swapped in the config) with grown regions: the data
/// would not stay in place, so the plan copies it rather than claim an append.
#[test]
fn grown_regions_in_another_order_are_copied_not_appended() {
    let old = tree_of(Level::Raid5, 4, None, STRIP_DEFAULT, 16 * MIB);
    let grown = tree_of(Level::Raid5, 4, None, STRIP_DEFAULT, 24 * MIB);
    let swapped = grown.renumbered(&|i| [1, 0, 2, 3][i]);
    assert_eq!(online(&plan("v", &old, &grown, 0)).kind, MoveKind::Append);
    assert_eq!(
        online(&plan("v", &old, &swapped, 0)).kind,
        MoveKind::Restripe
    );
}
