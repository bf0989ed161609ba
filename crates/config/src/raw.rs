//! The config as TOML says it: every field spanned so later checks can point at it.
//! Nothing here is validated beyond types; `resolve` does the rest.

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use serde_spanned::Spanned;
use std::fmt;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawConfig {
    #[serde(default)]
    pub daemon: Option<Spanned<RawDaemon>>,
    #[serde(default)]
    pub member: Vec<Spanned<RawMember>>,
    #[serde(default)]
    pub volume: Vec<Spanned<RawVolume>>,
    /// `[bench.hdd]`, `[bench.ssd]`: only `nbraid bench --sim` reads them.
    #[serde(default)]
    pub bench: Option<RawBench>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDaemon {
    pub listen: Option<Spanned<Vec<Spanned<RawListen>>>>,
    pub max_connections: Option<Spanned<i64>>,
    pub max_handshakes: Option<Spanned<i64>>,
    /// A size: bytes a second.
    pub payload_min_bytes_per_s: Option<Spanned<RawSize>>,
    pub in_flight_memory: Option<Spanned<RawSize>>,
    pub in_flight_memory_per_connection: Option<Spanned<RawSize>>,
    /// Durations are written like sizes: a string with a unit (an integer is refused).
    pub handshake_timeout: Option<Spanned<RawSize>>,
    pub idle_timeout: Option<Spanned<RawSize>>,
    pub stall_timeout: Option<Spanned<RawSize>>,
    pub tls: Option<Spanned<String>>,
    pub tls_certificates: Option<Spanned<String>>,
    pub tls_verify_clients: Option<bool>,
    pub insecure_listen: Option<bool>,
    pub insecure_unverified_clients: Option<bool>,
    /// The control socket's path.
    pub control: Option<Spanned<String>>,
    /// A program run on each event (`service.rs`).
    pub on_event: Option<Spanned<String>>,
    /// The Prometheus listener's address (`service.rs`).
    pub metrics_listen: Option<Spanned<String>>,
}

/// The simulated disk models a `[bench]` table may hold (their keys are `bench::MODELS`').
pub const MODEL_NAMES: [&str; 2] = ["hdd", "ssd"];

/// The simulated disk models' tables: `[bench]` of a config, or the top level of a
/// `--sim-params` file: each key with its model's table, `None` for a key that names no
/// model (reported by `bench`, which lists the valid ones). Nothing here is `Spanned` as a
/// whole: `[bench.hdd]` leaves `bench` an implicit table, which toml gives no span.
#[derive(Debug)]
pub(crate) struct RawBench(pub Vec<(Spanned<String>, Option<RawModel>)>);

impl<'de> Deserialize<'de> for RawBench {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<RawBench, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawBench;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("tables of the simulated models, hdd and ssd")
            }
            fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<RawBench, A::Error> {
                let mut entries = Vec::new();
                while let Some(key) = map.next_key::<Spanned<String>>()? {
                    let model = if MODEL_NAMES.contains(&key.get_ref().as_str()) {
                        Some(map.next_value::<RawModel>()?)
                    } else {
                        map.next_value::<de::IgnoredAny>()?;
                        None
                    };
                    entries.push((key, model));
                }
                Ok(RawBench(entries))
            }
        }
        d.deserialize_map(V)
    }
}

/// A model's table as written: its keys (with their places) and values in file order,
/// checked in `bench`, so an unknown key can name the valid ones. The values are not
/// `Spanned` for the same reason (`rpm.x = 1` makes an implicit table); `bench` finds them
/// after their keys.
#[derive(Debug)]
pub(crate) struct RawModel(pub Vec<(Spanned<String>, toml::Value)>);

impl<'de> Deserialize<'de> for RawModel {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<RawModel, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawModel;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a table of parameters such as { rpm = 7200 }")
            }
            fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<RawModel, A::Error> {
                let mut entries = Vec::new();
                while let Some(key) = map.next_key::<Spanned<String>>()? {
                    entries.push((key, map.next_value::<toml::Value>()?));
                }
                Ok(RawModel(entries))
            }
        }
        d.deserialize_map(V)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMember {
    pub id: Spanned<String>,
    pub path: Spanned<String>,
    pub size: Option<Spanned<RawSize>>,
    /// Remote members only (see `remote_member.rs`).
    pub timeout: Option<Spanned<RawSize>>,
    pub connections: Option<Spanned<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawVolume {
    pub name: Spanned<String>,
    /// A named level; a volume gives this or `tree`.
    pub level: Option<Spanned<String>>,
    /// A declared tree (see `tree`); a volume gives this or `level`.
    pub tree: Option<Spanned<RawTree>>,
    /// Required with `level`; with `tree` optional (the tree's leaves, in tree order).
    pub members: Option<Spanned<Vec<Spanned<String>>>>,
    pub spans: Option<Spanned<i64>>,
    pub strip_size: Option<Spanned<RawSize>>,
    pub size: Option<Spanned<RawSize>>,
    pub parity_layout: Option<Spanned<String>>,
    pub read_policy: Option<Spanned<String>>,
    pub cache: Option<Spanned<String>>,
    pub cache_size: Option<Spanned<RawSize>>,
    pub read_only: Option<bool>,
    pub block_size: Option<Spanned<i64>>,
    pub create: Option<Spanned<String>>,
    pub bitmap_chunk: Option<Spanned<RawSize>>,
    pub clean_delay: Option<Spanned<RawSize>>,
    pub spares: Option<Spanned<Vec<Spanned<String>>>>,
    pub rebuild_rate: Option<Spanned<RawSize>>,
    pub write_hole: Option<Spanned<String>>,
    pub write_hole_log_size: Option<Spanned<RawSize>>,
    pub checksums: Option<Spanned<String>>,
    pub checksum_error_limit: Option<Spanned<i64>>,
    pub max_read_errors: Option<Spanned<i64>>,
}

/// A listen entry: `"tcp:IP:PORT"`, or a table giving that listener its own TLS mode,
/// `{ address = "tcp:0.0.0.0:10809", tls = "required" }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RawListen {
    pub address: String,
    pub tls: Option<String>,
}

impl<'de> Deserialize<'de> for RawListen {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<RawListen, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Table {
            address: String,
            tls: Option<String>,
        }
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawListen;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an address such as \"tcp:127.0.0.1:10809\" or a table { address = \"...\", tls = \"required\" }")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RawListen, E> {
                Ok(RawListen {
                    address: v.to_string(),
                    tls: None,
                })
            }
            fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<RawListen, A::Error> {
                let t = Table::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(RawListen {
                    address: t.address,
                    tls: t.tls,
                })
            }
        }
        d.deserialize_any(V)
    }
}

/// A size as written: a TOML integer (bytes) or a string (`"4GiB"`, `"all"`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RawSize {
    Int(i64),
    Text(String),
}

impl RawSize {
    /// The value as the user wrote it, for messages: `"48KiB"` (quoted) or `49152`.
    pub fn shown(&self) -> String {
        match self {
            RawSize::Int(i) => i.to_string(),
            RawSize::Text(s) => format!("\"{s}\""),
        }
    }
}

impl<'de> Deserialize<'de> for RawSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<RawSize, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = RawSize;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a size such as \"4GiB\" or a number of bytes")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<RawSize, E> {
                Ok(RawSize::Int(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<RawSize, E> {
                i64::try_from(v)
                    .map(RawSize::Int)
                    .map_err(|_| E::custom("size too large"))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RawSize, E> {
                Ok(RawSize::Text(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

/// Just enough structure to say which `[[member]]` or `[[volume]]` a schema error is in.
#[derive(Debug, Deserialize)]
pub(crate) struct Skeleton {
    #[serde(default)]
    pub daemon: Option<Spanned<toml::Value>>,
    #[serde(default)]
    pub member: Option<Vec<Spanned<toml::Value>>>,
    #[serde(default)]
    pub volume: Option<Vec<Spanned<toml::Value>>>,
}

/// A node's entries: its keys and their values, in the order written.
pub(crate) type RawNode = Vec<(Spanned<String>, Spanned<RawTreeValue>)>;

/// A tree as TOML says it: a member id, or a node table (key, value) in file order.
#[derive(Debug)]
pub(crate) enum RawTree {
    Leaf(String),
    Node(RawNode),
}

/// A node table's value: a child list (for the kind key) or a scalar (`strip`, `parity_layout`).
#[derive(Debug)]
pub(crate) enum RawTreeValue {
    Children(Vec<Spanned<RawTree>>),
    Scalar(RawSize),
}

impl<'de> Deserialize<'de> for RawTree {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<RawTree, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawTree;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a member id such as \"d0\" or a node such as { mirror = [\"d0\", \"d1\"] }",
                )
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RawTree, E> {
                Ok(RawTree::Leaf(v.to_string()))
            }
            fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<RawTree, A::Error> {
                let mut entries = Vec::new();
                while let Some(key) = map.next_key::<Spanned<String>>()? {
                    entries.push((key, map.next_value::<Spanned<RawTreeValue>>()?));
                }
                Ok(RawTree::Node(entries))
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for RawTreeValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<RawTreeValue, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawTreeValue;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of children [ ... ], a size such as \"64KiB\" or a name")
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some(c) = seq.next_element::<Spanned<RawTree>>()? {
                    out.push(c);
                }
                Ok(RawTreeValue::Children(out))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(RawTreeValue::Scalar(RawSize::Text(v.to_string())))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                Ok(RawTreeValue::Scalar(RawSize::Int(v)))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                i64::try_from(v)
                    .map(|v| RawTreeValue::Scalar(RawSize::Int(v)))
                    .map_err(|_| E::custom("size too large"))
            }
        }
        d.deserialize_any(V)
    }
}
