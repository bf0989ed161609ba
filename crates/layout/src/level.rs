//! Named RAID levels and the volume shape a config asks for, turned into a [`Node`] tree.

use crate::{LayoutError, Node, ParityLayout};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Smallest and largest strip size a volume may use (both powers of two).
pub const STRIP_MIN: u64 = 4 << 10;
pub const STRIP_MAX: u64 = 16 << 20;
/// md's and most controllers' default strip.
pub const STRIP_DEFAULT: u64 = 64 << 10;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// Concatenation: members one after another, no redundancy.
    Jbod,
    Raid0,
    /// n-way mirror.
    Raid1,
    Raid5,
    Raid6,
    /// Stripe over mirrors (`spans` mirror groups).
    Raid10,
    /// Stripe over RAID 5 spans.
    Raid50,
    /// Stripe over RAID 6 spans.
    Raid60,
}

impl Level {
    pub const ALL: [Level; 8] = [
        Level::Jbod,
        Level::Raid0,
        Level::Raid1,
        Level::Raid5,
        Level::Raid6,
        Level::Raid10,
        Level::Raid50,
        Level::Raid60,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Level::Jbod => "jbod",
            Level::Raid0 => "raid0",
            Level::Raid1 => "raid1",
            Level::Raid5 => "raid5",
            Level::Raid6 => "raid6",
            Level::Raid10 => "raid10",
            Level::Raid50 => "raid50",
            Level::Raid60 => "raid60",
        }
    }

    /// Parity chunks per stripe of each span (0 for the levels without parity).
    pub fn parity(self) -> usize {
        match self {
            Level::Raid5 | Level::Raid50 => 1,
            Level::Raid6 | Level::Raid60 => 2,
            _ => 0,
        }
    }

    /// Whether the level is striped over spans, so `spans` means something.
    pub fn has_spans(self) -> bool {
        matches!(self, Level::Raid10 | Level::Raid50 | Level::Raid60)
    }

    /// Fewest members of one span (or of the whole volume for the levels without spans).
    fn min_per_span(self) -> usize {
        match self {
            Level::Jbod => 1,
            Level::Raid0 | Level::Raid1 | Level::Raid10 => 2,
            Level::Raid5 | Level::Raid50 => 3,
            Level::Raid6 | Level::Raid60 => 4,
        }
    }

    /// Spans used when the config does not say: 2-way mirrors for RAID 10, two spans for 50/60.
    pub fn default_spans(self, members: usize) -> usize {
        match self {
            Level::Raid10 => (members / 2).max(1),
            Level::Raid50 | Level::Raid60 => 2,
            _ => 1,
        }
    }

    /// Fewest members the level accepts (with its default spans).
    pub fn min_members(self) -> usize {
        if self.has_spans() {
            2 * self.min_per_span()
        } else {
            self.min_per_span()
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Level {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let lower = s.to_ascii_lowercase();
        let alias = match lower.as_str() {
            "concat" | "linear" => "jbod",
            "raid1+0" | "raid1_0" => "raid10",
            "raid5+0" => "raid50",
            "raid6+0" => "raid60",
            other => other,
        };
        Level::ALL
            .into_iter()
            .find(|l| l.name() == alias)
            .ok_or_else(|| {
                format!("unknown level `{s}`; valid: jbod (concat), raid0, raid1, raid5, raid6, raid10, raid50, raid60")
            })
    }
}

/// A member's slice that one volume uses: `len` bytes from byte `start` of the member.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Region {
    pub start: u64,
    pub len: u64,
}

/// What a config asks of a volume, validated: the level, how many members, spans, strip and
/// parity rotation. Member sizes come later, as regions.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shape {
    pub level: Level,
    pub members: usize,
    pub spans: usize,
    pub strip: u64,
    pub parity_layout: ParityLayout,
}

impl Shape {
    /// Validates a shape. `spans = None` takes the level's default.
    pub fn new(
        level: Level,
        members: usize,
        spans: Option<usize>,
        strip: u64,
        parity_layout: ParityLayout,
    ) -> Result<Shape, LayoutError> {
        if !strip.is_power_of_two() || !(STRIP_MIN..=STRIP_MAX).contains(&strip) {
            return Err(LayoutError::BadStripSize(strip));
        }
        let spans = match spans {
            Some(s) if !level.has_spans() && s != 1 => {
                return Err(LayoutError::SpansNotAllowed { level, spans: s })
            }
            Some(s) => s,
            None => level.default_spans(members),
        };
        if members < level.min_members() {
            return Err(LayoutError::TooFewMembers {
                level,
                min: level.min_members(),
                got: members,
            });
        }
        if spans == 0 || !members.is_multiple_of(spans) || (level.has_spans() && spans < 2) {
            return Err(LayoutError::SpansDontDivide { members, spans });
        }
        let per_span = members / spans;
        if per_span < level.min_per_span() {
            return Err(LayoutError::SpanTooSmall {
                level,
                spans,
                min: level.min_per_span(),
                per_span,
            });
        }
        Ok(Shape {
            level,
            members,
            spans,
            strip,
            parity_layout,
        })
    }

    pub fn per_span(&self) -> usize {
        self.members / self.spans
    }

    /// Members whose bytes hold distinct data (capacity = this × usable bytes per member).
    pub fn data_members(&self) -> usize {
        match self.level {
            Level::Jbod | Level::Raid0 => self.members,
            Level::Raid1 => 1,
            Level::Raid10 => self.spans,
            Level::Raid5 | Level::Raid6 | Level::Raid50 | Level::Raid60 => {
                self.spans * (self.per_span() - self.level.parity())
            }
        }
    }

    /// Bytes each member must give for a volume of `capacity` bytes (rounded up to whole
    /// strips). JBOD members give unequal amounts; there this is the total to fill in order.
    pub fn member_len_for(&self, capacity: u64) -> u64 {
        if self.level == Level::Jbod {
            return capacity;
        }
        let per_member = capacity.div_ceil(self.data_members() as u64);
        let strips = per_member.div_ceil(self.strip);
        // RAID 50/60 stripe whole parity stripes across spans, so every span gets whole strips.
        strips * self.strip
    }

    /// Builds the tree over one region per member (in the volume's member order).
    pub fn build(&self, regions: &[Region]) -> Result<Node, LayoutError> {
        if regions.len() != self.members {
            return Err(LayoutError::RegionCount {
                expected: self.members,
                got: regions.len(),
            });
        }
        if self.level != Level::Jbod {
            if let Some((member, r)) = regions.iter().enumerate().find(|(_, r)| r.len < self.strip)
            {
                return Err(LayoutError::RegionTooSmall {
                    member,
                    len: r.len,
                    strip: self.strip,
                });
            }
        }
        let leaves: Vec<Node> = regions
            .iter()
            .enumerate()
            .map(|(i, r)| {
                // Every level but JBOD uses whole strips of each member.
                let len = if self.level == Level::Jbod {
                    r.len
                } else {
                    r.len / self.strip * self.strip
                };
                Node::member(i, r.start, len)
            })
            .collect();
        let spans = |leaves: Vec<Node>| -> Vec<Vec<Node>> {
            let per = self.per_span();
            let mut out: Vec<Vec<Node>> = Vec::new();
            for (i, leaf) in leaves.into_iter().enumerate() {
                if i % per == 0 {
                    out.push(Vec::new());
                }
                out.last_mut().expect("pushed above").push(leaf);
            }
            out
        };
        let strip = self.strip;
        let layout = self.parity_layout;
        match self.level {
            Level::Jbod => Node::concat(leaves),
            Level::Raid0 => Node::stripe(strip, leaves),
            Level::Raid1 => Node::mirror(leaves),
            Level::Raid5 => Node::parity(strip, 1, layout, leaves),
            Level::Raid6 => Node::parity(strip, 2, layout, leaves),
            Level::Raid10 => {
                let mirrors = spans(leaves)
                    .into_iter()
                    .map(Node::mirror)
                    .collect::<Result<Vec<_>, _>>()?;
                Node::stripe(strip, mirrors)
            }
            Level::Raid50 | Level::Raid60 => {
                let p = self.level.parity();
                let groups = spans(leaves)
                    .into_iter()
                    .map(|g| Node::parity(strip, p, layout, g))
                    .collect::<Result<Vec<_>, _>>()?;
                // The outer stripe unit is one full stripe of a span, so a span's stripe is
                // always written whole by a full-width write.
                let unit = strip * (self.per_span() - p) as u64;
                Node::stripe(unit, groups)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(level: Level, members: usize, spans: Option<usize>, strip: u64) -> String {
        match Shape::new(level, members, spans, strip, ParityLayout::default()) {
            Ok(s) => format!("ok {}x{}", s.spans, s.per_span()),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn validates_members_spans_and_strip() {
        assert_eq!(
            shape(Level::Raid5, 2, None, STRIP_DEFAULT),
            "raid5 needs at least 3 members, got 2"
        );
        assert_eq!(
            shape(Level::Raid60, 6, None, STRIP_DEFAULT),
            "raid60 needs at least 8 members, got 6"
        );
        assert_eq!(
            shape(Level::Raid50, 9, Some(2), STRIP_DEFAULT),
            "9 members cannot be divided into 2 spans: spans must be at least 2 and divide the member count evenly"
        );
        assert_eq!(
            shape(Level::Raid50, 8, Some(4), STRIP_DEFAULT),
            "raid50 with 4 spans needs at least 3 members per span, got 2"
        );
        assert_eq!(
            shape(Level::Raid5, 6, Some(2), STRIP_DEFAULT),
            "raid5 takes no `spans` (only raid10, raid50 and raid60 are striped over spans); got spans = 2"
        );
        assert_eq!(
            shape(Level::Raid0, 2, None, 48 << 10),
            "strip size 49152 bytes is not a power of two between 4 KiB and 16 MiB"
        );
        assert_eq!(
            shape(Level::Raid0, 2, None, 32 << 20),
            "strip size 33554432 bytes is not a power of two between 4 KiB and 16 MiB"
        );
        assert_eq!(shape(Level::Raid10, 6, None, STRIP_DEFAULT), "ok 3x2");
        assert_eq!(shape(Level::Raid10, 6, Some(2), STRIP_DEFAULT), "ok 2x3");
        assert_eq!(shape(Level::Raid60, 24, Some(6), STRIP_MIN), "ok 6x4");
        assert_eq!(shape(Level::Raid1, 3, Some(1), STRIP_MAX), "ok 1x3");
    }

    #[test]
    fn level_names_parse_with_helpful_errors() {
        assert_eq!("RAID10".parse::<Level>(), Ok(Level::Raid10));
        assert_eq!("concat".parse::<Level>(), Ok(Level::Jbod));
        let err = "raid7".parse::<Level>().unwrap_err();
        assert!(
            err.contains("unknown level `raid7`") && err.contains("raid60"),
            "{err}"
        );
        let err = "diagonal".parse::<ParityLayout>().unwrap_err();
        assert!(err.contains("left-symmetric"), "{err}");
    }

    #[test]
    fn member_len_for_rounds_up_to_strips() {
        let s = Shape::new(Level::Raid5, 4, None, 65536, ParityLayout::default()).unwrap();
        // 3 data members: 1 MiB needs 349526 bytes each → 6 strips.
        assert_eq!(s.member_len_for(1 << 20), 6 * 65536);
        let r = s
            .build(
                &[Region {
                    start: 0,
                    len: 6 * 65536,
                }; 4],
            )
            .unwrap();
        assert!(r.capacity() >= 1 << 20);
    }
}
