//! The one place a request is dispatched: each request names its volume (or all), and the
//! module of its family carries it out — `members` (fail, add, replace, remove), `passes`
//! (scrub, rebuild, cancel, pause, resume), `report` (status).

use super::controls::Controls;
use super::{members, passes, report, reshape_start};
use nbraid_control::{ok_reply, Refusal, Request};
use serde_json::Value;

impl Controls {
    /// Carries out one request; the reply, or why not.
    pub async fn handle(&self, req: Request) -> Result<Value, Refusal> {
        // Checks and changes of one volume are one step: held until the handler returned
        // (no handler waits for a pass). Reading (status) and holding or cancelling passes
        // (pause, resume, cancel) change no records and go on meanwhile.
        // A file the request names is read first: waiting on it must not hold the volume.
        let config_text = match &req {
            Request::Reshape { config, .. } => Some(reshape_start::read_config(config).await?),
            _ => None,
        };
        let _operations = match mutated_volume(&req) {
            Some(name) => {
                let v = self.find(name)?;
                if let Some(why) = writes_read_only(&req, v.array().is_read_only()) {
                    return Err(Refusal::new("read-only", why));
                }
                Some(v.operations().await)
            }
            None => None,
        };
        let fields = match req {
            // Streamed by the server (`server.rs`), which holds the events.
            Request::Events { .. } => {
                return Err(Refusal::new(
                    "unsupported",
                    "events are served by the control server",
                ))
            }
            Request::Status { volume } => report::status(self, &self.select(&volume)?),
            Request::Fail {
                volume,
                member,
                force,
            } => members::fail(self.find(&volume)?, &member, force).await?,
            Request::Add {
                volume,
                path,
                force,
            } => members::add(self, self.find(&volume)?, (&path, None), force).await?,
            Request::Replace {
                volume,
                member,
                path,
                force,
            } => members::replace(self, self.find(&volume)?, &member, &path, force).await?,
            Request::Remove { volume, member } => {
                members::remove(self.find(&volume)?, &member).await?
            }
            Request::Scrub {
                volume,
                repair,
                rate,
            } => passes::scrub(self.find(&volume)?, repair, rate)?,
            Request::Rebuild { volume, rate } => passes::rebuild(self.find(&volume)?, rate).await?,
            Request::Cancel { volume } => passes::cancel(self.find(&volume)?)?,
            Request::Pause { volume } => passes::pause_resume(&self.select(&volume)?, true),
            Request::Resume { volume } => passes::pause_resume(&self.select(&volume)?, false),
            Request::Reshape {
                volume,
                config,
                force,
            } => {
                let text = config_text.unwrap_or_default(); // always read above
                reshape_start::start(self, self.find(&volume)?, (&config, text), force).await?
            }
        };
        Ok(ok_reply(fields))
    }

    /// `add` of a spare the config declares (a reload adding it to `spares`): as the
    /// request does, but known by its config id, as a start names its config's spares —
    /// not by its file's name.
    pub async fn add_config_spare(
        &self,
        volume: &str,
        path: &str,
        id: &str,
    ) -> Result<Value, Refusal> {
        let req = Request::Add {
            volume: volume.to_string(),
            path: path.to_string(),
            force: false,
        };
        let v = self.find(volume)?;
        if let Some(why) = writes_read_only(&req, v.array().is_read_only()) {
            return Err(Refusal::new("read-only", why));
        }
        let _operations = v.operations().await;
        let fields = members::add(self, v, (path, Some(id)), false).await?;
        Ok(ok_reply(fields))
    }
}

/// Why `req` is refused on a volume started with `read_only = true` (`None`: it writes
/// nothing to the members, so it may run — a scrub that only checks).
fn writes_read_only(req: &Request, read_only: bool) -> Option<String> {
    if !read_only {
        return None;
    }
    let (what, volume) = match req {
        Request::Fail { volume, .. } => ("fail", volume),
        Request::Add { volume, .. } => ("add", volume),
        Request::Replace { volume, .. } => ("replace", volume),
        Request::Remove { volume, .. } => ("remove", volume),
        Request::Scrub {
            volume,
            repair: true,
            ..
        } => ("scrub --repair", volume),
        Request::Rebuild { volume, .. } => ("rebuild", volume),
        Request::Reshape { volume, .. } => ("apply (a reshape)", volume),
        _ => return None,
    };
    Some(format!(
        "volume `{volume}` was started with read_only = true: nothing is written to its \
         members, so `{what}` is refused (a scrub without --repair may run); restart it \
         without read_only to change it"
    ))
}

/// The volume whose members or records `req` changes (`None`: it changes none).
fn mutated_volume(req: &Request) -> Option<&str> {
    match req {
        Request::Fail { volume, .. }
        | Request::Add { volume, .. }
        | Request::Replace { volume, .. }
        | Request::Remove { volume, .. }
        | Request::Scrub { volume, .. }
        | Request::Rebuild { volume, .. }
        | Request::Reshape { volume, .. } => Some(volume),
        Request::Events { .. }
        | Request::Status { .. }
        | Request::Cancel { .. }
        | Request::Pause { .. }
        | Request::Resume { .. } => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::{ControlVolume, StartReport};
    use crate::served::ServedArray;
    use futures::FutureExt;
    use nbraid_core::metadata::{Array, ArrayOptions, MemberMeta};
    use nbraid_core::{Member, MemoryMember};
    use nbraid_layout::Node;
    use std::sync::Arc;

    const MIB: u64 = 1 << 20;

    /// Volume `r1`: a RAID 1 of two memory members, `d0` and `d1`.
    async fn mirror() -> Controls {
        let mut metas = Vec::new();
        for i in 0..2 {
            let m = Arc::new(MemoryMember::new(format!("m{i}"), 9 * MIB)) as Arc<dyn Member>;
            metas.push(MemberMeta::load(m).await);
        }
        let leaves = (0..2).map(|i| Node::member(i, MIB, 8 * MIB)).collect();
        let tree = Node::mirror(leaves).unwrap();
        let opts = ArrayOptions::default();
        let (array, _) = Array::create("r1", tree, metas, opts.clone(), true, &|_, _| {})
            .await
            .unwrap();
        let served = Arc::new(ServedArray::new(Arc::new(array), opts));
        let ids = vec!["d0".to_string(), "d1".to_string()];
        let v = ControlVolume::new(
            "r1".into(),
            "raid1".into(),
            served,
            ids,
            vec!["active"; 2],
            StartReport::default(),
        );
        Controls {
            volumes: vec![v],
            config: None,
        }
    }

    /// On a read-only volume every request that writes is refused naming `read_only`; a
    /// check-only scrub, status and the pass controls are not.
    #[test]
    fn a_read_only_volume_refuses_what_writes_and_names_read_only() {
        let v = || "r1".to_string();
        let writing = [
            fail("d0"),
            Request::Scrub {
                volume: v(),
                repair: true,
                rate: Default::default(),
            },
            Request::Rebuild {
                volume: v(),
                rate: None,
            },
            Request::Remove {
                volume: v(),
                member: "d0".into(),
            },
        ];
        for req in &writing {
            let why = writes_read_only(req, true).expect("refused");
            assert!(why.contains("read_only = true"), "{why}");
            assert_eq!(writes_read_only(req, false), None);
        }
        let check = Request::Scrub {
            volume: v(),
            repair: false,
            rate: Default::default(),
        };
        assert_eq!(writes_read_only(&check, true), None);
        assert_eq!(
            writes_read_only(&Request::Status { volume: None }, true),
            None
        );
    }

    fn fail(member: &str) -> Request {
        Request::Fail {
            volume: "r1".into(),
            member: member.into(),
            force: false,
        }
    }

    /// Two `fail`s of a RAID 1's two copies at once: each waits while another change holds
    /// the volume, then they take turns, so the second sees the first's failure and is
    /// refused — one copy stays. `status` is answered meanwhile.
    #[tokio::test]
    async fn concurrent_fails_take_turns_and_the_last_copy_stays() {
        let controls = mirror().await;
        let v = &controls.volumes[0];
        let held = v.operations().await;
        let mut first = Box::pin(controls.handle(fail("d0")));
        let mut second = Box::pin(controls.handle(fail("d1")));
        assert!((&mut first).now_or_never().is_none(), "fail d0 waits");
        assert!((&mut second).now_or_never().is_none(), "fail d1 waits");
        assert!(!v.array().volume().is_degraded());
        let status = controls.handle(Request::Status { volume: None });
        assert!(status.now_or_never().is_some_and(|r| r.is_ok()));

        drop(held);
        let (first, second) = futures::join!(first, second);
        assert!(first.is_ok(), "{first:?}");
        let refused = second.expect_err("the last copy is not failed");
        assert_eq!(refused.code, "would-lose-data", "{}", refused.message);
        let array = v.array();
        assert!(array.volume().is_available() && array.volume().member_is_current(1));
    }
}
