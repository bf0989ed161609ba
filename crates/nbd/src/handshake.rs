//! Fixed-newstyle handshake: greeting, client flags, option haggling up to `NBD_OPT_GO` or
//! `NBD_OPT_EXPORT_NAME`.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;

use super::admission::ServingSlot;
use super::proto::*;
use super::shared::{shutdown_signalled, too_many_connections, ExportEntry, Shared};
use crate::error::ConnError;
use crate::export::Export;
use crate::tls::TlsMode;

/// Option data this server reads into memory; longer options are discarded unread.
const MAX_OPTION_DATA: u32 = 64 * 1024;
/// Options longer than this end the connection instead of being discarded.
const MAX_OPTION_DISCARD: u32 = 1024 * 1024;
/// A client haggling longer than this many options is disconnected.
const MAX_OPTIONS: usize = 4096;
/// Context id of `base:allocation` once selected.
pub(crate) const BASE_ALLOCATION_ID: u32 = 1;

/// The result of a successful negotiation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Negotiated {
    /// Index of the export in the server's list.
    pub export: usize,
    pub structured: bool,
    /// Id of the `base:allocation` context when the client selected it for this export.
    pub base_allocation: Option<u32>,
    pub flags: u16,
    /// The client negotiated no block size (`EXPORT_NAME`, or `GO` without
    /// `NBD_INFO_BLOCK_SIZE`): requests need not be aligned (see [`crate::unaligned`]).
    pub byte_granular: bool,
}

/// How the handshake ended without an error.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// The client is served, holding one of the server's places until it goes.
    Transmission(Negotiated, ServingSlot),
    /// The client aborted, or the server is shutting down.
    Closed,
    /// `NBD_OPT_STARTTLS` was acknowledged: the TLS handshake comes next, then the options
    /// again from a clean state.
    StartTls,
}

/// Where a connection stands with TLS.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TlsPhase {
    pub mode: TlsMode,
    /// The connection runs over TLS now (after `NBD_OPT_STARTTLS`).
    pub active: bool,
}

/// Transmission flags for `export`, identical for `NBD_OPT_INFO`, `NBD_OPT_GO` and
/// `NBD_OPT_EXPORT_NAME` given the same negotiated state.
pub(crate) fn transmission_flags(export: &dyn Export, structured: bool) -> u16 {
    let mut f = TFLAG_HAS_FLAGS | TFLAG_SEND_FLUSH | TFLAG_SEND_FUA | TFLAG_SEND_CACHE;
    if export.read_only() {
        f |= TFLAG_READ_ONLY;
    } else {
        f |= TFLAG_SEND_TRIM | TFLAG_SEND_WRITE_ZEROES | TFLAG_SEND_FAST_ZERO;
    }
    if structured {
        // Reads always go out as one chunk, so "don't fragment" costs nothing.
        f |= TFLAG_SEND_DF;
    }
    if export.can_multi_conn() {
        f |= TFLAG_CAN_MULTI_CONN;
    }
    if export.rotational() {
        f |= TFLAG_ROTATIONAL;
    }
    f
}

struct State {
    structured: bool,
    /// Export index for which `base:allocation` is selected.
    meta: Option<usize>,
    no_zeroes: bool,
}

/// Runs the handshake on a fresh connection: the greeting (not again after STARTTLS), then
/// the options one by one until one ends the haggling.
pub(crate) async fn negotiate<R, W>(
    shared: &Shared,
    r: &mut R,
    w: &mut W,
    shutdown: &mut watch::Receiver<bool>,
    tls: TlsPhase,
    no_zeroes: &mut bool,
) -> Result<Outcome, ConnError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    // After STARTTLS the options simply continue: no second greeting.
    if !tls.active {
        match greet(r, w, shutdown).await? {
            Some(client_flags) => *no_zeroes = client_flags & FLAG_C_NO_ZEROES != 0,
            None => return Ok(Outcome::Closed),
        }
    }
    let mut haggle = Haggle {
        shared,
        r,
        w,
        tls,
        // Everything negotiated before STARTTLS is forgotten (the spec's MUST).
        st: State {
            structured: false,
            meta: None,
            no_zeroes: *no_zeroes,
        },
    };
    for _ in 0..MAX_OPTIONS {
        let (opt, data) = match haggle.receive(shutdown).await? {
            Received::Option(opt, data) => (opt, data),
            Received::Answered => continue,
            Received::Closed => return Ok(Outcome::Closed),
        };
        let shutting_down = *shutdown.borrow();
        let next = match haggle.refusal(opt, shutting_down).await? {
            Some(next) => next,
            None => haggle.answer(opt, data).await?,
        };
        if let Next::Done(outcome) = next {
            return Ok(outcome);
        }
    }
    Err(ConnError::TooManyOptions)
}

/// Sends the greeting and reads the client's flags; `None` when the server shuts down first.
async fn greet<R, W>(
    r: &mut R,
    w: &mut W,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<Option<u32>, ConnError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    w.write_all(&greeting()).await?;
    w.flush().await?;
    let client_flags = tokio::select! {
        biased;
        _ = shutdown_signalled(shutdown) => return Ok(None),
        f = r.read_u32() => f?,
    };
    if client_flags & !KNOWN_CLIENT_FLAGS != 0 {
        return Err(ConnError::UnknownClientFlags(client_flags));
    }
    Ok(Some(client_flags))
}

/// One option as it came off the wire.
enum Received {
    /// The option and its data.
    Option(u32, Vec<u8>),
    /// Its data was too long: discarded and answered already.
    Answered,
    /// The server shuts down.
    Closed,
}

/// What answering one option leads to.
enum Next {
    /// The client may send another option.
    Option,
    /// The haggling is over.
    Done(Outcome),
}

/// One connection's option haggling: the state negotiated so far and where to answer.
struct Haggle<'a, R, W> {
    shared: &'a Shared,
    r: &'a mut R,
    w: &'a mut W,
    tls: TlsPhase,
    st: State,
}

impl<R, W> Haggle<'_, R, W>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    async fn send(&mut self, opt: u32, reply: u32, data: &[u8]) -> std::io::Result<()> {
        send(self.w, opt, reply, data).await
    }

    /// Reads the next option header and its data (at most [`MAX_OPTION_DATA`] bytes in
    /// memory; longer data is discarded and refused, past [`MAX_OPTION_DISCARD`] fatally).
    async fn receive(
        &mut self,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<Received, ConnError> {
        let mut hdr = [0u8; 16];
        tokio::select! {
            biased;
            _ = shutdown_signalled(shutdown) => return Ok(Received::Closed),
            res = self.r.read_exact(&mut hdr) => { res?; }
        }
        let (opt, len) = option_header(&hdr)?;
        if len > MAX_OPTION_DATA {
            if opt == OPT_EXPORT_NAME || len > MAX_OPTION_DISCARD {
                return Err(ConnError::OptionTooLong { option: opt, len });
            }
            discard(self.r, len.into()).await?;
            let (rep, why) = too_long_reply(opt, self.tls);
            self.send(opt, rep, why).await?;
            return Ok(Received::Answered);
        }
        // Bounded by MAX_OPTION_DATA above.
        let mut data = vec![0u8; len as usize];
        self.r.read_exact(&mut data).await?;
        Ok(Received::Option(opt, data))
    }

    /// Options refused whatever they ask: every one while the server shuts down, and all but
    /// STARTTLS and ABORT while TLS is required and not yet active. `None` for the others.
    async fn refusal(&mut self, opt: u32, shutting_down: bool) -> Result<Option<Next>, ConnError> {
        if shutting_down {
            return Ok(Some(match opt {
                OPT_ABORT => {
                    let _ = self.send(opt, REP_ACK, &[]).await;
                    Next::Done(Outcome::Closed)
                }
                OPT_EXPORT_NAME => Next::Done(Outcome::Closed),
                _ => {
                    self.send(opt, REP_ERR_SHUTDOWN, b"server is shutting down")
                        .await?;
                    Next::Option
                }
            }));
        }
        let tls = self.tls;
        if tls.mode == TlsMode::Required && !tls.active && !matches!(opt, OPT_STARTTLS | OPT_ABORT)
        {
            if opt == OPT_EXPORT_NAME {
                // It cannot be answered with an error: the connection ends.
                return Err(ConnError::TlsRequired);
            }
            let why = b"TLS is required: send NBD_OPT_STARTTLS first";
            self.send(opt, REP_ERR_TLS_REQD, why).await?;
            return Ok(Some(Next::Option));
        }
        Ok(None)
    }

    /// Answers one option.
    async fn answer(&mut self, opt: u32, data: Vec<u8>) -> Result<Next, ConnError> {
        match opt {
            OPT_EXPORT_NAME => self.export_name(&data).await,
            OPT_ABORT => {
                // The client may already have gone; an ACK it never reads is fine.
                let _ = self.send(opt, REP_ACK, &[]).await;
                Ok(Next::Done(Outcome::Closed))
            }
            OPT_LIST => self.list(&data).await,
            OPT_STRUCTURED_REPLY => self.structured_reply(&data).await,
            OPT_INFO | OPT_GO => self.info_or_go(opt, &data).await,
            OPT_LIST_META_CONTEXT | OPT_SET_META_CONTEXT => self.meta_context(opt, &data).await,
            OPT_STARTTLS => self.starttls(&data).await,
            _ => {
                self.send(opt, REP_ERR_UNSUP, b"option not supported")
                    .await?;
                Ok(Next::Option)
            }
        }
    }

    /// `NBD_OPT_EXPORT_NAME`: serves the export or ends the connection (no error reply exists).
    async fn export_name(&mut self, data: &[u8]) -> Result<Next, ConnError> {
        let shared = self.shared;
        let Some(idx) = shared.lookup(data) else {
            return Err(ConnError::UnknownExport(
                String::from_utf8_lossy(data).into_owned(),
            ));
        };
        let Some(slot) = shared.admission.try_serve() else {
            // EXPORT_NAME cannot be answered with an error: the client is disconnected.
            return Err(ConnError::Refused(too_many_connections(shared)));
        };
        let export = &*shared.exports[idx].export;
        let flags = transmission_flags(export, self.st.structured);
        let mut reply = Vec::with_capacity(10 + 124);
        reply.extend_from_slice(&export.size().to_be_bytes());
        reply.extend_from_slice(&flags.to_be_bytes());
        if !self.st.no_zeroes {
            reply.extend_from_slice(&[0u8; 124]);
        }
        self.w.write_all(&reply).await?;
        self.w.flush().await?;
        let neg = negotiated(&self.st, idx, flags, true);
        Ok(Next::Done(Outcome::Transmission(neg, slot)))
    }

    /// `NBD_OPT_LIST`: every export's name and description.
    async fn list(&mut self, data: &[u8]) -> Result<Next, ConnError> {
        let opt = OPT_LIST;
        if !data.is_empty() {
            self.send(opt, REP_ERR_INVALID, b"NBD_OPT_LIST takes no data")
                .await?;
            return Ok(Next::Option);
        }
        for e in &self.shared.exports {
            // Name, then the description as the human-readable remainder.
            let desc = e.export.description();
            let desc = truncate_str(&desc, MAX_STRING);
            let mut d = Vec::with_capacity(4 + e.name.len() + desc.len());
            d.extend_from_slice(&(e.name.len() as u32).to_be_bytes());
            d.extend_from_slice(e.name.as_bytes());
            d.extend_from_slice(desc.as_bytes());
            self.w.write_all(&option_reply(opt, REP_SERVER, &d)).await?;
        }
        self.send(opt, REP_ACK, &[]).await?;
        Ok(Next::Option)
    }

    /// `NBD_OPT_STRUCTURED_REPLY`.
    async fn structured_reply(&mut self, data: &[u8]) -> Result<Next, ConnError> {
        let opt = OPT_STRUCTURED_REPLY;
        if !data.is_empty() {
            let why = b"NBD_OPT_STRUCTURED_REPLY takes no data";
            self.send(opt, REP_ERR_INVALID, why).await?;
            return Ok(Next::Option);
        }
        self.st.structured = true;
        self.send(opt, REP_ACK, &[]).await?;
        Ok(Next::Option)
    }

    /// `NBD_OPT_INFO` and `NBD_OPT_GO`: the export's facts; GO then serves it.
    async fn info_or_go(&mut self, opt: u32, data: &[u8]) -> Result<Next, ConnError> {
        let Some((name, requests)) = parse_info(data) else {
            self.send(opt, REP_ERR_INVALID, b"malformed NBD_OPT_INFO/GO data")
                .await?;
            return Ok(Next::Option);
        };
        let shared = self.shared;
        let Some(idx) = shared.lookup(name) else {
            self.send(opt, REP_ERR_UNKNOWN, b"no such export").await?;
            return Ok(Next::Option);
        };
        // GO takes a serving place before saying yes; INFO needs none.
        let slot = if opt == OPT_GO {
            let Some(slot) = shared.admission.try_serve() else {
                let why = too_many_connections(shared);
                self.send(opt, REP_ERR_POLICY, why.as_bytes()).await?;
                return Ok(Next::Option);
            };
            Some(slot)
        } else {
            None
        };
        let entry = &shared.exports[idx];
        let flags = transmission_flags(&*entry.export, self.st.structured);
        let wants = |t: u16| requests.chunks_exact(2).any(|c| c == t.to_be_bytes());
        for info in export_infos(entry, flags, name, wants) {
            self.w
                .write_all(&option_reply(opt, REP_INFO, &info))
                .await?;
        }
        self.send(opt, REP_ACK, &[]).await?;
        Ok(match slot {
            Some(slot) => {
                let agreed = wants(INFO_BLOCK_SIZE);
                let neg = negotiated(&self.st, idx, flags, !agreed);
                Next::Done(Outcome::Transmission(neg, slot))
            }
            None => Next::Option,
        })
    }

    /// `NBD_OPT_LIST_META_CONTEXT` and `NBD_OPT_SET_META_CONTEXT` (`base:allocation` only).
    async fn meta_context(&mut self, opt: u32, data: &[u8]) -> Result<Next, ConnError> {
        let set = opt == OPT_SET_META_CONTEXT;
        if set {
            // Replaced even when the option fails.
            self.st.meta = None;
        }
        if !self.st.structured {
            let why = b"negotiate structured replies first";
            self.send(opt, REP_ERR_INVALID, why).await?;
            return Ok(Next::Option);
        }
        let Some((name, queries)) = parse_meta(data) else {
            self.send(opt, REP_ERR_INVALID, b"malformed meta context data")
                .await?;
            return Ok(Next::Option);
        };
        let Some(idx) = self.shared.lookup(name) else {
            self.send(opt, REP_ERR_UNKNOWN, b"no such export").await?;
            return Ok(Next::Option);
        };
        let export = &*self.shared.exports[idx].export;
        if export.can_block_status() && meta_queries_match(set, &queries) {
            let id = if set { BASE_ALLOCATION_ID } else { 0 };
            let mut d = Vec::with_capacity(4 + META_BASE_ALLOCATION.len());
            d.extend_from_slice(&id.to_be_bytes());
            d.extend_from_slice(META_BASE_ALLOCATION.as_bytes());
            self.w
                .write_all(&option_reply(opt, REP_META_CONTEXT, &d))
                .await?;
            if set {
                self.st.meta = Some(idx);
            }
        }
        self.send(opt, REP_ACK, &[]).await?;
        Ok(Next::Option)
    }

    /// `NBD_OPT_STARTTLS`: acknowledged only on a listener with TLS, before it is active.
    async fn starttls(&mut self, data: &[u8]) -> Result<Next, ConnError> {
        let opt = OPT_STARTTLS;
        let (rep, msg): (u32, &[u8]) = if self.tls.mode == TlsMode::Off {
            (REP_ERR_UNSUP, b"TLS is not configured on this listener")
        } else if self.tls.active {
            (REP_ERR_INVALID, b"TLS is already active")
        } else if !data.is_empty() {
            (REP_ERR_INVALID, b"NBD_OPT_STARTTLS takes no data")
        } else {
            self.send(opt, REP_ACK, &[]).await?;
            return Ok(Next::Done(Outcome::StartTls));
        };
        self.send(opt, rep, msg).await?;
        Ok(Next::Option)
    }
}

/// The `NBD_REP_INFO` payloads answering INFO or GO for `entry` asked for as `name`: the
/// export's size and flags and its block sizes always (the server enforces them either way),
/// its name when asked or when the client asked by another name (the default export), its
/// description when asked and not empty.
fn export_infos(
    entry: &ExportEntry,
    flags: u16,
    name: &[u8],
    wants: impl Fn(u16) -> bool,
) -> Vec<Vec<u8>> {
    let export = &*entry.export;
    let mut infos = Vec::with_capacity(4);
    let mut info = Vec::with_capacity(12);
    info.extend_from_slice(&INFO_EXPORT.to_be_bytes());
    info.extend_from_slice(&export.size().to_be_bytes());
    info.extend_from_slice(&flags.to_be_bytes());
    infos.push(info);
    let mut bs = Vec::with_capacity(14);
    bs.extend_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
    bs.extend_from_slice(&export.min_block().to_be_bytes());
    bs.extend_from_slice(&entry.preferred.to_be_bytes());
    bs.extend_from_slice(&MAX_PAYLOAD.to_be_bytes());
    infos.push(bs);
    if wants(INFO_NAME) || name != entry.name.as_bytes() {
        let mut d = Vec::with_capacity(2 + entry.name.len());
        d.extend_from_slice(&INFO_NAME.to_be_bytes());
        d.extend_from_slice(entry.name.as_bytes());
        infos.push(d);
    }
    if wants(INFO_DESCRIPTION) {
        let desc = export.description();
        if !desc.is_empty() {
            let desc = truncate_str(&desc, MAX_STRING);
            let mut d = Vec::with_capacity(2 + desc.len());
            d.extend_from_slice(&INFO_DESCRIPTION.to_be_bytes());
            d.extend_from_slice(desc.as_bytes());
            infos.push(d);
        }
    }
    infos
}

/// Whether a meta-context option's queries select `base:allocation`: SET names it; LIST
/// with no queries lists everything, or asks for the `base:` namespace or the context itself.
fn meta_queries_match(set: bool, queries: &[&[u8]]) -> bool {
    let exact = |q: &&[u8]| *q == META_BASE_ALLOCATION.as_bytes();
    if set {
        queries.iter().any(exact)
    } else {
        queries.is_empty() || queries.iter().any(|q| *q == b"base:" || exact(q))
    }
}

/// Options a refused client may send before it is disconnected.
const MAX_REFUSED_OPTIONS: usize = 32;

/// The handshake of a connection the server will not serve: the greeting, then every option
/// answered `NBD_REP_ERR_POLICY` with `why` until the client gives up (the protocol's way for
/// a server to say no). `NBD_OPT_ABORT` is acknowledged; `NBD_OPT_EXPORT_NAME`, which cannot
/// be answered with an error, ends the connection. Reads at most a few options' worth.
pub(crate) async fn refuse<R, W>(r: &mut R, w: &mut W, why: &str) -> Result<(), ConnError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    w.write_all(&greeting()).await?;
    w.flush().await?;
    let client_flags = r.read_u32().await?;
    if client_flags & !KNOWN_CLIENT_FLAGS != 0 {
        return Err(ConnError::UnknownClientFlags(client_flags));
    }
    let why = truncate_str(why, MAX_STRING);
    for _ in 0..MAX_REFUSED_OPTIONS {
        let mut hdr = [0u8; 16];
        r.read_exact(&mut hdr).await?;
        let (opt, len) = option_header(&hdr)?;
        if len > MAX_OPTION_DATA {
            return Err(ConnError::OptionTooLong { option: opt, len });
        }
        discard(r, len.into()).await?;
        match opt {
            OPT_ABORT => {
                let _ = send(w, opt, REP_ACK, &[]).await;
                return Ok(());
            }
            OPT_EXPORT_NAME => return Ok(()),
            _ => send(w, opt, REP_ERR_POLICY, why.as_bytes()).await?,
        }
    }
    Err(ConnError::TooManyOptions)
}

fn negotiated(st: &State, idx: usize, flags: u16, byte_granular: bool) -> Negotiated {
    Negotiated {
        byte_granular,
        export: idx,
        structured: st.structured,
        base_allocation: (st.structured && st.meta == Some(idx)).then_some(BASE_ALLOCATION_ID),
        flags,
    }
}

/// The reply to option `opt` whose data was too long to read (discarded unread): while TLS
/// is required and not yet active, `NBD_REP_ERR_TLS_REQD` as for every option but
/// STARTTLS — the spec's MUST holds whatever the length — else too big, or unsupported.
fn too_long_reply(opt: u32, tls: TlsPhase) -> (u32, &'static [u8]) {
    if tls.mode == TlsMode::Required && !tls.active && !matches!(opt, OPT_STARTTLS | OPT_ABORT) {
        (
            REP_ERR_TLS_REQD,
            b"TLS is required: send NBD_OPT_STARTTLS first",
        )
    } else if is_known_option(opt) {
        (REP_ERR_TOO_BIG, b"option data too long")
    } else {
        (REP_ERR_UNSUP, b"option data too long")
    }
}

fn is_known_option(opt: u32) -> bool {
    matches!(
        opt,
        OPT_EXPORT_NAME
            | OPT_ABORT
            | OPT_LIST
            | OPT_STARTTLS
            | OPT_INFO
            | OPT_GO
            | OPT_STRUCTURED_REPLY
            | OPT_LIST_META_CONTEXT
            | OPT_SET_META_CONTEXT
    )
}

async fn send<W: AsyncWrite + Unpin>(
    w: &mut W,
    opt: u32,
    reply: u32,
    data: &[u8],
) -> std::io::Result<()> {
    w.write_all(&option_reply(opt, reply, data)).await?;
    w.flush().await
}

async fn discard<R: AsyncRead + Unpin>(r: &mut R, len: u64) -> std::io::Result<()> {
    let copied = tokio::io::copy(&mut r.take(len), &mut tokio::io::sink()).await?;
    if copied < len {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    Ok(())
}

fn truncate_str(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Splits `NBD_OPT_INFO`/`NBD_OPT_GO` data into (name, raw list of 16-bit requests).
fn parse_info(data: &[u8]) -> Option<(&[u8], &[u8])> {
    let name_len = u32::from_be_bytes(data.get(0..4)?.try_into().ok()?) as usize;
    if name_len > MAX_STRING {
        return None;
    }
    let rest = data.get(4..)?;
    let name = rest.get(..name_len)?;
    let rest = &rest[name_len..];
    let n = u16::from_be_bytes(rest.get(0..2)?.try_into().ok()?) as usize;
    let reqs = &rest[2..];
    (reqs.len() == n * 2).then_some((name, reqs))
}

/// Splits meta-context option data into (export name, queries).
fn parse_meta(data: &[u8]) -> Option<(&[u8], Vec<&[u8]>)> {
    let mut rest = data;
    let take_u32 = |rest: &mut &[u8]| -> Option<u32> {
        let v = u32::from_be_bytes(rest.get(0..4)?.try_into().ok()?);
        *rest = &rest[4..];
        Some(v)
    };
    let name_len = take_u32(&mut rest)? as usize;
    if name_len > MAX_STRING || name_len > rest.len() {
        return None;
    }
    let (name, mut rest) = rest.split_at(name_len);
    let n = take_u32(&mut rest)?;
    let mut queries = Vec::new();
    for _ in 0..n {
        let qlen = take_u32(&mut rest)? as usize;
        if qlen > MAX_STRING || qlen > rest.len() {
            return None;
        }
        let (q, r) = rest.split_at(qlen);
        queries.push(q);
        rest = r;
    }
    rest.is_empty().then_some((name, queries))
}

/// The server's fixed-newstyle greeting: magic, IHAVEOPT, handshake flags.
fn greeting() -> [u8; 18] {
    let mut g = [0u8; 18];
    g[0..8].copy_from_slice(&NBDMAGIC.to_be_bytes());
    g[8..16].copy_from_slice(&IHAVEOPT.to_be_bytes());
    g[16..18].copy_from_slice(&(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).to_be_bytes());
    g
}

/// An option request's header: (option, length of its data) after the IHAVEOPT magic.
fn option_header(hdr: &[u8; 16]) -> Result<(u32, u32), ConnError> {
    let magic = u64::from_be_bytes(hdr[0..8].try_into().expect("8 bytes"));
    if magic != IHAVEOPT {
        return Err(ConnError::BadOptionMagic(magic));
    }
    let opt = u32::from_be_bytes(hdr[8..12].try_into().expect("4 bytes"));
    let len = u32::from_be_bytes(hdr[12..16].try_into().expect("4 bytes"));
    Ok((opt, len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_info_checks_lengths() {
        let mut d = Vec::new();
        d.extend_from_slice(&3u32.to_be_bytes());
        d.extend_from_slice(b"abc");
        d.extend_from_slice(&1u16.to_be_bytes());
        d.extend_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
        assert_eq!(parse_info(&d), Some((&b"abc"[..], &[0u8, 3][..])));
        assert_eq!(parse_info(&d[..d.len() - 1]), None);
        let mut big = d.clone();
        big[0..4].copy_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(parse_info(&big), None);
        assert_eq!(parse_info(&[]), None);
    }

    #[test]
    fn a_too_long_option_before_starttls_is_refused_as_tls_required() {
        let phase = |mode, active| TlsPhase { mode, active };
        let required = phase(TlsMode::Required, false);
        for opt in [OPT_INFO, OPT_GO, OPT_LIST, 999] {
            assert_eq!(too_long_reply(opt, required).0, REP_ERR_TLS_REQD, "{opt}");
        }
        assert_eq!(too_long_reply(OPT_STARTTLS, required).0, REP_ERR_TOO_BIG);
        let over_tls = phase(TlsMode::Required, true);
        assert_eq!(too_long_reply(OPT_INFO, over_tls).0, REP_ERR_TOO_BIG);
        assert_eq!(too_long_reply(999, over_tls).0, REP_ERR_UNSUP);
        let optional = phase(TlsMode::Optional, false);
        assert_eq!(too_long_reply(OPT_GO, optional).0, REP_ERR_TOO_BIG);
    }

    #[test]
    fn parse_meta_checks_lengths() {
        let mut d = Vec::new();
        d.extend_from_slice(&1u32.to_be_bytes());
        d.extend_from_slice(b"x");
        d.extend_from_slice(&1u32.to_be_bytes());
        d.extend_from_slice(&15u32.to_be_bytes());
        d.extend_from_slice(b"base:allocation");
        let (name, q) = parse_meta(&d).unwrap();
        assert_eq!(name, b"x");
        assert_eq!(q, vec![&b"base:allocation"[..]]);
        assert!(parse_meta(&d[..d.len() - 1]).is_none());
        let mut huge = d.clone();
        huge[5..9].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(parse_meta(&huge).is_none());
    }
}
