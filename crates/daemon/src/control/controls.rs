//! The daemon's volumes ([`Controls`]): found by name, and the ids members go by across
//! all of them.

use super::volume::ControlVolume;
use nbraid_control::Refusal;
use std::sync::Arc;

/// The daemon's volumes.
pub struct Controls {
    pub volumes: Vec<ControlVolume>,
    /// The config the daemon started with: how to open a remote member it declares again
    /// (its size, timeout, TLS) once `nbraid remove` let it go. `None`: no config (tests).
    pub config: Option<Arc<nbraid_config::Config>>,
}

impl Controls {
    pub(super) fn find(&self, name: &str) -> Result<&ControlVolume, Refusal> {
        self.volumes.iter().find(|v| v.name == name).ok_or_else(|| {
            let names: Vec<&str> = self.volumes.iter().map(|v| v.name.as_str()).collect();
            Refusal::new(
                "not-found",
                format!("no volume \"{name}\" (volumes: {})", names.join(", ")),
            )
        })
    }

    /// The volumes a request names (`None`: all of them).
    pub(super) fn select(&self, name: &Option<String>) -> Result<Vec<&ControlVolume>, Refusal> {
        match name {
            Some(n) => Ok(vec![self.find(n)?]),
            None => Ok(self.volumes.iter().collect()),
        }
    }

    /// The id a member added at run time from `path` goes by: no volume's member or known
    /// member has it ([`nbraid_assembly::added::added_id`], as a restart names it).
    pub(super) fn added_id(&self, path: &str) -> String {
        let taken: Vec<String> = self
            .volumes
            .iter()
            .flat_map(|v| {
                let known: Vec<String> = v.known.lock().ids().map(str::to_string).collect();
                v.members.iter().cloned().chain(known)
            })
            .collect();
        nbraid_assembly::added::added_id(path, &taken)
    }
}

/// An engine error as the refusal of a request.
pub(super) fn refused(e: impl std::fmt::Display) -> Refusal {
    Refusal::new("refused", e.to_string())
}
