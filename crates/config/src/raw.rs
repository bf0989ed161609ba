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
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDaemon {
    pub listen: Option<Spanned<Vec<Spanned<RawListen>>>>,
    pub max_connections: Option<Spanned<i64>>,
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
    /// The control socket's path.
    pub control: Option<Spanned<String>>,
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
    pub tree: Option<Spanned<super::tree::RawTree>>,
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
