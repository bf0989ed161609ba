//! The control socket's bounds, with short limits: a connection beyond the cap (given the
//! place of the longest-waiting one, or told busy while all follow), an idle one,
//! a half line, a client that never reads; and the long-lived uses that must go on (polling
//! as `status --watch` does, following events).

use super::*;
use crate::events::{Event, EventKind};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

const STATUS: &[u8] = b"{\"v\":1,\"op\":\"status\"}\n";

/// A control server with no volumes and `limits` on a socket in a fresh directory, serving
/// in the background; the directory, and the bus its `events` follow.
fn serve(limits: ControlLimits) -> (tempfile::TempDir, PathBuf, Arc<EventBus>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ctl.sock");
    let bus = Arc::new(EventBus::unhooked());
    let server = ControlServer::bind(&path)
        .unwrap()
        .with_limits(limits)
        .with_events(bus.clone());
    tokio::spawn(server.serve(Arc::new(Controls {
        volumes: vec![],
        config: None,
    })));
    (dir, path, bus)
}

fn limits() -> ControlLimits {
    ControlLimits {
        connections_max: 8,
        followers_max: 6,
        idle_timeout: Duration::from_secs(30),
        line_timeout: Duration::from_secs(30),
        write_timeout: Duration::from_secs(30),
    }
}

/// The next line the daemon sends, as JSON; `None` at the end of the stream. Fails the test
/// if nothing comes within 5 s.
async fn next(r: &mut BufReader<UnixStream>) -> Option<Value> {
    let mut line = String::new();
    let n = timeout(Duration::from_secs(5), r.read_line(&mut line))
        .await
        .expect("the daemon answered or closed within 5 s")
        .unwrap_or(0);
    (n > 0).then(|| serde_json::from_str(&line).unwrap())
}

async fn connect(path: &Path) -> BufReader<UnixStream> {
    BufReader::new(UnixStream::connect(path).await.unwrap())
}

async fn status(c: &mut BufReader<UnixStream>) -> Value {
    c.get_mut().write_all(STATUS).await.unwrap();
    next(c).await.expect("a status reply")
}

/// Connections waiting on their clients (one half a line in, one idle after a reply) give
/// their places to newcomers, the longest-waiting first, saying why (found by a hunt: 64
/// half-sent lines locked `nbraid status` and `fail` out until the line timeout).
#[tokio::test]
async fn a_newcomer_past_the_cap_takes_the_place_of_the_longest_waiting_connection() {
    let (_dir, path, _) = serve(ControlLimits {
        connections_max: 2,
        ..limits()
    });
    let mut half = connect(&path).await;
    half.get_mut().write_all(b"{\"v\":1,\"op\":").await.unwrap();
    let mut idle = connect(&path).await;
    assert_eq!(status(&mut idle).await["ok"], true);

    let mut newcomer = connect(&path).await;
    assert_eq!(status(&mut newcomer).await["ok"], true, "served at once");
    let told = next(&mut half).await.expect("a line saying why");
    assert_eq!(told["error"]["code"], "busy", "{told}");
    let message = told["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("to give its place to a new connection")
            && message.contains("waited longest"),
        "{message}"
    );
    assert!(next(&mut half).await.is_none(), "closed");

    let mut another = connect(&path).await;
    assert_eq!(status(&mut another).await["ok"], true);
    let told = next(&mut idle).await.expect("a line saying why");
    assert_eq!(told["error"]["code"], "busy", "{told}");
}

/// When every place follows (or runs a request), a newcomer is told `busy` and closed, and
/// gets a place again once one is given back.
#[tokio::test]
async fn a_newcomer_is_told_busy_only_while_every_place_follows() {
    let (_dir, path, _) = serve(ControlLimits {
        connections_max: 2,
        followers_max: 2,
        ..limits()
    });
    let mut first = connect(&path).await;
    let mut second = connect(&path).await;
    for w in [&mut first, &mut second] {
        assert_eq!(status(w).await["ok"], true);
        assert_eq!(status(w).await["ok"], true, "a follower now");
    }
    let mut third = connect(&path).await;
    let refused = next(&mut third).await.expect("a refusal line");
    assert_eq!(refused["error"]["code"], "busy", "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.contains("at most 2 connections"), "{message}");
    assert!(next(&mut third).await.is_none(), "closed after the refusal");

    drop(first);
    // The place is given back when the first's task sees the close.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let mut again = connect(&path).await;
        again.get_mut().write_all(STATUS).await.unwrap();
        let reply = next(&mut again).await.expect("a reply");
        if reply["ok"] == true {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no place again: {reply}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        status(&mut second).await["ok"],
        true,
        "followers keep theirs"
    );
}

#[test]
fn a_connection_follows_once_it_asks_again_or_follows_events() {
    let status = Request::Status { volume: None };
    assert!(!needs_follower_place(0, &status), "a one-shot request");
    assert!(needs_follower_place(1, &status), "a watcher's second ask");
    let scrub = Request::Scrub {
        volume: "r6".into(),
        repair: false,
        rate: None,
    };
    assert!(!needs_follower_place(0, &scrub));
    assert!(needs_follower_place(1, &status), "the scrub followed");
    let reshape = Request::Reshape {
        volume: "r6".into(),
        config: "arrays.toml".into(),
        force: false,
    };
    assert!(
        !needs_follower_place(1, &reshape),
        "apply: status, then a reshape"
    );
    assert!(needs_follower_place(0, &Request::Events { follow: true }));
    assert!(!needs_follower_place(0, &Request::Events { follow: false }));
}

/// Watchers past the followers' cap are refused naming it, and the places left over still
/// answer one-shot requests (found by a hunt: 64 `status --watch` locked `nbraid fail` out).
#[tokio::test]
async fn followers_past_their_cap_are_refused_and_one_shot_requests_still_answer() {
    let (_dir, path, _) = serve(ControlLimits {
        connections_max: 4,
        followers_max: 2,
        ..limits()
    });
    let mut watchers = Vec::new();
    for _ in 0..2 {
        let mut w = connect(&path).await;
        assert_eq!(status(&mut w).await["ok"], true);
        assert_eq!(
            status(&mut w).await["ok"],
            true,
            "a follower within the cap"
        );
        watchers.push(w);
    }
    let mut third = connect(&path).await;
    assert_eq!(
        status(&mut third).await["ok"],
        true,
        "its first ask is answered"
    );
    let refused = status(&mut third).await;
    assert_eq!(refused["error"]["code"], "busy", "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("at most 2 followers at once") && message.contains("one-shot"),
        "{message}"
    );
    assert!(next(&mut third).await.is_none(), "closed after the refusal");
    let mut follower = connect(&path).await;
    (follower.get_mut())
        .write_all(b"{\"v\":1,\"op\":\"events\",\"follow\":true}\n")
        .await
        .unwrap();
    let refused = next(&mut follower).await.expect("a refusal line");
    assert_eq!(refused["error"]["code"], "busy", "{refused}");
    // Admin commands find a place while every follower place is taken (the refused ones'
    // places come back when their tasks end).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let mut admins = Vec::new();
    while admins.len() < 2 {
        let mut admin = connect(&path).await;
        let reply = status(&mut admin).await;
        match reply["ok"] == true {
            true => admins.push(admin),
            false => {
                assert!(tokio::time::Instant::now() < deadline, "{reply}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    for w in &mut watchers {
        assert_eq!(status(w).await["ok"], true, "the followers go on");
    }
}

#[tokio::test]
async fn a_blank_line_is_answered_with_an_error_and_the_connection_goes_on() {
    let (_dir, path, _) = serve(limits());
    let mut c = connect(&path).await;
    for blank in [&b"\n"[..], b"  \t\r\n"] {
        c.get_mut().write_all(blank).await.unwrap();
        let reply = next(&mut c).await.expect("a reply to a blank line");
        assert_eq!(reply["error"]["code"], "malformed", "{reply}");
        let message = reply["error"]["message"].as_str().unwrap();
        assert!(message.contains("empty request line"), "{message}");
    }
    assert_eq!(status(&mut c).await["ok"], true);
}

#[tokio::test]
async fn an_idle_connection_is_told_why_and_closed() {
    let (_dir, path, _) = serve(ControlLimits {
        idle_timeout: Duration::from_millis(200),
        ..limits()
    });
    let mut c = connect(&path).await;
    assert_eq!(status(&mut c).await["ok"], true);
    let said = next(&mut c).await.expect("a line saying why");
    assert_eq!(said["error"]["code"], "timeout", "{said}");
    assert!(said["error"]["message"]
        .as_str()
        .unwrap()
        .contains("no request for 0.2 s"));
    assert!(next(&mut c).await.is_none(), "closed");
}

#[tokio::test]
async fn a_half_sent_line_is_closed_after_the_line_timeout() {
    let (_dir, path, _) = serve(ControlLimits {
        line_timeout: Duration::from_millis(200),
        ..limits()
    });
    let mut c = connect(&path).await;
    c.get_mut().write_all(b"{\"v\":1,\"op\":").await.unwrap();
    let said = next(&mut c).await.expect("a line saying why");
    assert_eq!(said["error"]["code"], "timeout", "{said}");
    assert!(said["error"]["message"]
        .as_str()
        .unwrap()
        .contains("unfinished"));
    assert!(next(&mut c).await.is_none(), "closed");
}

#[tokio::test]
async fn a_client_that_never_reads_its_replies_is_closed() {
    let (_dir, path, _) = serve(ControlLimits {
        write_timeout: Duration::from_millis(200),
        ..limits()
    });
    let mut c = UnixStream::connect(&path).await.unwrap();
    let batch = STATUS.repeat(1000);
    // Replies pile up unread until the daemon's writes wait; it then closes, and the
    // requests still being sent fail. Without a write bound both sides wait forever.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match timeout(left, c.write_all(&batch)).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => break, // closed by the daemon
            Err(_) => panic!("the daemon still holds a client that reads nothing after 10 s"),
        }
    }
}

/// `nbraid status --watch` asks every second on one connection; with asks closer than the
/// idle timeout it is never closed.
#[tokio::test]
async fn polling_faster_than_the_idle_timeout_keeps_the_connection() {
    let (_dir, path, _) = serve(ControlLimits {
        idle_timeout: Duration::from_millis(300),
        ..limits()
    });
    let mut c = connect(&path).await;
    for _ in 0..8 {
        assert_eq!(status(&mut c).await["ok"], true);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A followed `events` stream is not idle while the daemon has nothing to say.
#[tokio::test]
async fn a_follower_outlives_the_idle_timeout() {
    let (_dir, path, bus) = serve(ControlLimits {
        idle_timeout: Duration::from_millis(100),
        line_timeout: Duration::from_millis(100),
        ..limits()
    });
    let mut c = connect(&path).await;
    c.get_mut()
        .write_all(b"{\"v\":1,\"op\":\"events\",\"follow\":true}\n")
        .await
        .unwrap();
    assert_eq!(next(&mut c).await.unwrap()["following"], true);
    tokio::time::sleep(Duration::from_millis(500)).await;
    bus.publish(Event::new(EventKind::VolumeDegraded, "r5", "d1 failed"));
    let got = next(&mut c).await.expect("the event, not a close");
    assert_eq!(got["event"], "volume-degraded", "{got}");
}

/// A control path that holds a file (a member mistyped into `control`, the config itself) is
/// refused and the file left as it was; a stale socket is replaced; a stopping server
/// removes only the socket it bound (found by a fuzzing hunt: any file at the path was
/// removed, a member's image included).
#[tokio::test]
async fn only_a_stale_socket_is_replaced_and_only_our_own_removed() {
    let dir = tempfile::tempdir().unwrap();
    let member = dir.path().join("b.img");
    std::fs::write(&member, b"a member's bytes").unwrap();
    let refused = ControlServer::bind(&member)
        .err()
        .expect("a file is refused");
    assert!(refused.to_string().contains("not a socket"), "{refused}");
    assert_eq!(std::fs::read(&member).unwrap(), b"a member's bytes");

    let path = dir.path().join("ctl.sock");
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    let server = ControlServer::bind(&path).expect("a stale socket is replaced");
    // Something else took the path meanwhile: the stopping server leaves it alone.
    std::fs::remove_file(&path).unwrap();
    std::fs::write(&path, b"not ours").unwrap();
    drop(server);
    assert_eq!(std::fs::read(&path).unwrap(), b"not ours");

    let server = ControlServer::bind(&dir.path().join("own.sock")).unwrap();
    drop(server);
    assert!(!dir.path().join("own.sock").exists(), "its own socket goes");
}
