//! Whether `nbraid fail` may fail a member: never the last copy of any data unless the
//! operator says `--force` (mdadm refuses the same). The tree's computed tolerance decides
//! ([`Node::may_lose`], the rule by which the engine also keeps members past their bad-block
//! limit): a fail is refused when the volume could not read all its data with this member
//! lost beside those already unreadable (failed, or still being rebuilt) — RAID 1 failing
//! its last half, RAID 10 both halves of one mirror, RAID 6 a third member.

use nbraid_layout::Node;

/// Why a fail is refused (`None`: it may go ahead). `unreadable(m)`: member `m` is failed or
/// not yet current; `index`: the member to fail; `id(m)`: the id member `m` goes by (the
/// admin names members by id, never by index); `force`: the operator's `--force`.
pub fn refuse_fail(
    tree: &Node,
    unreadable: &dyn Fn(usize) -> bool,
    id: &dyn Fn(usize) -> String,
    index: usize,
    force: bool,
) -> Option<String> {
    if force || tree.may_lose(index, unreadable) {
        return None;
    }
    let down: Vec<String> = (0..=max_index(tree))
        .filter(|&m| unreadable(m))
        .map(id)
        .collect();
    let beside = match down.is_empty() {
        true => String::new(),
        false => format!(" beside {} (failed or being rebuilt)", down.join(", ")),
    };
    Some(format!(
        "failing {}{beside} would lose data: some of it would have no readable \
         copy left (more lost than the layout tolerates); add --force to fail it anyway",
        id(index)
    ))
}

fn max_index(tree: &Node) -> usize {
    tree.member_indices().into_iter().max().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nbraid_layout::ParityLayout;

    const MIB: u64 = 1 << 20;

    fn members(first: usize, n: usize) -> Vec<Node> {
        (first..first + n)
            .map(|i| Node::member(i, MIB, 8 * MIB))
            .collect()
    }

    fn id(m: usize) -> String {
        format!("d{m}")
    }

    fn check(tree: &Node, down: &[usize], index: usize) -> bool {
        refuse_fail(tree, &|m| down.contains(&m), &id, index, false).is_none()
    }

    #[test]
    fn the_last_copy_is_not_failed_unless_forced() {
        let raid1 = Node::mirror(members(0, 2)).unwrap();
        assert!(check(&raid1, &[], 0));
        assert!(!check(&raid1, &[0], 1));
        assert!(refuse_fail(&raid1, &|m| m == 0, &id, 1, true).is_none());
        // Failing a member already failed changes nothing.
        assert!(check(&raid1, &[0], 0));
        let text = refuse_fail(&raid1, &|m| m == 0, &id, 1, false).unwrap();
        assert!(
            text.starts_with("failing d1 beside d0 (failed or being rebuilt)")
                && text.contains("--force"),
            "{text}"
        );
    }

    #[test]
    fn the_tree_decides_not_a_count() {
        // RAID 10: one half of each mirror may go, not both halves of one.
        let pairs = (0..2)
            .map(|k| Node::mirror(members(2 * k, 2)).unwrap())
            .collect();
        let raid10 = Node::stripe(64 << 10, pairs).unwrap();
        assert!(check(&raid10, &[0], 2));
        assert!(!check(&raid10, &[0], 1));
        // RAID 6: two may go, not a third.
        let raid6 = Node::parity(64 << 10, 2, ParityLayout::default(), members(0, 5)).unwrap();
        assert!(check(&raid6, &[0], 1));
        assert!(!check(&raid6, &[0, 1], 2));
        // RAID 0: nothing may go.
        let raid0 = Node::stripe(64 << 10, members(0, 2)).unwrap();
        assert!(!check(&raid0, &[], 0));
    }
}
