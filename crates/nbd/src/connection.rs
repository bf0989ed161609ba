//! One connection's life after admission: the handshake under its timeout (with the TLS
//! upgrade on a TLS listener), then the transmission phase or a clean close.

use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};
use tokio::sync::watch;

use crate::admission::HandshakeSlot;
use crate::busy_poll::BusyPoll;
use crate::error::ConnError;
use crate::handshake::{self, Outcome, TlsPhase};
use crate::shared::Shared;
use crate::tls::{ServerTls, TlsMode};
use crate::transmission;

/// A connection on a listener without TLS.
pub(crate) async fn run_connection<R, W>(
    shared: &Arc<Shared>,
    r: BusyPoll<R>,
    w: W,
    handshake: HandshakeSlot,
) -> Result<(), ConnError>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let mut stop = shared.shutdown.subscribe();
    let mut r = BufReader::with_capacity(128 * 1024, r);
    let mut w = BufWriter::with_capacity(64 * 1024, w);
    let phase = TlsPhase {
        mode: TlsMode::Off,
        active: false,
    };
    let mut no_zeroes = false;
    let negotiation =
        handshake::negotiate(shared, &mut r, &mut w, &mut stop, phase, &mut no_zeroes);
    let outcome = tokio::time::timeout(shared.limits.handshake_timeout, negotiation)
        .await
        .map_err(|_| ConnError::HandshakeTimeout)?
        .map_err(ConnError::in_handshake)?;
    drop(handshake);
    finish_handshake(shared, outcome, r, w, &mut stop).await
}

/// Closes, or serves the transmission phase, once the options are done.
async fn finish_handshake<R, W>(
    shared: &Arc<Shared>,
    outcome: Outcome,
    r: BufReader<BusyPoll<R>>,
    mut w: BufWriter<W>,
    stop: &mut watch::Receiver<bool>,
) -> Result<(), ConnError>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    match outcome {
        Outcome::Closed => {
            let _ = w.shutdown().await;
            Ok(())
        }
        Outcome::Transmission(neg, _place) => {
            // The handshake flushed every reply: nothing is left in the buffer. The
            // transmission phase batches its own writes.
            let w = w.into_inner();
            transmission::serve(shared, neg, r, w, stop).await
        }
        Outcome::StartTls => Err(ConnError::Tls("STARTTLS where TLS is off".into())),
    }
}

/// A step of the handshake under its deadline: its error, as met while negotiating.
fn timed<T>(r: Result<Result<T, ConnError>, tokio::time::error::Elapsed>) -> Result<T, ConnError> {
    r.unwrap_or(Err(ConnError::HandshakeTimeout))
        .map_err(ConnError::in_handshake)
}

/// A connection on a listener with TLS: options in the clear up to `NBD_OPT_STARTTLS` (all
/// refused but that one in required mode), the TLS handshake, then the options again from a
/// clean state over TLS. The handshake timeout covers all of it.
pub(crate) async fn run_tls_connection<S>(
    shared: &Arc<Shared>,
    s: S,
    tls: ServerTls,
    handshake: HandshakeSlot,
) -> Result<(), ConnError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let deadline = tokio::time::Instant::now() + shared.limits.handshake_timeout;
    let mut stop = shared.shutdown.subscribe();
    let (r, w) = tokio::io::split(s);
    let mut r = BufReader::with_capacity(128 * 1024, BusyPoll::off(r));
    let mut w = BufWriter::with_capacity(64 * 1024, w);
    let mut no_zeroes = false;
    let clear = TlsPhase {
        mode: tls.mode,
        active: false,
    };
    let negotiation =
        handshake::negotiate(shared, &mut r, &mut w, &mut stop, clear, &mut no_zeroes);
    let outcome = timed(tokio::time::timeout_at(deadline, negotiation).await)?;
    if !matches!(outcome, Outcome::StartTls) {
        drop(handshake);
        return finish_handshake(shared, outcome, r, w, &mut stop).await;
    }
    // The client waits for the ACK before its ClientHello: anything already buffered is a
    // client sending in the clear what should have been encrypted.
    if !r.buffer().is_empty() {
        return Err(ConnError::Tls("data sent before the TLS handshake".into()));
    }
    let acceptor = tls
        .acceptor
        .clone()
        .ok_or_else(|| ConnError::Tls("no certificate configured".into()))?;
    let plain = r.into_inner().into_inner().unsplit(w.into_inner());
    let secured = timed(
        tokio::time::timeout_at(deadline, async {
            acceptor
                .accept(plain)
                .await
                .map_err(|e| ConnError::Tls(e.to_string()))
        })
        .await,
    )?;
    let (r, w) = tokio::io::split(secured);
    let mut r = BufReader::with_capacity(128 * 1024, BusyPoll::off(r));
    let mut w = BufWriter::with_capacity(64 * 1024, w);
    let over_tls = TlsPhase {
        mode: tls.mode,
        active: true,
    };
    let negotiation =
        handshake::negotiate(shared, &mut r, &mut w, &mut stop, over_tls, &mut no_zeroes);
    let outcome = timed(tokio::time::timeout_at(deadline, negotiation).await)?;
    drop(handshake);
    finish_handshake(shared, outcome, r, w, &mut stop).await
}
