//! Stripe diagrams: the first strip rows of every member of a volume, one column per member,
//! cells named the way RAID articles name them (`D0 D1 P0`; mirrors repeat the chunk number
//! in each copy).

use nbraid_config::{format_size, format_size_exact, Config, Volume};
use nbraid_layout::{Level, Role};

/// The grid for `volume`: `rows` strip rows (default one parity rotation, at least 4).
pub fn draw(config: &Config, volume: &Volume, rows: Option<u64>) -> String {
    let shape = &volume.shape;
    let ids = volume.member_ids(config);
    let mut out = format!("{}: {}", volume.name, describe(volume));
    if shape.level == Level::Jbod {
        out.push_str(" — members one after another\n");
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
        return out;
    }
    let strip = shape.strip;
    let row_bytes = strip * volume.geometry.data_members() as u64;
    let default_rows = (shape.per_span() as u64).max(4);
    let rows = rows
        .unwrap_or(default_rows)
        .min(volume.capacity() / row_bytes)
        .max(1);
    let mut grid = vec![vec![String::from("."); ids.len()]; rows as usize];
    let mapping = match volume.geometry.map(0, rows * row_bytes) {
        Ok(m) => m,
        Err(e) => return format!("{out}\n  (cannot map: {e})\n"),
    };
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
    let width = grid
        .iter()
        .flatten()
        .map(|c| c.len())
        .chain(ids.iter().map(|i| i.chars().count()))
        .max()
        .unwrap_or(2);
    let per_span = if shape.level.has_spans() {
        shape.per_span()
    } else {
        ids.len()
    };
    let line = |cells: &[String]| -> String {
        let mut l = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i > 0 && i % per_span == 0 {
                l.push_str(" |");
            }
            l.push_str(&format!(" {c:<width$}"));
        }
        l.trim_end().to_string()
    };
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
    out.push_str(&format!("  row {}\n", line(&ids)));
    for (r, cells) in grid.iter().enumerate() {
        out.push_str(&format!("  {r:>3} {}\n", line(cells)));
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

/// `raid50, 2 spans × 3 members, strip 64 KiB, left-symmetric`.
pub fn describe(volume: &Volume) -> String {
    let s = &volume.shape;
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
