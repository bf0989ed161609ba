//! The client's side of the fixed-newstyle handshake: greeting, client flags, then options
//! (`STRUCTURED_REPLY`, `SET_META_CONTEXT base:allocation`, `GO` with `INFO_BLOCK_SIZE`, `LIST`,
//! `STARTTLS`), falling back to `EXPORT_NAME` for servers that do not know `GO`.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::ClientError;
use crate::proto::*;

/// Longest option reply the client accepts (a description, an error message).
const MAX_REPLY_DATA: u32 = 1 << 20;
/// Old-style greeting magic (`cliserv_magic`), which this client does not speak.
const OLDSTYLE_MAGIC: u64 = 0x0000_4202_8186_1253;

/// What the server told about the export during the handshake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportInfo {
    /// The export's canonical name (`NBD_INFO_NAME` when sent, the name asked for otherwise).
    pub name: String,
    pub description: String,
    pub size: u64,
    /// Transmission flags (`proto::TFLAG_*`).
    pub flags: u16,
    /// Requests' offsets and lengths are multiples of this (1 when the server sent none).
    pub min_block: u32,
    /// Size of efficient I/O.
    pub preferred_block: u32,
    /// Longest read or write payload.
    pub max_block: u32,
    /// Replies are structured (`NBD_OPT_STRUCTURED_REPLY` was acknowledged).
    pub structured: bool,
    /// Context id of `base:allocation`, when the server offered it.
    pub base_allocation: Option<u32>,
    /// Whether the server's block sizes were negotiated (`NBD_INFO_BLOCK_SIZE` received).
    pub block_size_negotiated: bool,
}

impl ExportInfo {
    pub fn read_only(&self) -> bool {
        self.flags & TFLAG_READ_ONLY != 0
    }
    /// Whether transmission flag `f` is set.
    pub fn has(&self, f: u16) -> bool {
        self.flags & f != 0
    }
}

/// An export as `NBD_OPT_LIST` names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportListing {
    pub name: String,
    pub description: String,
}

/// How to negotiate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Negotiation {
    /// Ask for structured replies (needed for block status and sparse reads).
    pub structured: bool,
    /// Ask for `base:allocation` (needs `structured`).
    pub base_allocation: bool,
    /// Send `NBD_INFO_BLOCK_SIZE`, promising to honour the server's block sizes. Turned off
    /// only to test how servers treat clients that make no such promise.
    pub block_size: bool,
    /// Use the old `NBD_OPT_EXPORT_NAME` instead of `NBD_OPT_GO` (tests of old clients).
    pub export_name_only: bool,
}

impl Default for Negotiation {
    fn default() -> Self {
        Negotiation {
            structured: true,
            base_allocation: true,
            block_size: true,
            export_name_only: false,
        }
    }
}

/// One option reply.
pub(crate) struct OptReply {
    pub typ: u32,
    pub data: Vec<u8>,
}

impl OptReply {
    fn is_error(&self) -> bool {
        self.typ & (1 << 31) != 0
    }
    fn message(&self) -> String {
        String::from_utf8_lossy(&self.data).into_owned()
    }
}

/// Reads the greeting and answers with the client flags. Returns whether the server omits
/// the 124 zero bytes after `NBD_OPT_EXPORT_NAME`.
pub(crate) async fn greet<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
) -> Result<bool, ClientError> {
    let magic = s.read_u64().await?;
    if magic != NBDMAGIC {
        return Err(ClientError::NotNbd(format!("greeting magic {magic:#x}")));
    }
    let second = s.read_u64().await?;
    if second == OLDSTYLE_MAGIC {
        return Err(ClientError::NotFixedNewstyle);
    }
    if second != IHAVEOPT {
        return Err(ClientError::NotNbd(format!("second magic {second:#x}")));
    }
    let flags = s.read_u16().await?;
    if flags & FLAG_FIXED_NEWSTYLE == 0 {
        return Err(ClientError::NotFixedNewstyle);
    }
    let no_zeroes = flags & FLAG_NO_ZEROES != 0;
    let mut cf = FLAG_C_FIXED_NEWSTYLE;
    if no_zeroes {
        cf |= FLAG_C_NO_ZEROES;
    }
    s.write_u32(cf).await?;
    s.flush().await?;
    Ok(no_zeroes)
}

pub(crate) async fn send_option<S: AsyncWrite + Unpin>(
    s: &mut S,
    opt: u32,
    data: &[u8],
) -> Result<(), ClientError> {
    let mut v = Vec::with_capacity(16 + data.len());
    v.extend_from_slice(&IHAVEOPT.to_be_bytes());
    v.extend_from_slice(&opt.to_be_bytes());
    v.extend_from_slice(&(data.len() as u32).to_be_bytes());
    v.extend_from_slice(data);
    s.write_all(&v).await?;
    s.flush().await?;
    Ok(())
}

pub(crate) async fn read_reply<S: AsyncRead + Unpin>(
    s: &mut S,
    opt: u32,
) -> Result<OptReply, ClientError> {
    let mut h = [0u8; 20];
    s.read_exact(&mut h).await?;
    let magic = u64::from_be_bytes(h[0..8].try_into().expect("8 bytes"));
    if magic != OPTION_REPLY_MAGIC {
        return Err(ClientError::Protocol(format!(
            "option reply magic {magic:#x}"
        )));
    }
    let got = u32::from_be_bytes(h[8..12].try_into().expect("4 bytes"));
    if got != opt {
        return Err(ClientError::Protocol(format!(
            "reply to option {got} while waiting for option {opt}"
        )));
    }
    let typ = u32::from_be_bytes(h[12..16].try_into().expect("4 bytes"));
    let len = u32::from_be_bytes(h[16..20].try_into().expect("4 bytes"));
    if len > MAX_REPLY_DATA {
        return Err(ClientError::Protocol(format!(
            "option reply of {len} bytes"
        )));
    }
    let mut data = vec![0u8; len as usize];
    s.read_exact(&mut data).await?;
    Ok(OptReply { typ, data })
}

fn refused(option: &'static str, r: &OptReply) -> ClientError {
    if r.typ == REP_ERR_TLS_REQD {
        return ClientError::TlsRequired;
    }
    ClientError::OptionRefused {
        option,
        reply: r.typ,
        message: r.message(),
    }
}

/// Sends an option without data expected back but an ACK; `Ok(false)` when the server
/// answers `NBD_REP_ERR_UNSUP` (or another error it may give for an option it does not want).
async fn simple_option<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    opt: u32,
    name: &'static str,
) -> Result<bool, ClientError> {
    send_option(s, opt, &[]).await?;
    let r = read_reply(s, opt).await?;
    match r.typ {
        REP_ACK => Ok(true),
        REP_ERR_TLS_REQD => Err(ClientError::TlsRequired),
        t if r.is_error() => {
            let _ = t;
            Ok(false)
        }
        _ => Err(refused(name, &r)),
    }
}

/// From after the greeting (and TLS) to the transmission phase.
pub(crate) async fn negotiate<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    export: &str,
    no_zeroes: bool,
    how: &Negotiation,
) -> Result<ExportInfo, ClientError> {
    if export.len() > MAX_STRING {
        return Err(ClientError::UnknownExport(export.to_string()));
    }
    let structured =
        how.structured && simple_option(s, OPT_STRUCTURED_REPLY, "STRUCTURED_REPLY").await?;
    let mut base_allocation = None;
    if structured && how.base_allocation {
        base_allocation = set_meta_context(s, export).await?;
    }
    if !how.export_name_only {
        let mut d = Vec::with_capacity(8 + export.len() + 6);
        d.extend_from_slice(&(export.len() as u32).to_be_bytes());
        d.extend_from_slice(export.as_bytes());
        let infos: &[u16] = if how.block_size {
            &[INFO_BLOCK_SIZE, INFO_NAME, INFO_DESCRIPTION]
        } else {
            &[INFO_NAME, INFO_DESCRIPTION]
        };
        d.extend_from_slice(&(infos.len() as u16).to_be_bytes());
        for i in infos {
            d.extend_from_slice(&i.to_be_bytes());
        }
        send_option(s, OPT_GO, &d).await?;
        let mut info = ExportInfo {
            name: export.to_string(),
            description: String::new(),
            size: 0,
            flags: 0,
            min_block: 1,
            preferred_block: 4096,
            max_block: MAX_PAYLOAD,
            structured,
            base_allocation,
            block_size_negotiated: false,
        };
        let mut got_export = false;
        loop {
            let r = read_reply(s, OPT_GO).await?;
            match r.typ {
                REP_INFO => apply_info(&mut info, &r.data, &mut got_export)?,
                REP_ACK if got_export => {
                    if !how.block_size {
                        // The server sent sizes unasked: they bind nobody.
                        info.block_size_negotiated = false;
                    }
                    return Ok(info);
                }
                REP_ACK => {
                    return Err(ClientError::Protocol(
                        "GO acknowledged without NBD_INFO_EXPORT".into(),
                    ))
                }
                REP_ERR_UNKNOWN => return Err(ClientError::UnknownExport(export.to_string())),
                // A server older than GO: the old way.
                REP_ERR_UNSUP => break,
                _ if r.is_error() => return Err(refused("GO", &r)),
                // Unknown non-error replies are ignored, as the spec asks.
                _ => {}
            }
        }
    }
    send_option_export_name(s, export, no_zeroes, structured, base_allocation).await
}

async fn send_option_export_name<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    export: &str,
    no_zeroes: bool,
    structured: bool,
    base_allocation: Option<u32>,
) -> Result<ExportInfo, ClientError> {
    send_option(s, OPT_EXPORT_NAME, export.as_bytes()).await?;
    // An unknown export ends the connection here: there is no error reply.
    let size = s.read_u64().await.map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            ClientError::UnknownExport(export.to_string())
        } else {
            e.into()
        }
    })?;
    let flags = s.read_u16().await?;
    if !no_zeroes {
        let mut z = [0u8; 124];
        s.read_exact(&mut z).await?;
    }
    Ok(ExportInfo {
        name: export.to_string(),
        description: String::new(),
        size,
        flags,
        min_block: 1,
        preferred_block: 4096,
        max_block: MAX_PAYLOAD,
        structured,
        base_allocation,
        block_size_negotiated: false,
    })
}

fn apply_info(info: &mut ExportInfo, d: &[u8], got_export: &mut bool) -> Result<(), ClientError> {
    let short = || ClientError::Protocol("short NBD_REP_INFO".into());
    let typ = u16::from_be_bytes(d.get(0..2).ok_or_else(short)?.try_into().expect("2 bytes"));
    let rest = &d[2..];
    match typ {
        INFO_EXPORT => {
            if rest.len() != 10 {
                return Err(short());
            }
            info.size = u64::from_be_bytes(rest[0..8].try_into().expect("8 bytes"));
            info.flags = u16::from_be_bytes(rest[8..10].try_into().expect("2 bytes"));
            *got_export = true;
        }
        INFO_NAME => info.name = String::from_utf8_lossy(rest).into_owned(),
        INFO_DESCRIPTION => info.description = String::from_utf8_lossy(rest).into_owned(),
        INFO_BLOCK_SIZE => {
            if rest.len() != 12 {
                return Err(short());
            }
            let word = |i: usize| u32::from_be_bytes(rest[i..i + 4].try_into().expect("4 bytes"));
            let (min, pref, max) = (word(0), word(4), word(8));
            if !min.is_power_of_two()
                || min > 65536
                || !pref.is_power_of_two()
                || pref < min
                || max < min
            {
                return Err(ClientError::Protocol(format!(
                    "block sizes min {min}, preferred {pref}, max {max} break the spec's rules"
                )));
            }
            info.min_block = min;
            info.preferred_block = pref;
            info.max_block = max.min(MAX_PAYLOAD).max(min);
            info.block_size_negotiated = true;
        }
        _ => {}
    }
    Ok(())
}

/// `NBD_OPT_SET_META_CONTEXT` for `base:allocation`: its id, or `None` when not offered.
async fn set_meta_context<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    export: &str,
) -> Result<Option<u32>, ClientError> {
    let q = META_BASE_ALLOCATION.as_bytes();
    let mut d = Vec::with_capacity(12 + export.len() + q.len());
    d.extend_from_slice(&(export.len() as u32).to_be_bytes());
    d.extend_from_slice(export.as_bytes());
    d.extend_from_slice(&1u32.to_be_bytes());
    d.extend_from_slice(&(q.len() as u32).to_be_bytes());
    d.extend_from_slice(q);
    send_option(s, OPT_SET_META_CONTEXT, &d).await?;
    let mut id = None;
    loop {
        let r = read_reply(s, OPT_SET_META_CONTEXT).await?;
        match r.typ {
            REP_META_CONTEXT if r.data.len() >= 4 && &r.data[4..] == q => {
                id = Some(u32::from_be_bytes(
                    r.data[0..4].try_into().expect("4 bytes"),
                ));
            }
            REP_META_CONTEXT => {}
            REP_ACK => return Ok(id),
            REP_ERR_TLS_REQD => return Err(ClientError::TlsRequired),
            // Unknown export and the like are reported by GO, more clearly.
            _ if r.is_error() => return Ok(None),
            _ => {}
        }
    }
}

/// `NBD_OPT_LIST`, then `NBD_OPT_ABORT`.
pub(crate) async fn list<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
) -> Result<Vec<ExportListing>, ClientError> {
    send_option(s, OPT_LIST, &[]).await?;
    let mut out = Vec::new();
    loop {
        let r = read_reply(s, OPT_LIST).await?;
        match r.typ {
            REP_SERVER => {
                let d = &r.data;
                let n = u32::from_be_bytes(
                    d.get(0..4)
                        .ok_or_else(|| ClientError::Protocol("short NBD_REP_SERVER".into()))?
                        .try_into()
                        .expect("4 bytes"),
                ) as usize;
                let name = d
                    .get(4..4 + n)
                    .ok_or_else(|| ClientError::Protocol("short NBD_REP_SERVER".into()))?;
                out.push(ExportListing {
                    name: String::from_utf8_lossy(name).into_owned(),
                    description: String::from_utf8_lossy(&d[4 + n..]).into_owned(),
                });
            }
            REP_ACK => break,
            _ if r.is_error() => return Err(refused("LIST", &r)),
            _ => {}
        }
    }
    abort(s).await;
    Ok(out)
}

/// `NBD_OPT_ABORT`; the server's ACK is read if it comes, not required.
pub(crate) async fn abort<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S) {
    if send_option(s, OPT_ABORT, &[]).await.is_ok() {
        let _ = read_reply(s, OPT_ABORT).await;
    }
    let _ = s.shutdown().await;
}
