//! A region's checksums when its role changes member: a new member rebuilt into a failed role
//! starts from a blank area, and a replacement takes over its member's entries.
//!
//! - **New member** ([`LeafChecksums::start_blank`]): its area was cleared (every entry "no
//!   checksum"); the cache and the header state, which were the old member's, are dropped
//!   under the whole region's lock, and the member is installed inside it. From then on the
//!   rebuild's writes give every block its checksum, with the header bit made durable on the
//!   new member first (the crash rule holds from the first write).
//! - **Replacement** ([`LeafChecksums::copy_to`], then [`LeafChecksums::hand_over`]): its
//!   data is a copy of its member's, so its entries are the member's too. The area is copied
//!   while clients keep writing (header first, every bit set, so a crash before the swap
//!   distrusts the copy instead of trusting a lagging entry); pages written back to the old
//!   member meanwhile are noted, and at the swap, with the region locked and write-backs
//!   held, those are copied again and the real header written. The stall is the pages
//!   written back since the copy, not the area.

use super::table::Table;
use super::{LeafChecksums, HEADER_BYTES, PAGE_BYTES};
use crate::buf::Buf;
use crate::member::{Member, MemberResult};

impl LeafChecksums {
    /// Drops every entry and header bit held for the old member of this region (its new
    /// member's area was just cleared) and runs `install` with no write of the region and no
    /// locked read in flight, so none straddles the two members. A read checked without the
    /// lock that does finds the member changed or its entries blank and reads again under
    /// the lock (`node/leaf.rs` `vouched`); it loads no page, so none of the old
    /// member's pages enters the blank table.
    pub async fn start_blank<T>(&self, install: impl FnOnce() -> T) -> T {
        let _all = self.writes.lock(0, self.len_bytes, true).await;
        let _backs = self.store.write_backs.lock().await;
        let _header = self.store.header_lock.lock().await;
        *self.store.table() = self.blank_table();
        // A cleared area has nothing to distrust: no header to read.
        self.store.set_open();
        install()
    }

    fn blank_table(&self) -> Table {
        let old = self.store.table();
        Table::new(old.header_bits(), old.pages_per_group(), old.max_pages())
    }

    /// The newest bytes of entry page `page`: the cache's, a write-back's in flight, or the
    /// old member's.
    async fn newest_page(&self, old: &dyn Member, page: u64) -> Vec<u8> {
        let held = {
            let t = self.store.table();
            t.page_bytes(page).or_else(|| t.evicting(page))
        };
        if let Some(bytes) = held {
            return bytes;
        }
        // A page that does not read hands over no checksums (as a load takes it).
        let at = self.store.page_offset(page);
        let bytes = match old.read(at, Buf::new(PAGE_BYTES as usize)).await {
            Ok(b) => b.to_vec(),
            Err(e) => {
                tracing::warn!("{e}: checksum entry page {page} does not read; handed over blank");
                vec![0; PAGE_BYTES as usize]
            }
        };
        self.store.table().as_loaded(page, bytes)
    }

    /// Copies the area from `old` (the member serving the region) onto `new` (its
    /// replacement) while requests go on; notes the pages written back from now on for
    /// [`LeafChecksums::hand_over`].
    pub async fn copy_to(&self, old: &dyn Member, new: &dyn Member) -> MemberResult<()> {
        // After an unclean start: which groups' entries on `old` may lag.
        self.store.open(old).await?;
        {
            // No write-back in flight unnoted: one taken before the noting starts has landed.
            let _backs = self.store.write_backs.lock().await;
            self.store.table().start_noting_write_backs();
        }
        let header = vec![0xff; HEADER_BYTES as usize];
        self.store.write_header(new, &header).await?;
        for page in 0..super::entry::pages(self.len_bytes) {
            let bytes = self.newest_page(old, page).await;
            self.store.write_page(new, page, &bytes).await?;
        }
        Ok(())
    }

    /// Ends the noting [`LeafChecksums::copy_to`] started when the replacement is abandoned
    /// before [`LeafChecksums::hand_over`]: no page is noted for a hand-over that never comes.
    pub fn abandon_copy(&self) {
        self.store.table().stop_noting_write_backs();
    }

    /// Whether pages written back are being noted for a hand-over.
    #[cfg(test)]
    pub(crate) fn is_noting(&self) -> bool {
        self.store.table().is_noting_write_backs()
    }

    /// Finishes [`LeafChecksums::copy_to`]: with the region locked and write-backs held, the
    /// pages written back since are copied again, the header written as it is, and `swap`
    /// (which makes `new` the region's member) runs before anything else touches the area.
    pub async fn hand_over<T>(
        &self,
        old: &dyn Member,
        new: &dyn Member,
        swap: impl FnOnce() -> T,
    ) -> MemberResult<T> {
        let _all = self.writes.lock(0, self.len_bytes, true).await;
        let _backs = self.store.write_backs.lock().await;
        let _header = self.store.header_lock.lock().await;
        let again = self.store.table().stop_noting_write_backs();
        for page in again {
            let bytes = self.newest_page(old, page).await;
            self.store.write_page(new, page, &bytes).await?;
        }
        let header = self.store.table().header.to_bytes(HEADER_BYTES as usize);
        self.store.write_header(new, &header).await?;
        Ok(swap())
    }
}
