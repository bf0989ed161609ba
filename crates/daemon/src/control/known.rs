//! The ids a volume's members and spares go by ([`KnownMembers`]): config ids, and those
//! given at run time.
//!
//! Only a name book: it never keeps a member open. The array (roles, spares) and the
//! departed list own the handles; a member that leaves them (removed, refused, a failed
//! `add`) is closed at once, so another tool can open the device (as after
//! `mdadm --remove`). Its entry stays, by id and path: `status` still names it, and the same
//! file added back goes by the same id.

use nbraid_assembly::adopt::Known;
use nbraid_core::Member;
use std::sync::{Arc, Weak};

/// One member or spare known by id.
struct Entry {
    id: String,
    /// The member's name (its path) when it was learnt.
    name: String,
    /// The member, while something else holds it.
    member: Weak<dyn Member>,
}

impl Entry {
    fn is(&self, member: &Arc<dyn Member>) -> bool {
        // The weak pointer keeps its allocation: no other member can reuse the address.
        std::ptr::addr_eq(self.member.as_ptr(), Arc::as_ptr(member))
    }

    fn is_held(&self) -> bool {
        self.member.strong_count() > 0
    }
}

/// A volume's members and spares by id (see the module).
#[derive(Default)]
pub(super) struct KnownMembers {
    entries: Vec<Entry>,
}

impl KnownMembers {
    /// The start's members and spares; the handles in `known` are not kept.
    pub fn new(known: Vec<Known>) -> Self {
        let mut book = KnownMembers::default();
        for k in known {
            book.learn(&k.id, &k.member);
        }
        book
    }

    /// Every id known (held or not).
    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|e| e.id.as_str())
    }

    /// The id `member` goes by, if it is known.
    pub fn id_of(&self, member: &Arc<dyn Member>) -> Option<&str> {
        let entry = self.entries.iter().find(|e| e.is(member))?;
        Some(entry.id.as_str())
    }

    /// The path of the member known by `id`, held or not.
    pub fn path_of(&self, id: &str) -> Option<&str> {
        let entry = self.entries.iter().find(|e| e.id == id)?;
        Some(entry.name.as_str())
    }

    /// A member still held (a departed one) whose path `is_file` accepts.
    pub fn held(&self, is_file: &dyn Fn(&str) -> bool) -> Option<Arc<dyn Member>> {
        let entry = self.entries.iter().find(|e| is_file(&e.name))?;
        entry.member.upgrade()
    }

    /// Remembers `member` by `id`. One known already keeps its id; a member opened afresh on
    /// the path of one let go takes that one's id (and place). True when `id` is a new entry.
    pub fn learn(&mut self, id: &str, member: &Arc<dyn Member>) -> bool {
        if self.id_of(member).is_some() {
            return false;
        }
        let name = member.name();
        let again = |e: &&mut Entry| !e.is_held() && e.name == name;
        if let Some(entry) = self.entries.iter_mut().find(again) {
            entry.member = Arc::downgrade(member);
            return false;
        }
        self.entries.push(Entry {
            id: id.to_string(),
            name: name.to_string(),
            member: Arc::downgrade(member),
        });
        true
    }

    /// Drops the entry of `member` (one [`KnownMembers::learn`] just made for a member the
    /// array then refused): no id is left behind for a file that never joined.
    pub fn unlearn(&mut self, member: &Arc<dyn Member>) {
        self.entries.retain(|e| !e.is(member));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nbraid_core::MemoryMember;

    fn member(name: &str) -> Arc<dyn Member> {
        Arc::new(MemoryMember::new(name, 1 << 20))
    }

    #[test]
    fn the_book_holds_no_member_open() {
        let a = member("/dev/a");
        let mut book = KnownMembers::new(vec![Known {
            id: "a".into(),
            member: a.clone(),
        }]);
        assert_eq!(Arc::strong_count(&a), 1);
        assert_eq!(book.id_of(&a), Some("a"));
        assert!(book.held(&|p| p == "/dev/a").is_some());
        drop(a);
        // Let go: named still, but nothing to hand out again.
        assert!(book.held(&|p| p == "/dev/a").is_none());
        assert_eq!(book.path_of("a"), Some("/dev/a"));
        // Opened afresh on the same path: the same id.
        let again = member("/dev/a");
        book.learn("dev-a", &again);
        assert_eq!(book.id_of(&again), Some("a"));
        assert_eq!(book.ids().collect::<Vec<_>>(), ["a"]);
    }

    #[test]
    fn a_held_member_on_the_same_path_is_another_member() {
        let a = member("/dev/a");
        let other = member("/dev/a");
        let mut book = KnownMembers::default();
        book.learn("a", &a);
        book.learn("a2", &other);
        book.learn("ignored", &a);
        assert_eq!(book.id_of(&a), Some("a"));
        assert_eq!(book.id_of(&other), Some("a2"));
    }

    #[test]
    fn an_entry_unlearnt_leaves_no_id() {
        let a = member("/dev/a");
        let mut book = KnownMembers::default();
        assert!(book.learn("a", &a));
        assert!(!book.learn("again", &a));
        book.unlearn(&a);
        assert_eq!(book.id_of(&a), None);
        assert_eq!(book.ids().count(), 0);
    }
}
