//! Running as a service: what a supervisor and an unwatched admin need from `nbraidd`.
//!
//! - [`notify`]: systemd's readiness protocol (`READY=1` once every export listens,
//!   `STATUS=`, `STOPPING=1`) and its watchdog, over `$NOTIFY_SOCKET`; nothing without it.
//! - [`hook`]: the `on_event` program, run for each [`crate::events::Event`] (one per state
//!   change an operator must hear of, published on the [`crate::events::EventBus`], which
//!   lives below both this module and `control`).
//! - [`observe`]: where events come from. The daemon does not hook the engine: it compares
//!   what the control socket's `status` reads (member states, the passes' controls) a few
//!   times a second, so the I/O path is untouched and any change, whoever made it, is seen.
//! - [`metrics`]: Prometheus text at `/metrics` on `[daemon] metrics_listen`, read from the
//!   counters the engine keeps anyway and the request latency [`latency`] times.
//! - [`reload`]: SIGHUP reads the config again; what can change live does, the rest is said.
//!
//! None of them can stop I/O: each runs as its own task, and a hook that hangs is killed.

pub mod hook;
pub mod latency;
pub mod metrics;
pub mod notify;
pub mod observe;
pub mod reload;
mod reload_tls;
