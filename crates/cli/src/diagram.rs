//! Stripe diagrams: the first strip rows of every member of a volume, one column per member,
//! cells named the way RAID articles name them (`D0 D1 P0`; mirrors repeat the chunk number
//! in each copy). A declared tree is drawn as an outline first, each node with its capacity
//! and the member losses it survives.

use nbraid_config::{format_size, format_size_exact, Config, Volume};
use nbraid_layout::{Level, Node, Role, STRIP_DEFAULT};

/// The grid for `volume`: `rows` strip rows (default one parity rotation, at least 4), a
/// column per role named by `ids` (the member the superblocks put in it).
pub fn draw(config: &Config, volume: &Volume, ids: &[String], rows: Option<u64>) -> String {
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    let root = volume.geometry.root();
    let mut out = format!("{}: {}", volume.name, describe(config, volume));
    if volume.shape.is_none() {
        out.push('\n');
        outline(&mut out, root, &ids, volume, "  ", "  ");
        out.push_str(volume.name.as_str());
    }
    if volume.level() == Some(Level::Jbod) {
        out.push_str(&jbod_extents(&ids, volume));
        return out;
    }
    let strip = volume.shape.as_ref().map_or_else(
        || smallest_strip(root).unwrap_or(STRIP_DEFAULT),
        |s| s.strip,
    );
    let row_bytes = strip * volume.geometry.data_members() as u64;
    let rows = row_count(rows, widest_group(root), volume.capacity(), row_bytes);
    let grid = match cell_grid(volume, strip, rows, ids.len()) {
        Ok(grid) => grid,
        Err(e) => return format!("{out}\n  (cannot map: {e})\n"),
    };
    let columns = Columns::new(root, &ids, &grid);
    let starts: Vec<u64> = volume.regions.iter().map(|r| r.start).collect();
    let same_start = starts.iter().all(|&s| s == starts[0]);
    out.push_str(&format!(
        " — first {rows} strip rows ({} per cell){}\n",
        format_size(strip),
        if same_start {
            format!(", from member byte {}", format_size_exact(starts[0]))
        } else {
            String::new()
        }
    ));
    let ids: Vec<String> = ids.iter().map(|s| s.to_string()).collect();
    out.push_str(&format!("  row {}\n", columns.line(&ids)));
    for (r, cells) in grid.iter().enumerate() {
        out.push_str(&format!("  {r:>3} {}\n", columns.line(cells)));
    }
    if !same_start {
        let s: Vec<String> = ids
            .iter()
            .zip(&starts)
            .map(|(id, s)| format!("{id} at {}", format_size_exact(*s)))
            .collect();
        out.push_str(&format!("  row 0 starts at: {}\n", s.join(", ")));
    }
    out
}

/// JBOD has no strips to draw: each member's stretch of the volume, in order.
fn jbod_extents(ids: &[&str], volume: &Volume) -> String {
    let mut out = String::from(" — members one after another\n");
    let mut logical = 0;
    for (id, r) in ids.iter().zip(&volume.regions) {
        out.push_str(&format!(
            "  {id:<6} logical {} .. {}  (member bytes {} .. {})\n",
            format_size_exact(logical),
            format_size_exact(logical + r.len),
            format_size_exact(r.start),
            format_size_exact(r.start + r.len)
        ));
        logical += r.len;
    }
    out
}

/// Rows drawn: those asked for, else one parity rotation (at least 4); never more than the
/// volume has, never none.
fn row_count(requested: Option<u64>, widest_group: usize, capacity: u64, row_bytes: u64) -> u64 {
    let default_rows = (widest_group as u64).max(4);
    requested
        .unwrap_or(default_rows)
        .min(capacity / row_bytes)
        .max(1)
}

/// The first `rows` strips of each of the `members`, each cell named for what it holds
/// (`D7`: the volume's eighth data strip; `P2`, `Q2`: stripe 2's parity; `.`: nothing).
fn cell_grid(
    volume: &Volume,
    strip: u64,
    rows: u64,
    members: usize,
) -> Result<Vec<Vec<String>>, String> {
    let mut grid = vec![vec![String::from("."); members]; rows as usize];
    let row_bytes = strip * volume.geometry.data_members() as u64;
    let mapping = volume
        .geometry
        .map(0, rows * row_bytes)
        .map_err(|e| e.to_string())?;
    for e in mapping.data.iter().chain(&mapping.parity) {
        let start = volume.regions[e.member].start;
        let mut off = e.offset - start;
        let end = off + e.len;
        while off < end {
            let row = off / strip;
            let cell_end = ((row + 1) * strip).min(end);
            if let Some(cell) = grid.get_mut(row as usize) {
                cell[e.member] = match e.role {
                    Role::Data => format!("D{}", (e.logical + (off - (e.offset - start))) / strip),
                    Role::P => format!("P{}", e.stripe.map_or(row, |s| s.stripe)),
                    Role::Q => format!("Q{}", e.stripe.map_or(row, |s| s.stripe)),
                };
            }
            off = cell_end;
        }
    }
    Ok(grid)
}

/// How the grid's lines are laid out: every cell as wide as the widest, and columns grouped
/// by the root's children when those are groups (RAID 10's mirrors, RAID 50's spans, a
/// declared tree's branches), a `|` between groups.
struct Columns {
    width: usize,
    /// By member index: the root child it is under (all 0 when the root has no groups).
    group_of: Vec<usize>,
}

impl Columns {
    fn new(root: &Node, ids: &[&str], grid: &[Vec<String>]) -> Columns {
        let width = grid
            .iter()
            .flatten()
            .map(|c| c.len())
            .chain(ids.iter().map(|i| i.chars().count()))
            .max()
            .unwrap_or(2);
        let mut group_of = vec![0usize; ids.len()];
        if root
            .children()
            .iter()
            .any(|c| !matches!(c, Node::Member(_)))
        {
            for (g, c) in root.children().iter().enumerate() {
                c.visit_members(&mut |m| group_of[m.index] = g);
            }
        }
        Columns { width, group_of }
    }

    /// One line of cells, a column per member.
    fn line(&self, cells: &[String]) -> String {
        let width = self.width;
        let mut l = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i > 0 && self.group_of[i] != self.group_of[i - 1] {
                l.push_str(" |");
            }
            l.push_str(&format!(" {c:<width$}"));
        }
        l.trim_end().to_string()
    }
}

/// `raid50, 2 spans × 3 members, strip 64 KiB, left-symmetric`; for a declared tree
/// `tree, 6 members: mirror(raid5:64KiB(d0 d1 d2), raid5:64KiB(d3 d4 d5))`.
pub fn describe(config: &Config, volume: &Volume) -> String {
    let Some(s) = &volume.shape else {
        return format!(
            "tree, {} members: {}",
            volume.members.len(),
            volume.tree_text(config)
        );
    };
    let mut d = s.level.to_string();
    if s.level.has_spans() {
        d.push_str(&format!(", {} spans × {} members", s.spans, s.per_span()));
    } else {
        d.push_str(&format!(", {} members", s.members));
    }
    if !matches!(s.level, Level::Jbod | Level::Raid1) {
        d.push_str(&format!(", strip {}", format_size(s.strip)));
    }
    if s.level.parity() > 0 {
        d.push_str(&format!(", {}", s.parity_layout));
    }
    d
}

/// One line per node, children indented under their parent with box-drawing branches:
/// the kind, its strip, capacity and fault tolerance; members by id and region.
fn outline(out: &mut String, n: &Node, ids: &[&str], v: &Volume, first: &str, rest: &str) {
    let tolerance = n.losses_to_fail().saturating_sub(1);
    let facts = format!(
        "{}, survives {tolerance} lost member{} at worst",
        format_size(n.capacity()),
        if tolerance == 1 { "" } else { "s" }
    );
    let line = match n {
        Node::Member(m) => {
            let r = &v.regions[m.index];
            format!(
                "{}  member bytes {} .. {}",
                ids[m.index],
                format_size_exact(r.start),
                format_size_exact(r.start + r.len)
            )
        }
        Node::Concat(_) => format!("concat  {facts}"),
        Node::Mirror(_) => format!("mirror  {facts}"),
        Node::Stripe(s) => format!("stripe, unit {}  {facts}", format_size(s.unit())),
        Node::Parity(g) => format!(
            "raid{}, strip {}, {}  {facts}",
            if g.parity() == 1 { 5 } else { 6 },
            format_size(g.strip()),
            g.layout()
        ),
    };
    out.push_str(&format!("{first}{line}\n"));
    let kids = n.children();
    for (i, c) in kids.iter().enumerate() {
        let last = i + 1 == kids.len();
        let (branch, under) = if last {
            ("└─ ", "   ")
        } else {
            ("├─ ", "│  ")
        };
        outline(
            out,
            c,
            ids,
            v,
            &format!("{rest}{branch}"),
            &format!("{rest}{under}"),
        );
    }
}

/// The smallest strip of any parity group or stripe of members: the grid's cell.
fn smallest_strip(n: &Node) -> Option<u64> {
    let own = match n {
        Node::Parity(g) => Some(g.strip()),
        Node::Stripe(s) if n.children().iter().all(|c| matches!(c, Node::Member(_))) => {
            Some(s.unit())
        }
        _ => None,
    };
    n.children()
        .iter()
        .filter_map(smallest_strip)
        .chain(own)
        .min()
}

/// The most children of any parity group (one parity rotation is that many rows).
fn widest_group(n: &Node) -> usize {
    let own = match n {
        Node::Parity(g) => g.children().len(),
        _ => 0,
    };
    n.children().iter().map(widest_group).fold(own, usize::max)
}

#[cfg(test)]
mod tests {
    use super::row_count;

    #[test]
    fn rows_default_to_one_rotation_and_stay_inside_the_volume() {
        // 6 rows of 1 KiB: one rotation of a 5-wide group, 4 for narrower ones.
        assert_eq!(row_count(None, 5, 6 << 10, 1 << 10), 5);
        assert_eq!(row_count(None, 0, 6 << 10, 1 << 10), 4);
        assert_eq!(row_count(Some(9), 5, 6 << 10, 1 << 10), 6);
        assert_eq!(row_count(Some(0), 5, 6 << 10, 1 << 10), 1);
        assert_eq!(row_count(None, 5, 512, 1 << 10), 1);
    }
}
