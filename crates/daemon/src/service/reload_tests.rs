use super::*;
use std::path::Path;

const BASE: &str = "[daemon]\nlisten = [\"unix:nbd.sock\"]\n\
    [[member]]\nid = \"d0\"\npath = \"memory:\"\nsize = \"64MiB\"\n\
    [[member]]\nid = \"d1\"\npath = \"memory:\"\nsize = \"64MiB\"\n\
    [[member]]\nid = \"d2\"\npath = \"memory:\"\nsize = \"64MiB\"\n\
    [[member]]\nid = \"s0\"\npath = \"memory:\"\nsize = \"64MiB\"\n\
    [[volume]]\nname = \"db\"\nlevel = \"raid5\"\nmembers = [\"d0\", \"d1\", \"d2\"]\n";

fn parse(text: &str) -> Config {
    config::parse(text, Path::new("/etc/nbraid/t.toml")).unwrap()
}

fn plan_of(old: &str, new: &str) -> Plan {
    let old = parse(old);
    plan(
        &old,
        &RunningVolume::declared(&old),
        &Live::of(&old),
        &parse(new),
    )
}

#[test]
fn the_same_config_changes_nothing() {
    assert_eq!(plan_of(BASE, BASE), Plan::default());
}

#[test]
fn a_new_rebuild_rate_is_live() {
    let new = format!("{BASE}rebuild_rate = \"200MiB\"\n");
    let p = plan_of(BASE, &new);
    assert_eq!(
        p.changes,
        [Change::RebuildRate {
            volume: "db".into(),
            rate: PassRate::limit(200 << 20)
        }]
    );
    assert!(p.at_restart.is_empty(), "{:?}", p.at_restart);
    assert_eq!(p.changes[0].describe(), "db: rebuild_rate now 200 MiB/s");
}

#[test]
fn the_hook_and_the_metrics_listener_are_live() {
    let new = BASE.replace(
        "[daemon]\n",
        "[daemon]\nmetrics_listen = \"9187\"\non_event = \"/bin/true\"\n",
    );
    let p = plan_of(BASE, &new);
    assert_eq!(
        p.changes,
        [
            Change::Hook(Some("/bin/true".into())),
            Change::Metrics(Some("127.0.0.1:9187".parse().unwrap())),
        ]
    );
    assert!(p.at_restart.is_empty());
    let back = plan_of(&new, BASE);
    assert_eq!(back.changes, [Change::Hook(None), Change::Metrics(None)]);
}

#[test]
fn spares_listed_or_unlisted_are_added_or_removed() {
    let with = format!("{BASE}spares = [\"s0\"]\n");
    let p = plan_of(BASE, &with);
    assert!(
        matches!(&p.changes[..], [Change::AddSpare { volume, spare }] if volume == "db" && spare.id == "s0"),
        "{:?}",
        p.changes
    );
    let p = plan_of(&with, BASE);
    assert!(
        matches!(&p.changes[..], [Change::RemoveSpare { spare, .. }] if spare.id == "s0"),
        "{:?}",
        p.changes
    );
    assert!(p.at_restart.is_empty());
}

#[test]
fn geometry_members_and_listeners_wait_for_a_restart_and_nothing_of_them_changes() {
    let new = BASE.replace("unix:nbd.sock", "unix:other.sock").replace(
        "level = \"raid5\"",
        "level = \"raid5\"\nstrip_size = \"128KiB\"",
    );
    let p = plan_of(BASE, &new);
    assert!(p.changes.is_empty(), "{:?}", p.changes);
    let text = p.at_restart.join("\n");
    assert!(
        text.contains("listen (the NBD listeners) takes effect at a restart"),
        "{text}"
    );
    assert!(
        text.contains("db: layout") && text.contains("superblocks"),
        "{text}"
    );
    let fewer = BASE.replace("\"d0\", \"d1\", \"d2\"", "\"d0\", \"d1\", \"s0\"");
    let text = plan_of(BASE, &fewer).at_restart.join("\n");
    assert!(
        text.contains("db: members [d0, d1, d2] → [d0, d1, s0]"),
        "{text}"
    );
    let policy = BASE.replace("level = \"raid5\"", "level = \"raid1\"");
    let text = plan_of(BASE, &policy).at_restart.join("\n");
    assert!(text.contains("db: level raid5 → raid1"), "{text}");
}

/// Found by a service hunt: after spare s0 took failed d1's role, the config `nbraid
/// status` advises (s0 among the members, no spare left) was said to change the members
/// "at a restart", and s0 was removed as a spare — from the role it serves.
#[test]
fn the_config_advised_after_a_spare_took_a_role_reloads_cleanly() {
    let started = parse(&format!("{BASE}spares = [\"s0\"]\n"));
    let mut running = RunningVolume::declared(&started);
    running[0].members[1] = ("s0".into(), "memory:".into());
    let live = Live::of(&started);
    let advised = parse(&BASE.replace("\"d0\", \"d1\", \"d2\"", "\"d0\", \"s0\", \"d2\""));
    assert_eq!(plan(&started, &running, &live, &advised), Plan::default());
    // The config as it was (s0 still listed as a spare): nothing to do either.
    assert_eq!(plan(&started, &running, &live, &started), Plan::default());
    // A real change is still said: d2 no longer listed (a restart would not open it).
    let real = parse(&BASE.replace("\"d0\", \"d1\", \"d2\"", "\"d0\", \"s0\", \"d1\""));
    let text = plan(&started, &running, &live, &real).at_restart.join("\n");
    assert!(
        text.contains("db: members [d0, s0, d2] → [d0, s0, d1]"),
        "{text}"
    );
    let level = advised_with(&BASE.replace("raid5", "raid1"));
    let text = plan(&started, &running, &live, &level)
        .at_restart
        .join("\n");
    assert!(text.contains("db: level raid5 → raid1"), "{text}");
}

fn advised_with(base: &str) -> Config {
    parse(&base.replace("\"d0\", \"d1\", \"d2\"", "\"d0\", \"s0\", \"d2\""))
}

/// After an online reshape the volume runs as its records say (another level, another
/// layout, another size): the config written for the new shape reloads cleanly, the
/// one it started with is the change.
#[test]
fn after_a_reshape_the_new_shape_is_compared_with_the_records() {
    let started = parse(BASE);
    let reshaped = parse(&BASE.replace("raid5", "raid1"));
    let mut running = RunningVolume::declared(&reshaped);
    running[0].reopened = true;
    let live = Live::of(&started);
    assert_eq!(plan(&started, &running, &live, &reshaped), Plan::default());
    let text = plan(&started, &running, &live, &started)
        .at_restart
        .join("\n");
    assert!(text.contains("db: level raid1 → raid5"), "{text}");
    assert!(text.contains("db: size"), "{text}");
}

#[test]
fn a_change_waiting_for_a_restart_is_said_again_while_live_ones_are_made_once() {
    let old = parse(BASE);
    let new = parse(&format!(
        "{}rebuild_rate = \"10MiB\"\n",
        BASE.replace("unix:nbd.sock", "unix:other.sock")
    ));
    let running = RunningVolume::declared(&old);
    let first = plan(&old, &running, &Live::of(&old), &new);
    assert_eq!(first.changes.len(), 1);
    // Once made, the live settings are the new config's.
    let again = plan(&old, &running, &Live::of(&new), &new);
    assert!(again.changes.is_empty());
    assert_eq!(again.at_restart, first.at_restart);
}

#[test]
fn a_volume_added_or_gone_waits_for_a_restart() {
    let more = format!(
        "{}[[volume]]\nname = \"scratch\"\nlevel = \"raid0\"\nmembers = [\"d0\", \"d1\"]\n",
        BASE.replace(
            "members = [\"d0\", \"d1\", \"d2\"]\n",
            "members = [\"d0\", \"d1\", \"d2\"]\nsize = \"32MiB\"\n"
        )
    );
    let text = plan_of(BASE, &more).at_restart.join("\n");
    assert!(text.contains("volume scratch is new"), "{text}");
    let text = plan_of(&more, BASE).at_restart.join("\n");
    assert!(
        text.contains("volume scratch is no longer in the config"),
        "{text}"
    );
}

#[test]
fn the_outcome_says_what_changed_what_failed_and_what_waits() {
    let out = Outcome {
        changed: vec!["db: rebuild_rate now 10 MiB/s".into()],
        failed: vec!["db: spare s1 added: in use".into()],
        at_restart: vec!["listen (the NBD listeners) takes effect at a restart".into()],
    };
    assert_eq!(
        out.summary(),
        "changed: db: rebuild_rate now 10 MiB/s. not changed: db: spare s1 added: in use. \
         waiting for a restart: listen (the NBD listeners) takes effect at a restart"
    );
    assert_eq!(Outcome::default().summary(), "nothing changed live");
}

/// `write_hole_log_size` is never taken by an existing array (its records keep the reserve
/// it was created with): a reload says so, not that a restart takes it (found by the config
/// hunt). `write_hole` is still one of the keys a restart takes.
#[test]
fn a_new_log_size_is_said_never_taken_and_write_hole_waits_for_a_restart() {
    let bigger = format!("{BASE}write_hole_log_size = \"4MiB\"\n");
    let text = plan_of(BASE, &bigger).at_restart.join("\n");
    assert!(
        text.contains("db: write_hole_log_size is never taken by an existing array"),
        "{text}"
    );
    assert!(!text.contains("takes effect at a restart"), "{text}");
    let off = format!("{BASE}write_hole = \"off\"\n");
    let text = plan_of(BASE, &off).at_restart.join("\n");
    assert!(
        text.contains("the metadata keys (create, bitmap_chunk, clean_delay, write_hole) takes effect at a restart"),
        "{text}"
    );
}

/// `block_size` is never taken by an existing array either (its records keep the size it is
/// served with): a reload says so. Before, it said "takes effect at a restart", which a
/// restart did not do.
#[test]
fn a_new_block_size_is_said_never_taken() {
    let small = format!("{BASE}block_size = 512\n");
    let text = plan_of(BASE, &small).at_restart.join("\n");
    assert!(
        text.contains(
            "db: block_size is never taken by an existing array: its records keep 4096-byte blocks"
        ),
        "{text}"
    );
    assert!(!text.contains("takes effect at a restart"), "{text}");
}
