//! `nbraid check`'s budget of the members' 1 MiB metadata areas for the volumes the next
//! start creates: the areas each member's superblock records, then the config's new volumes
//! in file order, placed by the engine's rule (`nbraid_config::metadata_area`). The config
//! budgets fresh members itself; only the superblocks know where an existing volume's areas
//! are, so a new volume beside recorded ones is judged here.

use nbraid_config::metadata_area::{self, no_room_text, Area, AreaAsk, AreaKind};
use nbraid_config::{Config, Volume};
use nbraid_core::metadata::{Probe, Superblock, METADATA_AREA_BYTES};

/// Each member's metadata area as the next start's creates find it, by config member
/// (`None`: not looked at yet).
pub struct Areas {
    by_member: Vec<Option<Vec<(String, Area)>>>,
}

impl Areas {
    pub fn new(config: &Config) -> Areas {
        Areas {
            by_member: vec![None; config.members.len()],
        }
    }

    /// Places new volume `v`'s areas on its members (`probes`: their superblocks, by
    /// position) as its create will; `Err`: why the create is refused (nothing is placed).
    pub fn create(&mut self, config: &Config, v: &Volume, probes: &[Probe]) -> Result<(), String> {
        let ask = AreaAsk::of(v);
        let mut placed = Vec::with_capacity(v.members.len());
        for (&m, probe) in v.members.iter().zip(probes) {
            let held = self.by_member[m].get_or_insert_with(|| recorded(probe));
            let taken: Vec<Area> = held.iter().map(|(_, a)| *a).collect();
            match metadata_area::place(&taken, &ask) {
                Ok(areas) => placed.push((m, areas)),
                Err(short) => return Err(no_room_text(&config.members[m].id, short, held)),
            }
        }
        for (m, areas) in placed {
            let held = self.by_member[m].get_or_insert_with(Vec::new);
            held.extend(areas.into_iter().map(|a| (v.name.clone(), a)));
        }
        Ok(())
    }
}

/// The areas the superblock in `probe` records in its metadata area, by volume.
fn recorded(probe: &Probe) -> Vec<(String, Area)> {
    match probe {
        Probe::Superblock(sb, _) => areas_of(sb),
        _ => Vec::new(),
    }
}

/// Every area of every record in `sb` inside the metadata area: bitmaps, logs, checksum
/// areas, reshape backups.
pub fn areas_of(sb: &Superblock) -> Vec<(String, Area)> {
    let mut out = Vec::new();
    for v in &sb.volumes {
        let backup = v.reshape.as_ref().and_then(|r| r.backup_area);
        let areas = [
            (AreaKind::Bitmap, v.bitmap.map(|b| b.area)),
            (AreaKind::Log, v.ppl),
            (AreaKind::Checksums, v.checksums),
            (AreaKind::Backup, backup),
        ];
        for (kind, a) in areas {
            // Reserves before regions take none of the metadata area.
            if let Some(a) = a.filter(|a| a.offset < METADATA_AREA_BYTES) {
                let area = Area {
                    kind,
                    offset_bytes: a.offset,
                    len_bytes: a.len,
                };
                out.push((v.name.clone(), area));
            }
        }
    }
    out
}
