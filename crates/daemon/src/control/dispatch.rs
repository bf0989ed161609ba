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
            } => members::fail(self.find(&volume)?, &member, force)?,
            Request::Add {
                volume,
                path,
                force,
            } => members::add(self, self.find(&volume)?, &path, force).await?,
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
            } => reshape_start::start(self, self.find(&volume)?, &config, force).await?,
        };
        Ok(ok_reply(fields))
    }
}
