//! # nbraid-control: the control protocol between `nbraidd` and `nbraid`
//!
//! JSON lines, one request and one reply per line, versioned. Both sides use this crate: the
//! daemon parses requests with [`parse`] and answers with [`ok_reply`] and [`error_reply`];
//! the CLI writes them with [`Request::to_json`] and reads refusals as [`ErrorBody`]. So a field
//! renamed on one side cannot silently drift from the other: the round trip
//! `parse(to_json(r)) == r` is tested for every request.
//!
//! **Boundaries.** Only the wire format lives here: what a request does to a volume is the
//! daemon's (`control::ops`), how a reply is shown is the CLI's.
//!
//!
//! A request is an object `{"v": 1, "op": "...", ...}`; a reply is `{"v": 1, "ok": true, ...}`
//! or `{"v": 1, "ok": false, "error": {"code": "...", "message": "..."}}`. Anything that is not
//! a request of version 1 gets an error reply naming what is wrong; the connection stays open.
//! A client reads a reply only after [`check_reply`] (a followed `events` line after
//! [`check_streamed`]): one of another version, or of no reply's shape, is an error naming
//! what it is.
//!
//! | op | fields | reply |
//! |---|---|---|
//! | `status` | `volume` (optional) | `volumes`: state, members, counters, cache, scrub |
//! | `fail` | `volume`, `member` (config id or index) | `member`: the index failed |
//! | `scrub` | `volume`, `repair` (bool, default false), `rate_bytes_per_s` (0/absent: unlimited), `adaptive` (bool, default false: yield to clients' I/O) | `scrub`: its first report |
//! | `pause`, `resume` | `volume` (optional: all) | `volumes`: the names touched |
//! | `cancel` | `volume` | the scrub's report |
//! | `add` | `volume`, `path` | `rebuilding_roles`, `rebuild` |
//! | `remove` | `volume`, `member` (a failed member's id or index, or a spare's id or path) | `removed`: `member` or `spare` |
//! | `replace` | `volume`, `member`, `path` | `index`, `rebuild` |
//! | `events` | `follow` (bool, default false) | `events`: the latest (at most 256); with `follow`, then one line `{"v":1,"event":...}` per event until the client closes |
//! | `rebuild` | `volume`, `rate_bytes_per_s`, `adaptive` (as for `scrub`; both absent: a running rebuild keeps its rate, one started runs at the volume's `rebuild_rate`) | `rebuild`: progress |
//! | `reshape` | `volume`, `config` (the path of the config declaring the shape it should have), `force` (bool: added members may be written although the disk write rule refuses) | `plan`: the plan started, `reshape`: progress |
//!
//! **Bounds.** A client holds its connection only while it talks: the daemon serves at most
//! 64 at once (one more takes the place of the connection that has waited longest on its
//! client, which gets a `busy` error line and is closed; while every place runs a request or
//! follows, the newcomer gets it), closes a connection that
//! sends no request for 60 s or leaves a line unfinished for 10 s (an error line with code
//! `timeout` says which), and one that takes no reply for 10 s. A followed `events` stream is
//! not idle; only its writes are bounded. A `reshape`'s `config` must be a regular file of at
//! most 4 MiB (`nbraid_config::CONFIG_BYTES_MAX`).
//!
//! Rebuilds that `add` and `replace` start run at the volume's `rebuild_rate`, like the ones
//! the daemon starts by itself; a rebuild already running keeps its rate.

mod reply;
pub use reply::{check_reply, check_streamed, BadReply};

use nbraid_core::PassRate;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

/// The protocol version this daemon speaks.
pub const VERSION: u64 = 1;

/// Longest request line accepted (bytes, newline included).
pub const MAX_LINE_BYTES: usize = 64 << 10;

/// A parsed request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    Status {
        volume: Option<String>,
    },
    /// Fail a member; refused when it would lose data (beyond the tree's tolerance) unless
    /// `force`.
    Fail {
        volume: String,
        member: String,
        force: bool,
    },
    Scrub {
        volume: String,
        repair: bool,
        /// `None`: unlimited for a new scrub; a running one keeps its rate.
        rate: Option<PassRate>,
    },
    Pause {
        volume: Option<String>,
    },
    Resume {
        volume: Option<String>,
    },
    Cancel {
        volume: String,
    },
    /// A hot spare (a member file at `path`); a failed member's role gets it at once.
    /// `force`: write onto it although the write rule refuses (data, another array's records).
    Add {
        volume: String,
        path: String,
        force: bool,
    },
    /// Rebuild onto `path` while `member` keeps serving, then swap (md's want_replacement).
    Replace {
        volume: String,
        member: String,
        path: String,
        force: bool,
    },
    /// Take a failed member out of its role, or a spare out of the spares (mdadm --remove).
    Remove {
        volume: String,
        member: String,
    },
    /// Start (or re-rate) the rebuild of the volume's rebuilding and replaced members;
    /// `rate: None` leaves a running rebuild's rate alone (following it from another
    /// terminal), or starts one at the volume's `rebuild_rate`.
    Rebuild {
        volume: String,
        rate: Option<PassRate>,
    },
    /// The latest events (the daemon's `events`); `follow`: then every later one, streamed.
    Events {
        follow: bool,
    },
    /// Start reshaping `volume` online into the shape the config at `config` declares
    /// (`nbraid apply --yes`); `force`: added members may be written although the disk write
    /// rule refuses them.
    Reshape {
        volume: String,
        config: String,
        force: bool,
    },
}

/// Why a request was refused: a stable code and a message for people.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub code: &'static str,
    pub message: String,
}

impl Refusal {
    pub fn new(code: &'static str, message: impl Into<String>) -> Refusal {
        Refusal {
            code,
            message: message.into(),
        }
    }
}

/// A refusal as the wire carries it: `"error": {"code": ..., "message": ...}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// Stable, for programs: "bad-request", "no-volume", ...
    pub code: String,
    /// For people.
    pub message: String,
}

impl ErrorBody {
    /// The refusal a reply carries (`None`: the reply is a success).
    pub fn of_reply(reply: &Value) -> Option<ErrorBody> {
        if reply["ok"] == json!(true) {
            return None;
        }
        Some(
            serde_json::from_value(reply["error"].clone()).unwrap_or_else(|_| ErrorBody {
                code: "unknown".into(),
                message: "unknown error".into(),
            }),
        )
    }
}

/// The error reply for `r`.
pub fn error_reply(r: &Refusal) -> Value {
    let body = ErrorBody {
        code: r.code.into(),
        message: r.message.clone(),
    };
    json!({"v": VERSION, "ok": false, "error": body})
}

impl Request {
    /// The request as its wire object, `"v"` included; [`parse`] reads it back as `self`.
    pub fn to_json(&self) -> Value {
        let rate =
            |r: &PassRate| json!({"rate_bytes_per_s": r.limit_bytes_per_s, "adaptive": r.adaptive});
        let mut fields = match self {
            Request::Status { volume } => json!({"op": "status", "volume": volume}),
            Request::Fail {
                volume,
                member,
                force,
            } => json!({"op": "fail", "volume": volume, "member": member, "force": force}),
            Request::Scrub {
                volume,
                repair,
                rate: r,
            } => {
                let req = json!({"op": "scrub", "volume": volume, "repair": repair});
                match r {
                    Some(r) => with(req, rate(r)),
                    None => req,
                }
            }
            Request::Pause { volume } => json!({"op": "pause", "volume": volume}),
            Request::Resume { volume } => json!({"op": "resume", "volume": volume}),
            Request::Cancel { volume } => json!({"op": "cancel", "volume": volume}),
            Request::Add {
                volume,
                path,
                force,
            } => json!({"op": "add", "volume": volume, "path": path, "force": force}),
            Request::Replace {
                volume,
                member,
                path,
                force,
            } => json!({"op": "replace", "volume": volume, "member": member, "path": path,
                        "force": force}),
            Request::Remove { volume, member } => {
                json!({"op": "remove", "volume": volume, "member": member})
            }
            Request::Rebuild { volume, rate: r } => {
                let req = json!({"op": "rebuild", "volume": volume});
                match r {
                    Some(r) => with(req, rate(r)),
                    None => req,
                }
            }
            Request::Events { follow } => json!({"op": "events", "follow": follow}),
            Request::Reshape {
                volume,
                config,
                force,
            } => json!({"op": "reshape", "volume": volume, "config": config, "force": force}),
        };
        fields["v"] = json!(VERSION);
        fields
    }
}

/// Object `a` with `b`'s fields added.
fn with(mut a: Value, b: Value) -> Value {
    if let (Value::Object(a), Value::Object(b)) = (&mut a, b) {
        a.extend(b);
    }
    a
}

/// The success reply carrying `fields`.
pub fn ok_reply(fields: Value) -> Value {
    let mut m = Map::new();
    m.insert("v".into(), json!(VERSION));
    m.insert("ok".into(), json!(true));
    if let Value::Object(f) = fields {
        m.extend(f);
    }
    Value::Object(m)
}

/// Every field a request may carry.
const FIELDS: [&str; 11] = [
    "v",
    "op",
    "volume",
    "member",
    "repair",
    "rate_bytes_per_s",
    "adaptive",
    "path",
    "follow",
    "force",
    "config",
];

/// The ops, as refusals list them.
const OPS: &str =
    "status, fail, scrub, pause, resume, cancel, add, remove, replace, rebuild, events, reshape";

/// Parses one request line: a JSON object, of version [`VERSION`], with an `op` and no field
/// outside [`FIELDS`]; then the fields its op takes.
pub fn parse(line: &[u8]) -> Result<Request, Refusal> {
    let o = request_object(line)?;
    check_version(&o)?;
    let op = match o.get("op") {
        Some(Value::String(s)) => s.as_str(),
        _ => {
            return Err(Refusal::new(
                "bad-request",
                format!("the request has no \"op\" string ({OPS})"),
            ))
        }
    };
    if let Some(k) = o.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(Refusal::new(
            "bad-request",
            format!("unknown field `{k}` (fields: {})", FIELDS.join(", ")),
        ));
    }
    Fields { o: &o, op }.request()
}

/// The line as a JSON object.
fn request_object(line: &[u8]) -> Result<Map<String, Value>, Refusal> {
    let v: Value = serde_json::from_slice(line).map_err(|e| {
        Refusal::new(
            "malformed",
            format!("not a JSON object ({e}); send one object per line, like {{\"v\":1,\"op\":\"status\"}}"),
        )
    })?;
    match v {
        Value::Object(o) => Ok(o),
        v => Err(Refusal::new(
            "malformed",
            format!("a request is a JSON object, not {v}"),
        )),
    }
}

/// A request must say it is of version [`VERSION`].
fn check_version(o: &Map<String, Value>) -> Result<(), Refusal> {
    match o.get("v") {
        Some(Value::Number(n)) if n.as_u64() == Some(VERSION) => Ok(()),
        Some(other) => Err(Refusal::new(
            "unsupported-version",
            format!(
                "protocol version {other} is not supported; this daemon speaks version {VERSION}"
            ),
        )),
        None => Err(Refusal::new(
            "bad-request",
            format!("the request has no version; add \"v\": {VERSION}"),
        )),
    }
}

/// The fields of one request of op `op`, read as the op needs them; refusals name the op.
struct Fields<'a> {
    o: &'a Map<String, Value>,
    op: &'a str,
}

impl Fields<'_> {
    /// The request its op and fields describe.
    fn request(&self) -> Result<Request, Refusal> {
        Ok(match self.op {
            "status" => Request::Status {
                volume: self.optional_string("volume")?,
            },
            "fail" => Request::Fail {
                volume: self.string("volume")?,
                member: self.string("member")?,
                force: self.flag("force")?,
            },
            "scrub" => Request::Scrub {
                volume: self.string("volume")?,
                repair: self.flag("repair")?,
                rate: self.optional_rate()?,
            },
            "pause" => Request::Pause {
                volume: self.optional_string("volume")?,
            },
            "resume" => Request::Resume {
                volume: self.optional_string("volume")?,
            },
            "cancel" => Request::Cancel {
                volume: self.string("volume")?,
            },
            "add" => Request::Add {
                volume: self.string("volume")?,
                path: self.string("path")?,
                force: self.flag("force")?,
            },
            "replace" => Request::Replace {
                volume: self.string("volume")?,
                member: self.string("member")?,
                path: self.string("path")?,
                force: self.flag("force")?,
            },
            "remove" => Request::Remove {
                volume: self.string("volume")?,
                member: self.string("member")?,
            },
            "rebuild" => Request::Rebuild {
                volume: self.string("volume")?,
                rate: self.optional_rate()?,
            },
            "events" => Request::Events {
                follow: self.flag("follow")?,
            },
            "reshape" => Request::Reshape {
                volume: self.string("volume")?,
                config: self.string("config")?,
                force: self.flag("force")?,
            },
            other => {
                return Err(Refusal::new(
                    "unknown-op",
                    format!("unknown op \"{other}\" ({OPS})"),
                ))
            }
        })
    }

    /// A string field the op needs (`member` may be sent as a number: an index).
    fn string(&self, key: &str) -> Result<String, Refusal> {
        let op = self.op;
        match self.o.get(key) {
            Some(Value::String(s)) => Ok(s.clone()),
            Some(Value::Number(n)) if key == "member" => Ok(n.to_string()),
            Some(other) => Err(Refusal::new(
                "bad-request",
                format!("`{op}`: field `{key}` must be a string, not {other}"),
            )),
            None => Err(Refusal::new(
                "bad-request",
                format!("`{op}` needs the field `{key}`"),
            )),
        }
    }

    /// A string field that may be absent or null.
    fn optional_string(&self, key: &str) -> Result<Option<String>, Refusal> {
        match self.o.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(_) => self.string(key).map(Some),
        }
    }

    /// A bool field, absent = false.
    fn flag(&self, key: &str) -> Result<bool, Refusal> {
        let op = self.op;
        match self.o.get(key) {
            None | Some(Value::Null) => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(other) => Err(Refusal::new(
                "bad-request",
                format!("`{op}`: field `{key}` must be true or false, not {other}"),
            )),
        }
    }

    /// `rate_bytes_per_s` (absent = 0: unlimited) and `adaptive` (absent = false).
    fn rate(&self) -> Result<PassRate, Refusal> {
        let op = self.op;
        let limit_bytes_per_s = match self.o.get("rate_bytes_per_s") {
            None | Some(Value::Null) => 0,
            Some(Value::Number(n)) if n.as_u64().is_some() => n.as_u64().unwrap_or(0),
            Some(other) => return Err(Refusal::new(
                "bad-request",
                format!("`{op}`: field `rate_bytes_per_s` must be a whole number of bytes per second, not {other}"),
            )),
        };
        Ok(PassRate {
            limit_bytes_per_s,
            adaptive: self.flag("adaptive")?,
        })
    }

    /// A rate only when one of its fields is given: `rebuild` without them leaves a running
    /// rebuild's rate alone.
    fn optional_rate(&self) -> Result<Option<PassRate>, Refusal> {
        let given = ["rate_bytes_per_s", "adaptive"]
            .iter()
            .any(|k| !matches!(self.o.get(*k), None | Some(Value::Null)));
        given.then(|| self.rate()).transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One of every request, with and without its optional fields.
    fn every_request() -> Vec<Request> {
        let (v, m) = (|| "db".to_string(), || "d1".to_string());
        vec![
            Request::Status { volume: None },
            Request::Status { volume: Some(v()) },
            Request::Fail {
                volume: v(),
                member: m(),
                force: true,
            },
            Request::Scrub {
                volume: v(),
                repair: true,
                rate: Some(PassRate {
                    limit_bytes_per_s: 1 << 20,
                    adaptive: true,
                }),
            },
            Request::Scrub {
                volume: v(),
                repair: false,
                rate: None,
            },
            Request::Pause { volume: None },
            Request::Resume { volume: Some(v()) },
            Request::Cancel { volume: v() },
            Request::Add {
                volume: v(),
                path: "/d/x".into(),
                force: false,
            },
            Request::Replace {
                volume: v(),
                member: m(),
                path: "/d/y".into(),
                force: true,
            },
            Request::Remove {
                volume: v(),
                member: m(),
            },
            Request::Rebuild {
                volume: v(),
                rate: None,
            },
            Request::Rebuild {
                volume: v(),
                rate: Some(PassRate::limit(5)),
            },
            Request::Events { follow: true },
            Request::Reshape {
                volume: v(),
                config: "/etc/nbraid/arrays.toml".into(),
                force: false,
            },
        ]
    }

    #[test]
    fn every_request_written_reads_back_as_itself() {
        for r in every_request() {
            let line = r.to_json().to_string();
            assert_eq!(parse(line.as_bytes()), Ok(r), "{line}");
        }
    }

    #[test]
    fn the_wire_bytes_are_the_ones_nbraid_always_sent() {
        let line = |r: Request| r.to_json().to_string();
        assert_eq!(
            line(Request::Status { volume: None }),
            r#"{"op":"status","v":1,"volume":null}"#
        );
        assert_eq!(
            line(Request::Scrub {
                volume: "db".into(),
                repair: false,
                rate: Some(PassRate::default())
            }),
            r#"{"adaptive":false,"op":"scrub","rate_bytes_per_s":0,"repair":false,"v":1,"volume":"db"}"#
        );
        assert_eq!(
            line(Request::Rebuild {
                volume: "db".into(),
                rate: None
            }),
            r#"{"op":"rebuild","v":1,"volume":"db"}"#
        );
    }

    #[test]
    fn a_refusal_reads_back_from_its_reply() {
        let reply = error_reply(&Refusal::new("no-volume", "no volume x"));
        assert_eq!(
            ErrorBody::of_reply(&reply),
            Some(ErrorBody {
                code: "no-volume".into(),
                message: "no volume x".into()
            })
        );
        assert_eq!(ErrorBody::of_reply(&ok_reply(json!({}))), None);
    }

    #[test]
    fn requests_parse_and_bad_ones_are_named() {
        assert_eq!(
            parse(br#"{"v":1,"op":"status"}"#),
            Ok(Request::Status { volume: None })
        );
        assert_eq!(
            parse(br#"{"v":1,"op":"scrub","volume":"db","repair":true,"rate_bytes_per_s":1000}"#),
            Ok(Request::Scrub {
                volume: "db".into(),
                repair: true,
                rate: Some(PassRate::limit(1000))
            })
        );
        assert_eq!(
            parse(br#"{"v":1,"op":"rebuild","volume":"db","adaptive":true}"#),
            Ok(Request::Rebuild {
                volume: "db".into(),
                rate: Some(PassRate {
                    limit_bytes_per_s: 0,
                    adaptive: true
                })
            })
        );
        // No rate: a running rebuild keeps its own (following it changes nothing).
        assert_eq!(
            parse(br#"{"v":1,"op":"rebuild","volume":"db"}"#),
            Ok(Request::Rebuild {
                volume: "db".into(),
                rate: None
            })
        );
        assert_eq!(
            parse(br#"{"v":1,"op":"rebuild","volume":"db","rate_bytes_per_s":0}"#),
            Ok(Request::Rebuild {
                volume: "db".into(),
                rate: Some(PassRate::default())
            })
        );
        assert_eq!(
            parse(br#"{"v":1,"op":"fail","volume":"db","member":2}"#),
            Ok(Request::Fail {
                volume: "db".into(),
                member: "2".into(),
                force: false
            })
        );
        assert_eq!(
            parse(br#"{"v":1,"op":"add","volume":"db","path":"/d","force":true}"#),
            Ok(Request::Add {
                volume: "db".into(),
                path: "/d".into(),
                force: true
            })
        );
        let code = |l: &[u8]| parse(l).unwrap_err().code;
        assert_eq!(
            parse(br#"{"v":1,"op":"events","follow":true}"#),
            Ok(Request::Events { follow: true })
        );
        assert_eq!(code(b"hello"), "malformed");
        assert_eq!(code(b"[1,2]"), "malformed");
        assert_eq!(code(b"\xff\xfe"), "malformed");
        assert_eq!(code(br#"{"op":"status"}"#), "bad-request");
        assert_eq!(code(br#"{"v":2,"op":"status"}"#), "unsupported-version");
        assert_eq!(code(br#"{"v":1,"op":"explode"}"#), "unknown-op");
        assert_eq!(code(br#"{"v":1,"op":"fail","volume":"db"}"#), "bad-request");
        assert_eq!(
            code(br#"{"v":1,"op":"scrub","volume":"db","repair":"yes"}"#),
            "bad-request"
        );
        assert_eq!(
            code(br#"{"v":1,"op":"rebuild","volume":"db","adaptive":1}"#),
            "bad-request"
        );
        assert_eq!(
            code(br#"{"v":1,"op":"status","colour":"red"}"#),
            "bad-request"
        );
    }
}
