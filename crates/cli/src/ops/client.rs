//! The connection to a daemon's control socket, and where that socket is.

use anyhow::{bail, Context, Result};
use clap::Args;
use nbraid_control::{check_reply, check_streamed, ErrorBody, Request};
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

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
            // Only the socket's path is read: the daemon is reachable while its config
            // does not check (a member file cut short, an edit half done).
            (None, Some(c)) => nbraid_config::control_socket_of(c),
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
        // Events come when they come: no timeout here.
        self.writer.set_read_timeout(None)?;
        let mut line = String::new();
        if read_line_bounded(&mut self.reader, &mut line, REPLY_BYTES_MAX)? == 0 {
            return Ok(None);
        }
        let v: Value = serde_json::from_str(&line).context("the daemon's line is not JSON")?;
        // As for replies: a daemon of another release may mean other things by the fields.
        check_streamed(&v)?;
        Ok(Some(v))
    }

    /// Sends a request; the reply, or its refusal as an error ([`Refused`]).
    pub(crate) fn call(&mut self, req: &Request) -> Result<Value> {
        let mut line = req.to_json().to_string();
        line.push('\n');
        // A daemon that refuses the connection (`busy`) writes its reason and closes before
        // reading: the send then fails, but the reason is still there to be read.
        let sent = self.writer.write_all(line.as_bytes());
        self.writer.set_read_timeout(Some(REPLY_TIMEOUT))?;
        let mut reply = String::new();
        let got = read_line_bounded(&mut self.reader, &mut reply, REPLY_BYTES_MAX);
        match (sent, got) {
            (_, Ok(n)) if n > 0 => {}
            (Err(e), _) => {
                return Err(e).context("sending the request to the daemon's control socket")
            }
            (Ok(()), Err(e)) if is_timeout(&e) => bail!(
                "the daemon did not answer within {} s (is it stuck? its log may say why)",
                REPLY_TIMEOUT.as_secs()
            ),
            (Ok(()), Err(e)) => return Err(e).context("reading the daemon's reply"),
            (Ok(()), Ok(_)) => bail!("the daemon closed the control connection"),
        }
        let v: Value = serde_json::from_str(&reply).context("the daemon's reply is not JSON")?;
        // Before any field is read: a daemon of another release may mean other things by them.
        check_reply(&v)?;
        if let Some(refusal) = ErrorBody::of_reply(&v) {
            return Err(Refused(refusal).into());
        }
        Ok(v)
    }
}

/// How long a request waits for its reply: every request is answered at once or after a
/// commit to the members (bounded by their timeouts); longer is a daemon that is stuck.
const REPLY_TIMEOUT: Duration = Duration::from_secs(120);

/// Longest line taken from the daemon (a status of many volumes is well under it): a peer
/// that streams bytes with no newline must not fill the memory.
const REPLY_BYTES_MAX: u64 = 64 << 20;

/// One line into `line`, at most `max_bytes`; 0 at the end of the stream.
fn read_line_bounded(
    reader: &mut impl BufRead,
    line: &mut String,
    max_bytes: u64,
) -> std::io::Result<usize> {
    let n = reader.take(max_bytes).read_line(line)?;
    if n as u64 == max_bytes && !line.ends_with('\n') {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("the daemon's line is longer than {max_bytes} bytes"),
        ));
    }
    Ok(n)
}

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
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

    /// A daemon that answers `reply` to the first request, on a fresh socket.
    fn answering(reply: &'static str) -> (tempfile::TempDir, Client) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("control.sock");
        let listener = UnixListener::bind(&path).unwrap();
        std::thread::spawn(move || {
            let (s, _) = listener.accept().unwrap();
            let mut request = String::new();
            BufReader::new(&s).read_line(&mut request).unwrap();
            (&s).write_all(format!("{reply}\n").as_bytes()).unwrap();
        });
        let target = Target {
            config: None,
            control: Some(path),
        };
        (dir, Client::connect(&target).unwrap())
    }

    /// A daemon of another release (or something else on the socket) is named as such, not
    /// read as an empty success.
    #[test]
    fn a_reply_of_another_version_or_shape_is_an_error_naming_it() {
        let status = Request::Status { volume: None };
        let (_dir, mut c) = answering(r#"{"v":2,"ok":true,"volumes":[]}"#);
        let err = c.call(&status).expect_err("another version").to_string();
        assert!(err.contains("version 2, this nbraid version 1"), "{err}");
        let (_dir, mut c) = answering(r#"{"v":1,"volumes":[]}"#);
        let err = c.call(&status).expect_err("another shape").to_string();
        assert!(err.contains("no \"ok\""), "{err}");
        let (_dir, mut c) = answering(r#"{"v":1,"ok":true,"volumes":[]}"#);
        assert!(c.call(&status).is_ok());
    }

    /// Followed event lines pass the same version check as replies: one of another release
    /// is an error naming both versions, not printed as a `?` event.
    #[test]
    fn a_streamed_line_of_another_version_is_an_error_naming_it() {
        // `answering` writes its line once it has read one.
        let asked = |c: &mut Client| c.writer.write_all(b"{}\n").unwrap();
        let (_dir, mut c) = answering(r#"{"v":2,"event":"member_failed","volume":"r5"}"#);
        asked(&mut c);
        let err = c.next_line().expect_err("another version").to_string();
        assert!(err.contains("version 2, this nbraid version 1"), "{err}");
        let (_dir, mut c) = answering(r#"{"v":1,"event":"member_failed","volume":"r5"}"#);
        asked(&mut c);
        let v = c.next_line().unwrap().expect("a line");
        assert_eq!(v["event"], "member_failed");
    }

    /// A peer streaming bytes with no newline is cut off at the bound, not read into memory
    /// without end (found by a fuzzing hunt: 16.8 GB in 35 s); a silent one times out.
    #[test]
    fn replies_are_bounded_in_length_and_in_time() {
        let mut endless = std::io::BufReader::new(std::io::repeat(b'x'));
        let mut line = String::new();
        let err = read_line_bounded(&mut endless, &mut line, 4096).expect_err("too long");
        assert!(err.to_string().contains("longer than 4096"), "{err}");
        let mut two = std::io::BufReader::new(&b"{}\n{\"a\":1}\n"[..]);
        let mut line = String::new();
        assert_eq!(read_line_bounded(&mut two, &mut line, 4096).unwrap(), 3);
        assert_eq!(line, "{}\n");

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("control.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let silent = std::thread::spawn(move || listener.accept().unwrap());
        let target = Target {
            config: None,
            control: Some(path),
        };
        let mut client = Client::connect(&target).unwrap();
        let _held = silent.join().unwrap();
        client
            .writer
            .set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        let mut reply = String::new();
        let e = read_line_bounded(&mut client.reader, &mut reply, 4096).expect_err("silent");
        assert!(is_timeout(&e), "{e:?}");
    }
}
