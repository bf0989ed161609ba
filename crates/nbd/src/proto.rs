//! Wire constants and fixed-size message layouts of the NBD protocol
//! (NetworkBlockDevice `doc/proto.md`), as far as this server speaks it.

/// `NBDMAGIC`, first word the server sends.
pub const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
/// `IHAVEOPT`: second server word of the newstyle handshake and prefix of every option.
pub const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
/// Magic of every option reply.
pub const OPTION_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;

/// Handshake flags (server → client, 16 bits).
pub const FLAG_FIXED_NEWSTYLE: u16 = 1 << 0;
pub const FLAG_NO_ZEROES: u16 = 1 << 1;

/// Client flags (client → server, 32 bits).
pub const FLAG_C_FIXED_NEWSTYLE: u32 = 1 << 0;
pub const FLAG_C_NO_ZEROES: u32 = 1 << 1;
/// Every client flag this server understands; any other bit ends the connection.
pub const KNOWN_CLIENT_FLAGS: u32 = FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES;

/// Option types.
pub const OPT_EXPORT_NAME: u32 = 1;
pub const OPT_ABORT: u32 = 2;
pub const OPT_LIST: u32 = 3;
pub const OPT_STARTTLS: u32 = 5;
pub const OPT_INFO: u32 = 6;
pub const OPT_GO: u32 = 7;
pub const OPT_STRUCTURED_REPLY: u32 = 8;
pub const OPT_LIST_META_CONTEXT: u32 = 9;
pub const OPT_SET_META_CONTEXT: u32 = 10;
pub const OPT_EXTENDED_HEADERS: u32 = 11;

/// Option reply types.
pub const REP_ACK: u32 = 1;
pub const REP_SERVER: u32 = 2;
pub const REP_INFO: u32 = 3;
pub const REP_META_CONTEXT: u32 = 4;
const REP_ERR: u32 = 1 << 31;
pub const REP_ERR_UNSUP: u32 = REP_ERR + 1;
pub const REP_ERR_POLICY: u32 = REP_ERR + 2;
pub const REP_ERR_INVALID: u32 = REP_ERR + 3;
pub const REP_ERR_PLATFORM: u32 = REP_ERR + 4;
pub const REP_ERR_TLS_REQD: u32 = REP_ERR + 5;
pub const REP_ERR_UNKNOWN: u32 = REP_ERR + 6;
pub const REP_ERR_SHUTDOWN: u32 = REP_ERR + 7;
pub const REP_ERR_BLOCK_SIZE_REQD: u32 = REP_ERR + 8;
pub const REP_ERR_TOO_BIG: u32 = REP_ERR + 9;

/// Information types of `NBD_REP_INFO`.
pub const INFO_EXPORT: u16 = 0;
pub const INFO_NAME: u16 = 1;
pub const INFO_DESCRIPTION: u16 = 2;
pub const INFO_BLOCK_SIZE: u16 = 3;

/// Transmission flags (16 bits).
pub const TFLAG_HAS_FLAGS: u16 = 1 << 0;
pub const TFLAG_READ_ONLY: u16 = 1 << 1;
pub const TFLAG_SEND_FLUSH: u16 = 1 << 2;
pub const TFLAG_SEND_FUA: u16 = 1 << 3;
pub const TFLAG_ROTATIONAL: u16 = 1 << 4;
pub const TFLAG_SEND_TRIM: u16 = 1 << 5;
pub const TFLAG_SEND_WRITE_ZEROES: u16 = 1 << 6;
pub const TFLAG_SEND_DF: u16 = 1 << 7;
pub const TFLAG_CAN_MULTI_CONN: u16 = 1 << 8;
pub const TFLAG_SEND_CACHE: u16 = 1 << 10;
pub const TFLAG_SEND_FAST_ZERO: u16 = 1 << 11;

/// Request and reply magics of the transmission phase.
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
pub const STRUCTURED_REPLY_MAGIC: u32 = 0x668e_33ef;

/// Command types.
pub const CMD_READ: u16 = 0;
pub const CMD_WRITE: u16 = 1;
pub const CMD_DISC: u16 = 2;
pub const CMD_FLUSH: u16 = 3;
pub const CMD_TRIM: u16 = 4;
pub const CMD_CACHE: u16 = 5;
pub const CMD_WRITE_ZEROES: u16 = 6;
pub const CMD_BLOCK_STATUS: u16 = 7;

/// Command flags.
pub const CMD_FLAG_FUA: u16 = 1 << 0;
pub const CMD_FLAG_NO_HOLE: u16 = 1 << 1;
pub const CMD_FLAG_DF: u16 = 1 << 2;
pub const CMD_FLAG_REQ_ONE: u16 = 1 << 3;
pub const CMD_FLAG_FAST_ZERO: u16 = 1 << 4;

/// Structured reply flags and chunk types.
pub const REPLY_FLAG_DONE: u16 = 1 << 0;
pub const REPLY_TYPE_NONE: u16 = 0;
pub const REPLY_TYPE_OFFSET_DATA: u16 = 1;
pub const REPLY_TYPE_OFFSET_HOLE: u16 = 2;
pub const REPLY_TYPE_BLOCK_STATUS: u16 = 5;
pub const REPLY_TYPE_ERROR: u16 = (1 << 15) + 1;
pub const REPLY_TYPE_ERROR_OFFSET: u16 = (1 << 15) + 2;

/// Error values of the transmission phase (`NBD_E*`).
pub const EPERM: u32 = 1;
pub const EIO: u32 = 5;
pub const ENOMEM: u32 = 12;
pub const EINVAL: u32 = 22;
pub const ENOSPC: u32 = 28;
pub const EOVERFLOW: u32 = 75;
pub const ENOTSUP: u32 = 95;
pub const ESHUTDOWN: u32 = 108;

/// `base:allocation` status flags.
pub const STATE_HOLE: u32 = 1 << 0;
pub const STATE_ZERO: u32 = 1 << 1;
/// The one metadata context this server knows.
pub const META_BASE_ALLOCATION: &str = "base:allocation";

/// Maximum payload this server advertises and accepts (2^25).
pub const MAX_PAYLOAD: u32 = 32 * 1024 * 1024;
/// Longest string (export name, query) the protocol allows.
pub const MAX_STRING: usize = 4096;

/// Size of a request header on the wire.
pub const REQUEST_HEADER_LEN: usize = 28;

/// A decoded transmission request header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestHeader {
    pub flags: u16,
    pub typ: u16,
    pub cookie: u64,
    pub offset: u64,
    pub length: u32,
}

impl RequestHeader {
    /// Decodes a header; `None` when the magic is wrong.
    pub fn parse(b: &[u8; REQUEST_HEADER_LEN]) -> Option<Self> {
        let magic = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        if magic != REQUEST_MAGIC {
            return None;
        }
        Some(Self {
            flags: u16::from_be_bytes([b[4], b[5]]),
            typ: u16::from_be_bytes([b[6], b[7]]),
            cookie: u64::from_be_bytes(b[8..16].try_into().expect("8 bytes")),
            offset: u64::from_be_bytes(b[16..24].try_into().expect("8 bytes")),
            length: u32::from_be_bytes(b[24..28].try_into().expect("4 bytes")),
        })
    }

    /// Encodes a header.
    pub const fn encode(&self) -> [u8; REQUEST_HEADER_LEN] {
        let mut b = [0u8; REQUEST_HEADER_LEN];
        let parts: [(&[u8], usize); 6] = [
            (&REQUEST_MAGIC.to_be_bytes(), 0),
            (&self.flags.to_be_bytes(), 4),
            (&self.typ.to_be_bytes(), 6),
            (&self.cookie.to_be_bytes(), 8),
            (&self.offset.to_be_bytes(), 16),
            (&self.length.to_be_bytes(), 24),
        ];
        let mut p = 0;
        while p < parts.len() {
            let (bytes, at) = parts[p];
            let mut i = 0;
            while i < bytes.len() {
                b[at + i] = bytes[i];
                i += 1;
            }
            p += 1;
        }
        b
    }
}

/// Encodes an option reply header followed by `data`.
pub fn option_reply(opt: u32, reply: u32, data: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(20 + data.len());
    v.extend_from_slice(&OPTION_REPLY_MAGIC.to_be_bytes());
    v.extend_from_slice(&opt.to_be_bytes());
    v.extend_from_slice(&reply.to_be_bytes());
    v.extend_from_slice(&(data.len() as u32).to_be_bytes());
    v.extend_from_slice(data);
    v
}

/// Simple reply header (16 bytes).
pub fn simple_reply(error: u32, cookie: u64) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[0..4].copy_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
    b[4..8].copy_from_slice(&error.to_be_bytes());
    b[8..16].copy_from_slice(&cookie.to_be_bytes());
    b
}

/// Structured reply chunk header (20 bytes); `length` is the payload length.
pub fn structured_header(flags: u16, typ: u16, cookie: u64, length: u32) -> [u8; 20] {
    let mut b = [0u8; 20];
    b[0..4].copy_from_slice(&STRUCTURED_REPLY_MAGIC.to_be_bytes());
    b[4..6].copy_from_slice(&flags.to_be_bytes());
    b[6..8].copy_from_slice(&typ.to_be_bytes());
    b[8..16].copy_from_slice(&cookie.to_be_bytes());
    b[16..20].copy_from_slice(&length.to_be_bytes());
    b
}

/// Name of a command, for logs.
pub fn command_name(typ: u16) -> &'static str {
    match typ {
        CMD_READ => "READ",
        CMD_WRITE => "WRITE",
        CMD_DISC => "DISC",
        CMD_FLUSH => "FLUSH",
        CMD_TRIM => "TRIM",
        CMD_CACHE => "CACHE",
        CMD_WRITE_ZEROES => "WRITE_ZEROES",
        CMD_BLOCK_STATUS => "BLOCK_STATUS",
        _ => "unknown",
    }
}
