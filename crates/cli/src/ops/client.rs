//! The connection to a daemon's control socket, and where that socket is.

use anyhow::{bail, Context, Result};
use clap::Args;
use nbraid_control::{ErrorBody, Request};
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;

/// Where the daemon's control socket is.
#[derive(Args, Clone, Debug)]
pub struct Target {
    /// The daemon's config: its control socket is read from it.
    #[arg(long, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    /// The control socket itself.
    #[arg(long, value_name = "PATH", conflicts_with = "config")]
    pub(crate) control: Option<PathBuf>,
}

/// The daemon refused a request: its message is for the admin, its code for programs
/// (`--json`).
#[derive(Debug)]
pub(crate) struct Refused(pub ErrorBody);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0.message)
    }
}

impl std::error::Error for Refused {}

/// A connection to the control socket.
pub(crate) struct Client {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl Client {
    pub(crate) fn connect(t: &Target) -> Result<Client> {
        let path = match (&t.control, &t.config) {
            (Some(p), _) => p.clone(),
            (None, Some(c)) => nbraid_config::load(c)?.control,
            (None, None) => bail!(
                "say where the daemon is: --config FILE (its config) or --control PATH (its control socket)"
            ),
        };
        let s = UnixStream::connect(&path).with_context(|| {
            format!(
                "connecting to the control socket {} (is nbraidd running on this config?)",
                path.display()
            )
        })?;
        Ok(Client {
            reader: BufReader::new(s.try_clone()?),
            writer: s,
        })
    }

    /// The next line the daemon sends unasked (`events` with `follow`); `None` when it
    /// closed the connection.
    pub(crate) fn next_line(&mut self) -> Result<Option<Value>> {
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            return Ok(None);
        }
        Ok(Some(
            serde_json::from_str(&line).context("the daemon's line is not JSON")?,
        ))
    }

    /// Sends a request; the reply, or its refusal as an error ([`Refused`]).
    pub(crate) fn call(&mut self, req: &Request) -> Result<Value> {
        let mut line = req.to_json().to_string();
        line.push('\n');
        self.writer.write_all(line.as_bytes())?;
        let mut reply = String::new();
        if self.reader.read_line(&mut reply)? == 0 {
            bail!("the daemon closed the control connection");
        }
        let v: Value = serde_json::from_str(&reply).context("the daemon's reply is not JSON")?;
        if let Some(refusal) = ErrorBody::of_reply(&v) {
            return Err(Refused(refusal).into());
        }
        Ok(v)
    }
}
