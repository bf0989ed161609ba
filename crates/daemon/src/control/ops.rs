//! What the control requests do to the daemon's volumes.

use super::proto::{ok_reply, Refusal, Request};
use nbraid_core::metadata::Array;
use nbraid_core::{MemberState, ScrubControl, ScrubReport, ScrubState};
use parking_lot::Mutex;
use serde_json::{json, Value};
use std::sync::Arc;

/// One served volume as the control socket sees it.
pub struct ControlVolume {
    pub name: String,
    /// The level's name (`raid6`).
    pub level: String,
    pub array: Arc<Array>,
    /// Config member ids, by the volume's member index (its role in the superblocks).
    pub members: Vec<String>,
    /// By member index: what assembly found in the superblocks ("new", "active", "missing",
    /// "stale", "failed").
    pub at_start: Vec<&'static str>,
    /// What the start did: created the array, found it clean, bytes resynced before serving.
    pub start: StartReport,
    /// The latest scrub (running or finished).
    scrub: Mutex<Option<Arc<ScrubControl>>>,
}

impl ControlVolume {
    pub fn new(
        name: String,
        level: String,
        array: Arc<Array>,
        members: Vec<String>,
        at_start: Vec<&'static str>,
        start: StartReport,
    ) -> Self {
        ControlVolume {
            name,
            level,
            array,
            members,
            at_start,
            start,
            scrub: Mutex::new(None),
        }
    }

    fn scrub(&self) -> Option<Arc<ScrubControl>> {
        self.scrub.lock().clone()
    }
}

/// What starting a volume did.
#[derive(Clone, Copy, Debug, Default)]
pub struct StartReport {
    pub created: bool,
    pub was_clean: bool,
    pub resynced_bytes: u64,
}

/// The daemon's volumes.
pub struct Controls {
    pub volumes: Vec<ControlVolume>,
}

fn scrub_json(r: &ScrubReport) -> Value {
    json!({
        "state": r.state.name(),
        "repair": r.repair,
        "position_bytes": r.position_bytes,
        "total_bytes": r.total_bytes,
        "rate_bytes_per_s": r.rate_bytes_per_s,
        "rate_limit_bytes_per_s": r.rate_limit_bytes_per_s,
        "eta_s": r.eta_s(),
        "checked": r.checked,
        "mismatches": r.mismatches,
        "repaired": r.repaired,
        "unreadable": r.unreadable,
        "skipped": r.skipped,
    })
}

impl Controls {
    fn find(&self, name: &str) -> Result<&ControlVolume, Refusal> {
        self.volumes.iter().find(|v| v.name == name).ok_or_else(|| {
            let names: Vec<&str> = self.volumes.iter().map(|v| v.name.as_str()).collect();
            Refusal::new(
                "not-found",
                format!("no volume \"{name}\" (volumes: {})", names.join(", ")),
            )
        })
    }

    /// The volumes a request names (`None`: all of them).
    fn select(&self, name: &Option<String>) -> Result<Vec<&ControlVolume>, Refusal> {
        match name {
            Some(n) => Ok(vec![self.find(n)?]),
            None => Ok(self.volumes.iter().collect()),
        }
    }

    /// Carries out one request; the reply's fields, or why not.
    pub fn handle(&self, req: Request) -> Result<Value, Refusal> {
        match req {
            Request::Status { volume } => {
                let vols: Vec<Value> = self.select(&volume)?.iter().map(|v| status(v)).collect();
                Ok(ok_reply(json!({ "volumes": vols })))
            }
            Request::Fail { volume, member } => {
                let v = self.find(&volume)?;
                let index = v
                    .members
                    .iter()
                    .position(|m| *m == member)
                    .or_else(|| {
                        member
                            .parse::<usize>()
                            .ok()
                            .filter(|&i| i < v.members.len())
                    })
                    .ok_or_else(|| {
                        Refusal::new(
                            "not-found",
                            format!(
                                "volume \"{volume}\" has no member \"{member}\" (members: {})",
                                v.members.join(", ")
                            ),
                        )
                    })?;
                let vol = v.array.volume();
                vol.fail_member(index, "failed by the operator (nbraid fail)");
                // Into the superblocks now, not at the next write: a restart keeps it failed.
                let array = v.array.clone();
                tokio::spawn(async move {
                    if let Err(e) = array.record_failures().await {
                        tracing::error!("recording a failed member of {}: {e}", array.name());
                    }
                });
                Ok(ok_reply(json!({
                    "volume": volume,
                    "member": v.members[index],
                    "index": index,
                    "degraded": vol.is_degraded(),
                    "available": vol.is_available(),
                })))
            }
            Request::Scrub {
                volume,
                repair,
                rate_bytes_per_s,
            } => {
                let v = self.find(&volume)?;
                let mut slot = v.scrub.lock();
                if let Some(c) = slot.as_ref() {
                    if matches!(c.state(), ScrubState::Running | ScrubState::Paused) {
                        return Err(Refusal::new(
                            "busy",
                            format!(
                                "volume \"{volume}\" is already being scrubbed (cancel it first)"
                            ),
                        ));
                    }
                }
                let ctl = Arc::new(ScrubControl::new(repair, rate_bytes_per_s));
                *slot = Some(ctl.clone());
                drop(slot);
                let array = v.array.clone();
                let name = volume.clone();
                let task_ctl = ctl.clone();
                tokio::spawn(async move {
                    match array.volume().scrub(&task_ctl).await {
                        Ok(r) => tracing::info!(
                            "scrub of {name} {}: {} checked, {} mismatches, {} repaired, {} unreadable, {} skipped",
                            r.state.name(), r.checked, r.mismatches, r.repaired, r.unreadable, r.skipped
                        ),
                        Err(e) => tracing::error!("scrub of {name} failed: {e}"),
                    }
                });
                Ok(ok_reply(
                    json!({ "volume": volume, "scrub": scrub_json(&ctl.report()) }),
                ))
            }
            Request::Pause { volume } => self.pause_resume(&volume, true),
            Request::Resume { volume } => self.pause_resume(&volume, false),
            Request::Cancel { volume } => {
                let v = self.find(&volume)?;
                let c = v.scrub().ok_or_else(|| {
                    Refusal::new("not-found", format!("volume \"{volume}\" has no scrub"))
                })?;
                c.cancel();
                c.resume();
                Ok(ok_reply(
                    json!({ "volume": volume, "scrub": scrub_json(&c.report()) }),
                ))
            }
        }
    }

    fn pause_resume(&self, volume: &Option<String>, pause: bool) -> Result<Value, Refusal> {
        let mut touched = Vec::new();
        for v in self.select(volume)? {
            if let Some(c) = v.scrub() {
                if pause {
                    c.pause();
                } else {
                    c.resume();
                }
                touched.push(v.name.clone());
            }
        }
        Ok(ok_reply(json!({ "volumes": touched })))
    }
}

/// Everything `status` says about one volume.
fn status(v: &ControlVolume) -> Value {
    let vol = v.array.volume();
    let states = vol.member_states();
    let counters = vol.member_counters();
    let read_errors = vol.member_read_errors();
    let members: Vec<Value> = v
        .members
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let c = &counters[i];
            json!({
                "id": id,
                "index": i,
                "path": vol.member(i).name(),
                "state": match (states[i], v.at_start.get(i).copied()) {
                    (MemberState::Healthy, _) => "healthy",
                    (MemberState::Failed, Some("missing")) => "missing",
                    (MemberState::Failed, _) => "failed",
                },
                "at_start": v.at_start.get(i).copied().unwrap_or("?"),
                "read_errors": read_errors[i],
                "reads": c.reads,
                "writes": c.writes,
                "read_bytes": c.read_bytes,
                "write_bytes": c.write_bytes,
            })
        })
        .collect();
    let c = vol.counters();
    let cache = vol.cache_usage();
    let state = if !vol.is_available() {
        "failed"
    } else if vol.is_degraded() {
        "degraded"
    } else {
        "healthy"
    };
    json!({
        "name": v.name,
        "level": v.level,
        "capacity_bytes": vol.capacity(),
        "state": state,
        "degraded": vol.is_degraded(),
        "available": vol.is_available(),
        "members": members,
        "metadata": {
            "array": v.array.id().to_string(),
            "dirty": v.array.is_dirty(),
            "bitmap_chunk_bytes": v.array.bitmap_chunk_bytes(),
            "created_at_start": v.start.created,
            "clean_at_start": v.start.was_clean,
            "resynced_bytes_at_start": v.start.resynced_bytes,
        },
        "io": {
            "reads": c.reads, "read_bytes": c.read_bytes,
            "writes": c.writes, "write_bytes": c.write_bytes,
            "flushes": c.flushes, "trims": c.trims, "write_zeroes": c.write_zeroes,
            "errors": c.errors, "repairs": c.repairs,
        },
        "cache": {
            "dirty_bytes": cache.dirty_bytes,
            "pinned_bytes": cache.pinned_bytes,
            "bound_bytes": cache.bound_bytes,
        },
        "scrub": v.scrub().map(|s| scrub_json(&s.report())),
    })
}
