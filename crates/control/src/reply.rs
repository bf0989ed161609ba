//! What a client checks of a reply before it reads any field: the version first (a daemon
//! of another release may say the same thing in another shape), then the shape every reply
//! of this version has — an object with `"ok"`, and for a refusal an `"error"` with a code
//! and a message. A reply that passes can be read field by field; one that does not is named
//! as what it is, never taken for an empty success.

use crate::VERSION;
use serde_json::Value;

/// Why a line from the daemon is not a reply this client can read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BadReply {
    /// The daemon speaks another protocol version (`theirs`); `said`: its refusal's message,
    /// if it sent one (a daemon refusing our version says why).
    Version { theirs: u64, said: Option<String> },
    /// Not a reply of this protocol: what is wrong, and the start of the line.
    Shape { why: &'static str, reply: String },
}

impl std::fmt::Display for BadReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BadReply::Version { theirs, said } => {
                let newer = match *theirs > VERSION {
                    true => "newer",
                    false => "older",
                };
                write!(
                    f,
                    "the daemon speaks control protocol version {theirs}, this nbraid version {VERSION}: \
                     the daemon is {newer} than this nbraid; use the nbraid of the nbraidd that runs"
                )?;
                match said {
                    Some(m) => write!(f, " (the daemon said: {m})"),
                    None => Ok(()),
                }
            }
            BadReply::Shape { why, reply } => write!(
                f,
                "the daemon's reply is not a control reply of version {VERSION}: {why}; it sent {reply}"
            ),
        }
    }
}

impl std::error::Error for BadReply {}

/// Longest part of a bad reply quoted in the error.
const QUOTED_CHARS_MAX: usize = 200;

/// Checks `reply` is a reply of [`VERSION`] with the shape every reply has (see the module).
pub fn check_reply(reply: &Value) -> Result<(), BadReply> {
    let shape = |why| BadReply::Shape {
        why,
        reply: quoted(reply),
    };
    let Value::Object(o) = reply else {
        return Err(shape("not a JSON object"));
    };
    check_version(o, shape)?;
    match o.get("ok") {
        Some(Value::Bool(true)) => Ok(()),
        Some(Value::Bool(false)) => {
            let e = o.get("error");
            let text = |k: &str| e.is_some_and(|e| e[k].is_string());
            match text("code") && text("message") {
                true => Ok(()),
                false => Err(shape("a refusal without an \"error\" code and message")),
            }
        }
        _ => Err(shape("no \"ok\" true or false")),
    }
}

/// Checks `line`, one the daemon streams unasked after a followed `events` reply, is of
/// [`VERSION`] and is an event (`"event"`: its name) or a `"lagged"` count: such lines have
/// no `"ok"`, but a daemon of another release may shape them otherwise all the same.
pub fn check_streamed(line: &Value) -> Result<(), BadReply> {
    let shape = |why| BadReply::Shape {
        why,
        reply: quoted(line),
    };
    let Value::Object(o) = line else {
        return Err(shape("not a JSON object"));
    };
    check_version(o, shape)?;
    match (o.get("event"), o.get("lagged")) {
        (Some(Value::String(_)), None) => Ok(()),
        (None, Some(n)) if n.is_u64() => Ok(()),
        _ => Err(shape(
            "neither an event (\"event\": its name) nor a \"lagged\" count",
        )),
    }
}

/// The version check every line from the daemon passes first; `shape` names a line with no
/// readable version.
fn check_version(
    o: &serde_json::Map<String, Value>,
    shape: impl Fn(&'static str) -> BadReply,
) -> Result<(), BadReply> {
    match o.get("v") {
        None => Err(shape("no version field \"v\"")),
        Some(v) => match v.as_u64() {
            Some(VERSION) => Ok(()),
            Some(theirs) => {
                let said = o.get("error").and_then(|e| e["message"].as_str());
                Err(BadReply::Version {
                    theirs,
                    said: said.map(str::to_string),
                })
            }
            None => Err(shape("its version field \"v\" is not a whole number")),
        },
    }
}

/// The start of `reply`, as the error quotes it.
fn quoted(reply: &Value) -> String {
    let text = reply.to_string();
    match text.char_indices().nth(QUOTED_CHARS_MAX) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{error_reply, ok_reply, Refusal};
    use serde_json::json;

    #[test]
    fn the_replies_the_daemon_writes_pass() {
        assert_eq!(check_reply(&ok_reply(json!({"volumes": []}))), Ok(()));
        let refusal = Refusal::new("busy", "try again");
        assert_eq!(check_reply(&error_reply(&refusal)), Ok(()));
    }

    #[test]
    fn another_version_is_named_with_both_numbers_and_what_the_daemon_said() {
        let newer = check_reply(&json!({"v": 2, "ok": true})).unwrap_err();
        let text = newer.to_string();
        assert!(text.contains("version 2, this nbraid version 1"), "{text}");
        assert!(text.contains("newer"), "{text}");
        let older = json!({"v": 0, "ok": false, "error": {"code": "x", "message": "v1?"}});
        let text = check_reply(&older).unwrap_err().to_string();
        assert!(
            text.contains("version 0") && text.contains("older"),
            "{text}"
        );
        assert!(text.contains("the daemon said: v1?"), "{text}");
    }

    #[test]
    fn a_reply_of_another_shape_is_refused_saying_what_is_wrong() {
        for (reply, why) in [
            (json!([1, 2]), "not a JSON object"),
            (json!({"ok": true}), "no version field"),
            (json!({"v": "1", "ok": true}), "not a whole number"),
            (json!({"v": 1}), "no \"ok\""),
            (json!({"v": 1, "ok": "yes"}), "no \"ok\""),
            (json!({"v": 1, "ok": false}), "without an \"error\""),
            (
                json!({"v": 1, "ok": false, "error": {"code": 5}}),
                "without",
            ),
        ] {
            let text = check_reply(&reply).unwrap_err().to_string();
            assert!(text.contains(why), "{reply}: {text}");
        }
        let long = json!({"x": "y".repeat(1000)});
        let text = check_reply(&long).unwrap_err().to_string();
        assert!(text.len() < 500 && text.ends_with("..."), "{text}");
    }

    #[test]
    fn streamed_event_lines_are_checked_for_version_and_shape() {
        let event = json!({"v": 1, "event": "member_failed", "volume": "r5", "detail": ""});
        assert_eq!(check_streamed(&event), Ok(()));
        assert_eq!(check_streamed(&json!({"v": 1, "lagged": 3})), Ok(()));
        let newer = json!({"v": 2, "event": "member_failed"});
        let text = check_streamed(&newer).unwrap_err().to_string();
        assert!(text.contains("version 2, this nbraid version 1"), "{text}");
        for (line, why) in [
            (json!("x"), "not a JSON object"),
            (json!({"event": "x"}), "no version field"),
            (json!({"v": 1}), "neither an event"),
            (json!({"v": 1, "event": 7}), "neither an event"),
            (json!({"v": 1, "lagged": "many"}), "neither an event"),
        ] {
            let text = check_streamed(&line).unwrap_err().to_string();
            assert!(text.contains(why), "{line}: {text}");
        }
    }
}
