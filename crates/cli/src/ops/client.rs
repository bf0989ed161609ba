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
        // A daemon that refuses the connection (`busy`) writes its reason and closes before
        // reading: the send then fails, but the reason is still there to be read.
        let sent = self.writer.write_all(line.as_bytes());
        let mut reply = String::new();
        let got = self.reader.read_line(&mut reply);
        match (sent, got) {
            (_, Ok(n)) if n > 0 => {}
            (Err(e), _) => {
                return Err(e).context("sending the request to the daemon's control socket")
            }
            (Ok(()), Err(e)) => return Err(e.into()),
            (Ok(()), Ok(_)) => bail!("the daemon closed the control connection"),
        }
        let v: Value = serde_json::from_str(&reply).context("the daemon's reply is not JSON")?;
        if let Some(refusal) = ErrorBody::of_reply(&v) {
            return Err(Refused(refusal).into());
        }
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nbraid_control::{error_reply, Refusal};
    use std::os::unix::net::UnixListener;

    /// A daemon at its connection cap answers `busy` and closes without reading: the client
    /// shows that reason, not the broken pipe its send ran into.
    #[test]
    fn a_refusal_sent_before_the_close_is_shown_not_the_broken_pipe() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("control.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let daemon = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let refusal = Refusal::new("busy", "at most 64 connections at once; try again");
            let mut out = error_reply(&refusal).to_string();
            out.push('\n');
            s.write_all(out.as_bytes()).unwrap();
            s.shutdown(std::net::Shutdown::Both).unwrap();
        });
        let target = Target {
            config: None,
            control: Some(path),
        };
        let mut client = Client::connect(&target).unwrap();
        daemon.join().unwrap(); // closed before the request is sent
        let err = client
            .call(&Request::Status { volume: None })
            .expect_err("refused");
        let refused = err.downcast_ref::<Refused>().expect("the daemon's refusal");
        assert_eq!(refused.0.code, "busy");
    }
}
