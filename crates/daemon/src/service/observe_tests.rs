use super::*;
use nbraid_core::fail_cause::FailCause;

fn vol(failed: &[bool]) -> VolumeSnapshot {
    let roles: Vec<Role> = failed
        .iter()
        .enumerate()
        .map(|(i, &f)| Role {
            id: format!("d{i}"),
            failed: f,
            current: !f,
            remote: false,
            failure: f.then(|| Failure {
                cause: FailCause::Unanswered,
                why: "no reply within 5s".into(),
            }),
            write_errors_kept: 0,
            kept_past_limit: false,
            refused_now: None,
            path_problem: None,
        })
        .collect();
    let health = match failed.iter().filter(|f| **f).count() {
        0 => Health::Optimal,
        1 => Health::Degraded,
        _ => Health::Failed,
    };
    VolumeSnapshot {
        roles,
        health,
        passes: Default::default(),
        refused_flushes: RefusedFlushes::default(),
        cached_dirty_bytes: 0,
        failed_destages: 0,
    }
}

fn pass(instance: u64, state: PassState) -> Pass {
    Pass {
        instance,
        state,
        members: vec!["s0".into()],
        replacing: Vec::new(),
        position_bytes: 0,
        total_bytes: 100,
        checked: 0,
        mismatches: 0,
        repaired: 0,
        unreadable: 0,
        error: None,
    }
}

fn kinds(events: &[Event]) -> Vec<&'static str> {
    events.iter().map(|e| e.kind.name()).collect()
}

#[test]
fn a_failed_member_is_named_by_id_and_degrades_the_volume_once() {
    let before = vol(&[false, false, false]);
    let after = vol(&[false, true, false]);
    let e = changes("db", &before, &after);
    assert_eq!(kinds(&e), ["member-failed", "volume-degraded"]);
    assert_eq!(e[0].member.as_deref(), Some("d1"));
    assert!(e[1].detail.contains("d1"), "{}", e[1].detail);
    assert!(changes("db", &after, &after).is_empty());
}

#[test]
fn a_volume_that_starts_degraded_says_so_at_the_first_look() {
    let first = vol(&[true, false]);
    let e = changes("db", &VolumeSnapshot::baseline(&first), &first);
    assert_eq!(kinds(&e), ["member-failed", "volume-degraded"]);
}

#[test]
fn a_reshape_starting_pausing_and_ending_are_events() {
    let before = vol(&[false, false, false]);
    let mut running = before.clone();
    let mut p = pass(3, PassState::Running);
    p.members.clear();
    running.passes[PassKind::Reshape as usize] = vec![p.clone()];
    let e = changes("db", &before, &running);
    assert_eq!(kinds(&e), ["reshape-started"]);
    assert!(e[0].detail.contains("reshape started"), "{}", e[0].detail);
    let mut done = running.clone();
    p.state = PassState::Done;
    p.position_bytes = p.total_bytes;
    done.passes[PassKind::Reshape as usize] = vec![p];
    let e = changes("db", &running, &done);
    assert_eq!(kinds(&e), ["reshape-finished"]);
    assert_eq!(e[0].result.as_deref(), Some("done"));
    assert!(changes("db", &done, &done).is_empty());
    assert!(summary(&["db"], std::slice::from_ref(&running)).contains("reshape"));
}

#[test]
fn a_spare_taking_a_role_and_its_rebuild_are_events() {
    let before = vol(&[false, true]);
    let mut after = vol(&[false, false]);
    after.roles[1].id = "s0".into();
    after.roles[1].current = false;
    after.health = Health::Degraded;
    after.passes[PassKind::Rebuild as usize] = vec![pass(1, PassState::Running)];
    let e = changes("db", &before, &after);
    assert_eq!(kinds(&e), ["spare-active", "rebuild-started"]);
    assert_eq!(e[0].member.as_deref(), Some("s0"));
    let mut done = after.clone();
    done.roles[1].current = true;
    done.health = Health::Optimal;
    done.passes[PassKind::Rebuild as usize] = vec![pass(1, PassState::Done)];
    let e = changes("db", &after, &done);
    assert_eq!(kinds(&e), ["rebuild-finished", "volume-optimal"]);
    assert_eq!(e[0].result.as_deref(), Some("done"));
    assert!(changes("db", &done, &done).is_empty());
}

#[test]
fn a_member_that_failed_and_was_taken_over_between_two_looks_is_still_said_to_fail() {
    let before = vol(&[false, false]);
    let mut after = vol(&[false, false]);
    after.roles[1].id = "s0".into();
    after.roles[1].current = false;
    after.health = Health::Degraded;
    let e = changes("db", &before, &after);
    assert_eq!(
        kinds(&e),
        ["member-failed", "spare-active", "volume-degraded"]
    );
    assert_eq!(e[0].member.as_deref(), Some("d1"));
    // A replacement swaps in rebuilt: its old member did not fail.
    let mut replaced = vol(&[false, false]);
    replaced.roles[1].id = "new".into();
    assert_eq!(kinds(&changes("db", &before, &replaced)), ["spare-active"]);
}

#[test]
fn a_spare_that_took_a_role_and_failed_between_two_looks_is_said_to_fail() {
    let before = vol(&[false, false, false]);
    let mut after = vol(&[false, true, false]);
    after.roles[1].id = "s0".into();
    let e = changes("db", &before, &after);
    assert_eq!(
        kinds(&e),
        [
            "member-failed",
            "spare-active",
            "member-failed",
            "volume-degraded"
        ]
    );
    assert_eq!(e[0].member.as_deref(), Some("d1"));
    assert_eq!(e[2].member.as_deref(), Some("s0"));
    // Its role already failed before (the spare took a failed member's place, then failed).
    let mut out = vol(&[false, true, false]);
    let e = changes("db", &out, &after);
    assert_eq!(kinds(&e), ["spare-active", "member-failed"]);
    out.roles[1].id = "s0".into();
    assert!(changes("db", &out, &after).is_empty(), "said once");
}

#[test]
fn a_pass_over_between_two_looks_is_started_and_finished() {
    let before = vol(&[false]);
    let mut after = before.clone();
    let mut scrub = pass(7, PassState::Done);
    scrub.mismatches = 3;
    after.passes[PassKind::Scrub as usize] = vec![scrub];
    let e = changes("db", &before, &after);
    assert_eq!(
        kinds(&e),
        ["scrub-started", "scrub-finished", "mismatches-found"]
    );
    // The next pass (its own run id) is a new one, and the last one is not told again.
    let mut again = after.clone();
    again.passes[PassKind::Scrub as usize].push(pass(8, PassState::Running));
    assert_eq!(kinds(&changes("db", &after, &again)), ["scrub-started"]);
}

/// A run first seen idle (spawned, before its first window) and next seen over was
/// started and finished: every step of a run is told once, however many happened between
/// two looks.
#[test]
fn a_run_seen_idle_then_over_is_started_and_finished() {
    let idle = |state| {
        let mut v = vol(&[false]);
        v.passes[PassKind::Rebuild as usize] = vec![pass(4, state)];
        v
    };
    let (first, done) = (idle(PassState::Idle), idle(PassState::Done));
    assert!(
        changes("db", &vol(&[false]), &first).is_empty(),
        "not begun yet"
    );
    assert_eq!(
        kinds(&changes("db", &first, &done)),
        ["rebuild-started", "rebuild-finished"]
    );
    assert!(changes("db", &done, &done).is_empty());
    // Idle, then running, then paused, then over: one start, one finish.
    let steps = [
        PassState::Idle,
        PassState::Running,
        PassState::Paused,
        PassState::Running,
        PassState::Cancelled,
    ];
    let said: Vec<&str> = (steps.windows(2))
        .flat_map(|w| kinds(&changes("db", &idle(w[0]), &idle(w[1]))))
        .collect();
    assert_eq!(said, ["rebuild-started", "rebuild-finished"]);
}

/// A run seen running, then over and followed by the next run before the next look: the
/// first is said to finish, the second to start (its finish comes when it ends).
#[test]
fn a_run_replaced_between_two_looks_is_finished_and_the_next_started() {
    let mut before = vol(&[false]);
    before.passes[PassKind::Readd as usize] = vec![pass(1, PassState::Running)];
    let mut after = before.clone();
    after.passes[PassKind::Readd as usize] =
        vec![pass(1, PassState::Cancelled), pass(2, PassState::Running)];
    let e = changes("db", &before, &after);
    assert_eq!(kinds(&e), ["resync-finished", "resync-started"]);
    assert_eq!(e[0].result.as_deref(), Some("cancelled"));
    // Two whole runs between two looks: each started and finished, in order.
    let mut two = before.clone();
    two.passes[PassKind::Readd as usize] = vec![
        pass(1, PassState::Done),
        pass(2, PassState::Failed),
        pass(3, PassState::Done),
    ];
    assert_eq!(
        kinds(&changes("db", &before, &two)),
        [
            "resync-finished",
            "resync-started",
            "resync-finished",
            "resync-started",
            "resync-finished"
        ]
    );
}

/// A rebuild's finish names the members it wrote, though the array no longer does once
/// it is over.
#[test]
fn a_finished_rebuild_names_the_members_it_wrote() {
    let mut before = vol(&[false, false]);
    before.passes[PassKind::Rebuild as usize] = vec![pass(1, PassState::Running)];
    let mut after = before.clone();
    let mut done = pass(1, PassState::Done);
    done.members.clear();
    after.passes[PassKind::Rebuild as usize] = vec![done];
    let e = changes("db", &before, &after);
    assert_eq!(kinds(&e), ["rebuild-finished"]);
    assert_eq!(e[0].member.as_deref(), Some("s0"));
}

/// Found by a service hunt: blocks the checksums caught count as unreadable, not as
/// mismatches, and raised no alarm (three rotten blocks found and repaired: no
/// `mismatches-found`, status "0 bad", the metrics at 0).
#[test]
fn blocks_a_checksum_caught_raise_the_alarm_too() {
    let before = vol(&[false]);
    let mut after = before.clone();
    let mut scrub = pass(7, PassState::Done);
    (scrub.unreadable, scrub.repaired) = (3, 3);
    after.passes[PassKind::Scrub as usize] = vec![scrub];
    let e = changes("db", &before, &after);
    assert_eq!(
        kinds(&e),
        ["scrub-started", "scrub-finished", "mismatches-found"]
    );
    assert!(e[2].detail.contains("found 3 bad"), "{}", e[2].detail);
}

#[test]
fn a_remote_member_failing_is_unreachable_and_coming_back_is_said() {
    let mut before = vol(&[false, false]);
    before.roles[0].remote = true;
    let mut after = vol(&[true, false]);
    after.roles[0].remote = true;
    let e = changes("db", &before, &after);
    assert_eq!(
        kinds(&e),
        ["member-failed", "member-unreachable", "volume-degraded"]
    );
    assert_eq!(
        kinds(&changes("db", &after, &before)),
        ["member-back", "volume-optimal"]
    );
}

#[test]
fn a_remote_member_that_answered_with_errors_is_said_to_stay_failed() {
    let mut before = vol(&[false, false]);
    before.roles[0].remote = true;
    let mut after = vol(&[true, false]);
    after.roles[0].remote = true;
    after.roles[0].failure = Some(Failure {
        cause: FailCause::Errors,
        why: "write failed: Input/output error".into(),
    });
    let e = changes("db", &before, &after);
    assert_eq!(kinds(&e), ["member-failed", "volume-degraded"]);
    let said = &e[0].detail;
    assert_eq!(
        said.matches("Input/output error").count(),
        1,
        "said once: {said}"
    );
    assert!(said.contains("stays failed until the operator"), "{said}");
}

/// Found by an events hunt: a member kept through write errors (the volume cannot do
/// without it) raised no event; now the first and each power of two are told, with the
/// member and the count, and nothing while the count stands still.
#[test]
fn write_errors_a_member_was_kept_through_are_told_with_the_count() {
    let looks: Vec<VolumeSnapshot> = [0, 1, 1, 2, 3, 4, 7, 9]
        .iter()
        .map(|&n| {
            let mut v = vol(&[false, false]);
            v.roles[1].write_errors_kept = n;
            v
        })
        .collect();
    let said: Vec<Event> = (looks.windows(2))
        .flat_map(|w| changes("db", &w[0], &w[1]))
        .collect();
    assert_eq!(kinds(&said), ["write-errors-kept"; 4]);
    let counts: Vec<Option<u64>> = said.iter().map(|e| e.count).collect();
    assert_eq!(counts, [Some(1), Some(2), Some(4), Some(9)]);
    assert_eq!(said[0].member.as_deref(), Some("d1"));
    assert!(said[3].detail.contains("(9 so far)"), "{}", said[3].detail);
    // Counted from zero again (the volume opened again): the first is told again.
    assert!(changes("db", &looks[7], &looks[0]).is_empty());
    assert_eq!(
        kinds(&changes("db", &looks[0], &looks[1])),
        ["write-errors-kept"]
    );
}

/// Found by an events hunt: a member kept past its bad-block limit raised no event.
#[test]
fn a_member_kept_past_its_bad_block_limit_is_told_once() {
    let before = vol(&[false, false]);
    let mut after = before.clone();
    after.roles[0].kept_past_limit = true;
    let e = changes("db", &before, &after);
    assert_eq!(kinds(&e), ["kept-past-bad-block-limit"]);
    assert_eq!(e[0].member.as_deref(), Some("d0"));
    assert!(
        e[0].detail.contains("only readable copy"),
        "{}",
        e[0].detail
    );
    assert!(changes("db", &after, &after).is_empty());
}

/// Found by an events hunt: a flush that could not write back the write-back cache (its
/// acknowledged writes held in memory only) raised no event.
#[test]
fn a_refused_destage_of_the_write_back_cache_is_told_with_the_count() {
    let before = vol(&[false, false]);
    let refused = |count: u64| {
        let mut v = before.clone();
        v.refused_flushes = RefusedFlushes {
            count,
            last_error: Some("data unavailable: stripe 0".into()),
        };
        v.cached_dirty_bytes = 4096;
        v
    };
    let e = changes("db", &before, &refused(1));
    assert_eq!(kinds(&e), ["destage-failed"]);
    assert_eq!(e[0].count, Some(1));
    let d = &e[0].detail;
    assert!(d.contains("4096 bytes of acknowledged writes"), "{d}");
    assert!(d.contains("(data unavailable: stripe 0)"), "{d}");
    assert!(changes("db", &refused(1), &refused(1)).is_empty());
    assert!(changes("db", &refused(2), &refused(3)).is_empty());
    assert_eq!(
        kinds(&changes("db", &refused(3), &refused(4))),
        ["destage-failed"]
    );
}

#[test]
fn the_summary_names_failed_members_and_running_passes() {
    let mut s = vol(&[false, true]);
    s.passes[PassKind::Rebuild as usize] = vec![pass(1, PassState::Running)];
    assert_eq!(
        summary(&["db"], &[s]),
        "serving 1: db degraded (d1 failed), rebuild"
    );
}

/// Volume `r1`: a RAID 1 of two 8 MiB memory members, `d0` and `d1` (a scrub of it is over
/// in milliseconds, well within one look).
async fn tiny_mirror() -> ControlVolume {
    use crate::served::ServedArray;
    use nbraid_core::metadata::{Array, ArrayOptions, MemberMeta};
    use nbraid_core::{Member, MemoryMember};
    const MIB: u64 = 1 << 20;
    let mut metas = Vec::new();
    for i in 0..2 {
        let m = Arc::new(MemoryMember::new(format!("m{i}"), 9 * MIB)) as Arc<dyn Member>;
        metas.push(MemberMeta::load(m).await);
    }
    let leaves = (0..2)
        .map(|i| nbraid_layout::Node::member(i, MIB, 8 * MIB))
        .collect();
    let tree = nbraid_layout::Node::mirror(leaves).unwrap();
    let opts = ArrayOptions::default();
    let (array, _) = Array::create("r1", tree, metas, opts.clone(), true, &|_, _| {})
        .await
        .unwrap();
    let served = Arc::new(ServedArray::new(Arc::new(array), opts));
    ControlVolume::new(
        "r1".into(),
        "raid1".into(),
        served,
        vec!["d0".into(), "d1".into()],
        vec!["active"; 2],
        crate::control::StartReport::default(),
    )
}

/// Waits (5 s at most) until the observer sees the volume's latest scrub in `state`.
async fn scrub_seen(v: &ControlVolume, state: PassState) {
    for _ in 0..500 {
        if snapshot(v)
            .pass(PassKind::Scrub)
            .is_some_and(|p| p.state == state)
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the scrub never showed {}", state.name());
}

fn scrub(v: &ControlVolume) -> Arc<nbraid_core::ScrubControl> {
    let ctl = v.new_scrub(false, nbraid_core::PassRate::default());
    v.start_scrub(ctl.clone()).unwrap();
    ctl
}

/// Found by a service hunt: two scrubs of a tiny volume run in a row within one look said
/// one start and one finish (the observer saw only the latest pass).
#[tokio::test]
async fn two_passes_between_two_looks_are_each_started_and_finished() {
    let v = tiny_mirror().await;
    let before = VolumeSnapshot::baseline(&snapshot(&v));
    scrub(&v);
    scrub_seen(&v, PassState::Done).await;
    scrub(&v);
    scrub_seen(&v, PassState::Done).await;
    let e = changes("r1", &before, &snapshot(&v));
    assert_eq!(
        kinds(&e),
        [
            "scrub-started",
            "scrub-finished",
            "scrub-started",
            "scrub-finished"
        ]
    );
}

/// Found by a service hunt ("a start without a finish"): a pass seen running, then
/// cancelled and replaced by a new one before the next look, never said it finished.
#[tokio::test]
async fn a_pass_replaced_between_two_looks_is_said_to_finish() {
    let v = tiny_mirror().await;
    let ctl = v.new_scrub(false, nbraid_core::PassRate::default());
    ctl.pause();
    v.start_scrub(ctl.clone()).unwrap();
    scrub_seen(&v, PassState::Paused).await;
    let seen = snapshot(&v);
    ctl.cancel();
    ctl.resume();
    scrub_seen(&v, PassState::Cancelled).await;
    scrub(&v);
    scrub_seen(&v, PassState::Done).await;
    let e = changes("r1", &seen, &snapshot(&v));
    assert_eq!(
        kinds(&e),
        ["scrub-finished", "scrub-started", "scrub-finished"]
    );
    assert_eq!(e[0].result.as_deref(), Some("cancelled"));
    assert_eq!(e[2].result.as_deref(), Some("done"));
}

/// A write-back RAID 5 of four memory members (no background flusher: the test destages
/// by hand), as the service sees it, holding one cached 4 KiB write that cannot be written
/// back: two members failed.
async fn write_back_raid5_past_tolerance() -> (Arc<nbraid_core::metadata::Array>, ControlVolume) {
    use crate::served::ServedArray;
    use nbraid_core::metadata::{Array, ArrayOptions, MemberMeta};
    use nbraid_core::{Buf, CacheMode, Member, MemoryMember};
    const MIB: u64 = 1 << 20;
    let mut metas = Vec::new();
    for i in 0..4 {
        let m = Arc::new(MemoryMember::new(format!("m{i}"), 9 * MIB)) as Arc<dyn Member>;
        metas.push(MemberMeta::load(m).await);
    }
    let leaves = (0..4)
        .map(|i| nbraid_layout::Node::member(i, MIB, 8 * MIB))
        .collect();
    let tree = nbraid_layout::Node::parity(64 << 10, 1, Default::default(), leaves).unwrap();
    let mut opts = ArrayOptions::default();
    opts.volume.cache = CacheMode::WriteBack { bytes: 4 * MIB };
    opts.volume.cache_max_age = None;
    let (array, _) = Array::create("r5", tree, metas, opts.clone(), true, &|_, _| {})
        .await
        .unwrap();
    let array = Arc::new(array);
    let served = Arc::new(ServedArray::new(array.clone(), opts));
    let v = ControlVolume::new(
        "r5".into(),
        "raid5".into(),
        served,
        (0..4).map(|i| format!("d{i}")).collect(),
        vec!["active"; 4],
        crate::control::StartReport::default(),
    );
    array
        .write(0, Buf::copy_from(&[9u8; 4096]), false)
        .await
        .unwrap();
    array.volume().fail_member(1, "test");
    array.volume().fail_member(2, "test");
    (array, v)
}

/// The `destage-failed` events among `e`.
fn destage_failed(e: &[Event]) -> Vec<&Event> {
    (e.iter())
        .filter(|e| e.kind == EventKind::DestageFailed)
        .collect()
}

/// The source of `destage-failed`: a flush that cannot write the cache back.
#[tokio::test]
async fn a_flush_the_members_refuse_is_seen_by_the_observer() {
    let (array, v) = write_back_raid5_past_tolerance().await;
    let before = VolumeSnapshot::baseline(&snapshot(&v));
    assert!(array.flush().await.is_err());
    let e = changes("r5", &before, &snapshot(&v));
    let refused = destage_failed(&e);
    assert_eq!(refused.len(), 1, "{e:#?}");
    assert_eq!(refused[0].count, Some(1));
    assert!(
        refused[0].detail.contains("4096 bytes"),
        "{}",
        refused[0].detail
    );
}

/// A client that never flushes: the background flusher's failed write-back of an aged
/// stripe is told too (before, only a refused flush was, so the cached writes sat in memory
/// with nothing said but the daemon's log).
#[tokio::test]
async fn a_background_write_back_the_members_refuse_is_told_without_a_flush() {
    let (array, v) = write_back_raid5_past_tolerance().await;
    let before = VolumeSnapshot::baseline(&snapshot(&v));
    array.volume().destage_aged(Duration::ZERO).await;
    let after_one = snapshot(&v);
    assert_eq!(after_one.failed_destages, 1);
    let e = changes("r5", &before, &after_one);
    let told = destage_failed(&e);
    assert_eq!(told.len(), 1, "{e:#?}");
    assert_eq!(told[0].count, Some(1));
    assert!(told[0].detail.contains("background"), "{}", told[0].detail);
    assert!(told[0].detail.contains("4096 bytes"), "{}", told[0].detail);
    // Told at powers of two, as the log says them: the third failure is not told again.
    array.volume().destage_aged(Duration::ZERO).await;
    let after_two = snapshot(&v);
    assert_eq!(
        destage_failed(&changes("r5", &after_one, &after_two)).len(),
        1
    );
    array.volume().destage_aged(Duration::ZERO).await;
    let after_three = snapshot(&v);
    assert!(destage_failed(&changes("r5", &after_two, &after_three)).is_empty());
}

/// A rebuild that failed says why in its `rebuild-finished` event (it said only "failed at
/// N of M bytes": whether its target failed, or a read, was in the log alone).
#[test]
fn a_failed_rebuild_s_event_says_why() {
    let mut running = vol(&[false]);
    running.passes[PassKind::Rebuild as usize] = vec![pass(7, PassState::Running)];
    let mut failed = running.clone();
    let mut p = pass(7, PassState::Failed);
    p.error = Some("role 1's new member `s0` failed: failed by the operator".into());
    failed.passes[PassKind::Rebuild as usize] = vec![p];
    let e = changes("db", &running, &failed);
    assert_eq!(kinds(&e), ["rebuild-finished"]);
    assert_eq!(e[0].result.as_deref(), Some("failed"));
    assert!(
        e[0].detail
            .ends_with(": role 1's new member `s0` failed: failed by the operator"),
        "{}",
        e[0].detail
    );
}

/// A replace's events name the replacement it copies onto and the member it replaces
/// (they named the replaced member as the one written: `onto d2`).
#[test]
fn a_replace_s_events_name_the_replacement_and_the_member_it_replaces() {
    let mut running = vol(&[false]);
    let mut p = pass(9, PassState::Running);
    p.members = vec!["s0".into(), "r".into()];
    p.replacing = vec![("r".into(), "d2".into())];
    running.passes[PassKind::Rebuild as usize] = vec![p.clone()];
    let e = changes("db", &vol(&[false]), &running);
    assert_eq!(kinds(&e), ["rebuild-started"]);
    assert!(
        e[0].detail.contains("onto s0, r (replacing d2) ("),
        "{}",
        e[0].detail
    );
    assert_eq!(e[0].member.as_deref(), Some("s0,r"));
    assert_eq!(e[0].replaces.as_deref(), Some("d2"));
    assert_eq!(e[0].to_json()["replaces"], "d2");
    // Over: the array names nothing it rebuilds any more; as seen while it ran.
    let mut done = vol(&[false]);
    let mut over = pass(9, PassState::Done);
    over.members.clear();
    done.passes[PassKind::Rebuild as usize] = vec![over];
    let e = changes("db", &running, &done);
    assert_eq!(kinds(&e), ["rebuild-finished"]);
    assert_eq!(e[0].member.as_deref(), Some("s0,r"));
    assert_eq!(e[0].replaces.as_deref(), Some("d2"));
}

#[test]
fn a_remote_server_that_answers_but_is_refused_is_told_once_with_why() {
    let mut gone = vol(&[false, true]);
    gone.roles[1].remote = true;
    let mut refused = gone.clone();
    let tls = "TLS: invalid peer certificate: UnknownIssuer";
    refused.roles[1].refused_now = Some(tls.into());
    let e = changes("db", &gone, &refused);
    assert_eq!(kinds(&e), ["member-unreachable"]);
    assert_eq!(e[0].member.as_deref(), Some("d1"));
    assert!(
        e[0].detail
            .contains("its server answers again but is not used")
            && e[0].detail.contains(tls),
        "{}",
        e[0].detail
    );
    assert!(changes("db", &refused, &refused).is_empty(), "told once");
    // Gone again (no answer): nothing new; refused again: told again.
    assert!(changes("db", &refused, &gone).is_empty());
    assert_eq!(
        kinds(&changes("db", &gone, &refused)),
        ["member-unreachable"]
    );
}

#[test]
fn a_remote_member_that_fails_already_refused_says_so_not_unanswering() {
    let mut before = vol(&[false, false]);
    before.roles[1].remote = true;
    let mut after = vol(&[false, true]);
    after.roles[1].remote = true;
    after.roles[1].refused_now = Some("TLS: certificate expired".into());
    let e = changes("db", &before, &after);
    let told: Vec<&str> = e.iter().map(|e| e.detail.as_str()).collect();
    assert!(
        told.iter()
            .any(|d| d.contains("answers again but is not used: TLS: certificate expired")),
        "{told:?}"
    );
    assert!(
        !told.iter().any(|d| d.contains("is not answering")),
        "{told:?}"
    );
}

/// Found by a hunt: a member file deleted while served showed healthy and raised nothing.
/// Its path found not naming its file is told once, and again only when that changes.
#[test]
fn a_member_path_lost_is_told_once_per_change() {
    use crate::control::member_path::PathProblem;
    let before = vol(&[false, false]);
    let mut after = before.clone();
    after.roles[1].path_problem = Some((PathProblem::Deleted, "/d1.img".into()));
    let e = changes("db", &before, &after);
    assert_eq!(kinds(&e), ["member-path-lost"]);
    assert_eq!(e[0].member.as_deref(), Some("d1"));
    assert!(
        e[0].detail.contains("/d1.img was deleted") && e[0].detail.contains("nbraid replace"),
        "{}",
        e[0].detail
    );
    assert!(changes("db", &after, &after).is_empty(), "told once");
    let mut replaced = after.clone();
    replaced.roles[1].path_problem = Some((PathProblem::Replaced, "/d1.img".into()));
    assert_eq!(
        kinds(&changes("db", &after, &replaced)),
        ["member-path-lost"]
    );
    assert!(
        changes("db", &replaced, &before).is_empty(),
        "put back: nothing to tell"
    );
}
