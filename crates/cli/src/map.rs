//! `nbraid map`: the member extents behind a logical range of a volume.

use crate::diagram::describe;
use crate::roles::Roles;
use anyhow::{anyhow, Context, Result};
use nbraid_config::{self as config, format_size, parse_size, Config, Volume};
use nbraid_layout::{Extent, Role, StripeId};
use serde::Serialize;
use std::path::Path;

/// One extent with its member named: the id and file the superblocks put in its role.
#[derive(Serialize)]
struct Row {
    logical: u64,
    len: u64,
    member: String,
    member_path: String,
    member_index: usize,
    member_offset: u64,
    /// `data`, `P` or `Q`, as the table writes it.
    role: &'static str,
    stripe: Option<StripeId>,
    copy: u32,
}

#[derive(Serialize)]
struct Output {
    volume: String,
    offset: u64,
    length: u64,
    data: Vec<Row>,
    parity: Vec<Row>,
}

/// Parity groups in a tree.
fn parity_groups(n: &nbraid_layout::Node) -> usize {
    let own = usize::from(matches!(n, nbraid_layout::Node::Parity(_)));
    own + n.children().iter().map(parity_groups).sum::<usize>()
}

pub fn run(
    file: &Path,
    volume: &str,
    offset: &str,
    length: Option<&str>,
    json: bool,
) -> Result<String> {
    let config = nbraid_assembly::pins::load(file)?;
    let v = find_volume(&config, volume, file)?;
    let offset = parse_size(offset).context("OFFSET")?;
    let length = match length {
        Some(l) => parse_size(l).context("LENGTH")?,
        None => u64::from(v.block_size),
    };
    let mapping = v
        .geometry
        .map(offset, length)
        .with_context(|| format!("volume \"{}\" ({} bytes)", v.name, v.capacity()))?;
    let record = crate::records::look(&config)
        .into_iter()
        .find(|r| r.volume == v.name);
    let roles = crate::roles::of(&config, v, record.as_ref())?;
    let out = Output {
        volume: v.name.clone(),
        offset,
        length,
        data: mapping.data.iter().map(|e| Row::of(e, &roles)).collect(),
        parity: mapping.parity.iter().map(|e| Row::of(e, &roles)).collect(),
    };
    if json {
        return Ok(format!("{}\n", serde_json::to_string_pretty(&out)?));
    }
    Ok(text(&config, v, &out, &roles.notes))
}

/// Volume `name` of the config read from `file`, or an error naming the volumes it has.
fn find_volume<'a>(config: &'a Config, name: &str, file: &Path) -> Result<&'a Volume> {
    config.volume(name).ok_or_else(|| {
        let names: Vec<&str> = config.volumes.iter().map(|v| v.name.as_str()).collect();
        anyhow!(
            "{}: no volume \"{name}\"; volumes: {}",
            file.display(),
            names.join(", ")
        )
    })
}

impl Row {
    /// Extent `e`, its member named by `roles`.
    fn of(e: &Extent, roles: &Roles) -> Row {
        Row {
            logical: e.logical,
            len: e.len,
            member: roles.ids[e.member].clone(),
            member_path: roles.paths[e.member].clone(),
            member_index: e.member,
            member_offset: e.offset,
            role: role_name(e.role),
            stripe: e.stripe,
            copy: e.copy,
        }
    }

    /// The row's cells in the table (`grouped`: the volume has several parity groups).
    fn cells(&self, grouped: bool) -> Vec<String> {
        vec![
            self.logical.to_string(),
            self.len.to_string(),
            self.member.clone(),
            self.member_path.clone(),
            self.member_offset.to_string(),
            self.role.to_string(),
            stripe_cell(self.stripe, grouped),
            self.copy.to_string(),
        ]
    }
}

/// The mapping for people: a head line, the notes on who holds which role, then one table
/// row per extent, data first.
fn text(config: &Config, v: &Volume, out: &Output, notes: &[String]) -> String {
    // RAID 50/60 and trees may have several parity groups: name the group with the stripe.
    let grouped = parity_groups(v.geometry.root()) > 1;
    let mut text = format!(
        "{}: {}; {} + {} ({} + {} bytes)\n",
        v.name,
        describe(config, v),
        format_size(out.offset),
        format_size(out.length),
        out.offset,
        out.length
    );
    for note in notes {
        text.push_str(&format!("{note}\n"));
    }
    let rows: Vec<Vec<String>> = (out.data.iter().chain(&out.parity))
        .map(|r| r.cells(grouped))
        .collect();
    let header = [
        "LOGICAL",
        "LENGTH",
        "MEMBER",
        "FILE",
        "MEMBER OFFSET",
        "ROLE",
        if grouped { "SPAN:STRIPE" } else { "STRIPE" },
        "COPY",
    ];
    text.push_str(&config::table(&header, &rows));
    text
}

/// `data`, `P` or `Q`, as the table writes a role.
fn role_name(role: Role) -> &'static str {
    match role {
        Role::Data => "data",
        Role::P => "P",
        Role::Q => "Q",
    }
}

/// A stripe as the table writes it: `-` for none (a mirror or a concat), `group:stripe`
/// where the volume has several parity groups, the stripe alone where it has one.
fn stripe_cell(stripe: Option<StripeId>, grouped: bool) -> String {
    match stripe {
        None => "-".into(),
        Some(s) if grouped => format!("{}:{}", s.group, s.stripe),
        Some(s) => s.stripe.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stripes_are_named_with_their_group_only_where_there_are_several() {
        let s = StripeId {
            group: 1,
            stripe: 7,
        };
        assert_eq!(stripe_cell(Some(s), true), "1:7");
        assert_eq!(stripe_cell(Some(s), false), "7");
        assert_eq!(stripe_cell(None, true), "-");
        assert_eq!(
            [Role::Data, Role::P, Role::Q].map(role_name),
            ["data", "P", "Q"]
        );
    }
}
