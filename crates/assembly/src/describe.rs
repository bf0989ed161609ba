//! A volume in one line, for NBD_INFO_DESCRIPTION and the start-up listing.

use nbraid_config::{Config, Volume};

/// One line for NBD_INFO_DESCRIPTION and the start-up listing.
pub fn describe(config: &Config, v: &Volume) -> String {
    let Some(shape) = &v.shape else {
        return format!(
            "nbraid tree {} ({} data members)",
            v.tree_text(config),
            v.geometry.data_members()
        );
    };
    let spans = if shape.level.has_spans() {
        format!(", {} spans", shape.spans)
    } else {
        String::new()
    };
    format!(
        "nbraid {}{spans} over {} ({})",
        shape.level,
        v.member_ids(config).join(" "),
        shape_words(shape),
    )
}

/// `3 data members, strip 64 KiB`; `3 copies` for a mirror, `concatenated` for JBOD: the
/// shape words of an export's description.
pub fn shape_words(shape: &nbraid_layout::Shape) -> String {
    use nbraid_layout::Level;
    match shape.level {
        Level::Raid1 => format!("{} copies", shape.members),
        Level::Jbod => "concatenated".into(),
        _ => {
            let n = shape.data_members();
            let members = if n == 1 {
                "data member"
            } else {
                "data members"
            };
            format!(
                "{n} {members}, strip {}",
                nbraid_config::format_size(shape.strip)
            )
        }
    }
}
