//! `nbraid map`: the member extents behind a logical range of a volume.

use crate::diagram::describe;
use anyhow::{anyhow, Context, Result};
use nbraid_config::{self as config, format_size, parse_size};
use nbraid_layout::{Extent, Role};
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
    stripe: Option<nbraid_layout::StripeId>,
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
    let v = config.volume(volume).ok_or_else(|| {
        let names: Vec<&str> = config.volumes.iter().map(|v| v.name.as_str()).collect();
        anyhow!(
            "{}: no volume \"{volume}\"; volumes: {}",
            file.display(),
            names.join(", ")
        )
    })?;
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
    let row = |e: &Extent| Row {
        logical: e.logical,
        len: e.len,
        member: roles.ids[e.member].clone(),
        member_path: roles.paths[e.member].clone(),
        member_index: e.member,
        member_offset: e.offset,
        role: match e.role {
            Role::Data => "data",
            Role::P => "P",
            Role::Q => "Q",
        },
        stripe: e.stripe,
        copy: e.copy,
    };
    let out = Output {
        volume: v.name.clone(),
        offset,
        length,
        data: mapping.data.iter().map(row).collect(),
        parity: mapping.parity.iter().map(row).collect(),
    };
    if json {
        return Ok(format!("{}\n", serde_json::to_string_pretty(&out)?));
    }
    // RAID 50/60 and trees may have several parity groups: name the group with the stripe.
    let groups = parity_groups(v.geometry.root());
    let mut text = format!(
        "{}: {}; {} + {} ({offset} + {length} bytes)\n",
        v.name,
        describe(&config, v),
        format_size(offset),
        format_size(length)
    );
    for note in &roles.notes {
        text.push_str(&format!("{note}\n"));
    }
    let cells = |r: &Row| -> Vec<String> {
        vec![
            r.logical.to_string(),
            r.len.to_string(),
            r.member.clone(),
            r.member_path.clone(),
            r.member_offset.to_string(),
            r.role.to_string(),
            match r.stripe {
                None => "-".into(),
                Some(s) if groups > 1 => format!("{}:{}", s.group, s.stripe),
                Some(s) => s.stripe.to_string(),
            },
            r.copy.to_string(),
        ]
    };
    let rows: Vec<Vec<String>> = out.data.iter().chain(&out.parity).map(cells).collect();
    let header = [
        "LOGICAL",
        "LENGTH",
        "MEMBER",
        "FILE",
        "MEMBER OFFSET",
        "ROLE",
        if groups > 1 { "SPAN:STRIPE" } else { "STRIPE" },
        "COPY",
    ];
    text.push_str(&config::table(&header, &rows));
    Ok(text)
}
