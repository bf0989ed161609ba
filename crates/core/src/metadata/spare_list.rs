//! Spares added at run time, recorded (format version 2, `docs/FORMAT.md`): the config names
//! its spares at every start, but a spare an operator adds to a running daemon (`nbraid add`)
//! would be forgotten by a restart. The records list such spares by the path they were opened
//! by (the member's name), committed like any state change; the daemon opens them again at
//! start and keeps them as spares if they are still blank (or carry only an old record of
//! the volume). A recorded spare that takes a role leaves the list (it is a member now), and
//! `nbraid remove` takes one out.

use super::array::{Array, ArrayError};
use super::member_meta::MemberMeta;
use super::superblock::{MAX_SPARES, MAX_SPARE_PATH_BYTES};
use std::sync::Arc;

impl Array {
    /// Keeps `meta` as a hot spare ([`Array::add_spare`]) and records it, so a restart still
    /// knows it.
    pub async fn add_recorded_spare(&self, meta: Arc<MemberMeta>) -> Result<(), ArrayError> {
        let path = meta.member().name().to_string();
        if path.is_empty() || path.len() > MAX_SPARE_PATH_BYTES || path.contains('\0') {
            return Err(self.refuse(format!(
                "spare `{path}`: its path cannot be recorded (1 to {MAX_SPARE_PATH_BYTES} bytes, no NUL)"
            )));
        }
        let mut rec = self.records.recorded.lock().await;
        if !rec.spares.contains(&path) && rec.spares.len() >= MAX_SPARES {
            return Err(self.refuse(format!(
                "already {MAX_SPARES} spares recorded: remove one first"
            )));
        }
        self.add_spare(meta)?;
        if !rec.spares.contains(&path) {
            rec.spares.push(path);
            self.commit(&mut rec).await?;
        }
        Ok(())
    }

    /// Spares added at run time, as recorded (paths).
    pub async fn recorded_spares(&self) -> Vec<String> {
        self.records.recorded.lock().await.spares.clone()
    }

    /// Takes `path` out of the recorded spares; whether it was there.
    pub async fn forget_spare(&self, path: &str) -> Result<bool, ArrayError> {
        let mut rec = self.records.recorded.lock().await;
        let before = rec.spares.len();
        rec.spares.retain(|p| p != path);
        if rec.spares.len() == before {
            return Ok(false);
        }
        self.commit(&mut rec).await?;
        Ok(true)
    }
}
