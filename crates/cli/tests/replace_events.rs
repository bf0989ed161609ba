//! The events of a replace name the disk copied onto (the replacement) and the member it
//! replaces: `rebuild-started … onto d2` named the member being replaced as the target.

mod common;

use common::*;
use serde_json::Value;
use std::time::{Duration, Instant};

/// The events so far, once `done` holds of them (10 s at most: the observer looks on its own
/// schedule).
fn events_until(cfg: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = ok(nbraid(&["events", "--json", "--config", cfg]), "events");
        let events: Vec<Value> = (out.lines())
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        if done(&events) || Instant::now() > deadline {
            return events;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn of<'a>(events: &'a [Value], kind: &str) -> Option<&'a Value> {
    events.iter().find(|e| e["event"] == kind)
}

#[test]
fn replace_events_name_the_replacement_and_the_member_it_replaces() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config_with(dir.path(), &[], "rebuild_rate = \"8MiB\"\n");
    let cfg = config.to_str().unwrap();
    let mut d = Daemon::start(&config);
    let r = blank_member(dir.path(), "r.img");
    ok(
        nbraid(&["replace", "r6", "d2", &r, "--config", cfg]),
        "replace",
    );
    let events = events_until(cfg, |e| {
        of(e, "rebuild-started").is_some() && of(e, "rebuild-finished").is_some()
    });
    let started = of(&events, "rebuild-started").expect("rebuild-started");
    assert_eq!(started["member"], "r", "{started:#}");
    assert_eq!(started["replaces"], "d2", "{started:#}");
    let detail = started["detail"].as_str().unwrap();
    assert!(detail.contains("onto r (replacing d2)"), "{detail}");
    let finished = of(&events, "rebuild-finished").expect("rebuild-finished");
    assert_eq!(finished["member"], "r", "{finished:#}");
    assert_eq!(finished["replaces"], "d2", "{finished:#}");
    assert_eq!(finished["result"], "done", "{finished:#}");
    let events = events_until(cfg, |e| of(e, "spare-active").is_some());
    let active = of(&events, "spare-active").expect("spare-active");
    assert_eq!(active["member"], "r", "{active:#}");
    assert!(
        (active["detail"].as_str().unwrap()).contains("r takes the place of d2"),
        "{active:#}"
    );
    d.stop();
}
