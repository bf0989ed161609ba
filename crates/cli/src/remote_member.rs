//! Members on NBD servers for commands that open a config's volume in this process
//! (`nbraid bench --config`): connected as the daemon connects them (its `timeout` and
//! `connections` keys, the volumes' smallest block size), on the remote crate's runtime.

use anyhow::{Context, Result};
use nbraid_config::{Config, Member as ConfigMember};
use nbraid_core::Member;
use std::sync::Arc;

/// Connects to remote member `m` of `config`.
pub fn open(config: &Config, m: &ConfigMember) -> Result<Arc<dyn Member>> {
    let member = futures::executor::block_on(nbraid_daemon::assemble::open_remote(config, m))
        .with_context(|| format!("member {} ({})", m.id, m.path_text))?;
    Ok(Arc::new(member))
}
