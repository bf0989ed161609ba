//! Reading and writing superblocks on a member: both copies read, the newest valid one kept;
//! an update goes to the copy its generation selects, durable (FUA) before it returns.

use super::{newest, MetadataError, Superblock, SLOT_BYTES, SUPERBLOCK_MAGIC};
use crate::buf::{Buf, BUF_ALIGN};
use crate::member::{Member, MemberError};
use thiserror::Error;

/// What reading a member's superblock found.
#[derive(Debug)]
pub enum Found {
    /// Neither copy carries nbraid's magic: a member nbraid never initialized.
    Blank,
    /// The newest valid copy, and the error that disqualified the other copy, if any.
    Superblock(Superblock, Option<MetadataError>),
}

#[derive(Debug, Error)]
pub enum SuperblockIoError {
    #[error(transparent)]
    Member(#[from] MemberError),
    #[error("member `{member}`: both superblock copies are unusable: {first}; {second}")]
    Unusable {
        member: String,
        first: MetadataError,
        second: MetadataError,
    },
}

/// Reads both copies of `member`'s superblock. A copy whose areas or regions do not fit the
/// member as it is counts as damaged, like a bad checksum ([`Superblock::check_fits`]).
pub async fn read_superblock(member: &dyn Member) -> Result<Found, SuperblockIoError> {
    let slots = [0, SLOT_BYTES];
    let mut decoded = Vec::with_capacity(2);
    for at in slots {
        let buf = member.read(at, Buf::new(SLOT_BYTES as usize)).await?;
        let copy = Superblock::decode(&buf).and_then(|sb| sb.check_fits(member.len()).map(|()| sb));
        decoded.push((buf[..8] == SUPERBLOCK_MAGIC, copy));
    }
    if decoded.iter().all(|(magic, _)| !magic) {
        return Ok(Found::Blank);
    }
    let [(_, a), (_, b)]: [(bool, _); 2] = decoded.try_into().expect("two copies");
    let (first, second) = (a.clone().err(), b.clone().err());
    match newest([a, b]) {
        Ok((sb, damaged)) => Ok(Found::Superblock(sb, damaged)),
        Err(_) => Err(SuperblockIoError::Unusable {
            member: member.name().to_string(),
            first: first.expect("both failed"),
            second: second.expect("both failed"),
        }),
    }
}

/// Writes `sb` to the copy its generation selects, durably (FUA): the other copy keeps the
/// previous state until the next update.
pub async fn write_superblock(
    member: &dyn Member,
    sb: &Superblock,
) -> Result<(), SuperblockIoError> {
    let bytes = sb.encode().map_err(|e| SuperblockIoError::Unusable {
        member: member.name().to_string(),
        first: e.clone(),
        second: e,
    })?;
    let len = bytes.len().next_multiple_of(BUF_ALIGN);
    let mut buf = Buf::zeroed(len);
    buf[..bytes.len()].copy_from_slice(&bytes);
    member.write(sb.slot_offset(), buf.freeze(), true).await?;
    Ok(())
}
