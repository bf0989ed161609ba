//! Charts like the reviews' figures: one line per series (queue depth, level, target), y
//! against block size, read share, queue depth, member count or strip size. SVG or PNG by
//! the file's extension.

use super::output::Series;
use anyhow::{bail, Context, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;

/// What the x axis shows; sizes and depths are drawn on a log₂ scale.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XAxis {
    BlockSize,
    ReadShare,
    QueueDepth,
    Members,
    Strip,
}

impl XAxis {
    fn title(self) -> &'static str {
        match self {
            XAxis::BlockSize => "block size",
            XAxis::ReadShare => "read share, %",
            XAxis::QueueDepth => "queue depth",
            XAxis::Members => "members",
            XAxis::Strip => "strip size",
        }
    }

    fn log2(self) -> bool {
        matches!(self, XAxis::BlockSize | XAxis::QueueDepth | XAxis::Strip)
    }

    fn label(self, v: f64) -> String {
        match self {
            XAxis::BlockSize | XAxis::Strip => super::output::size_label(v.exp2().round() as u64),
            XAxis::QueueDepth => format!("{}", v.exp2().round()),
            _ => format!("{v}"),
        }
    }
}

pub struct Chart<'a> {
    pub title: &'a str,
    pub x: XAxis,
    pub y_title: &'a str,
    pub series: &'a [Series],
}

/// Draws `chart` to `file` (`.svg` or `.png`).
pub fn draw(chart: &Chart, file: &Path) -> Result<()> {
    let ext = file.extension().and_then(|e| e.to_str()).unwrap_or("");
    let size = (960, 600);
    match ext {
        "svg" => plot(chart, SVGBackend::new(file, size).into_drawing_area()),
        "png" => plot(chart, BitMapBackend::new(file, size).into_drawing_area()),
        _ => bail!("{}: a chart is .svg or .png", file.display()),
    }
    .with_context(|| format!("drawing {}", file.display()))
}

fn plot<DB: DrawingBackend>(chart: &Chart, area: DrawingArea<DB, Shift>) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow::anyhow!("{e:?}");
    area.fill(&WHITE).map_err(err)?;
    let tx = |x: f64| {
        if chart.x.log2() {
            x.max(1e-9).log2()
        } else {
            x
        }
    };
    let pts: Vec<(f64, f64)> = chart
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|&(x, y)| (tx(x), y)))
        .collect();
    if pts.is_empty() {
        bail!("nothing to draw");
    }
    let (mut x0, mut x1) = pts
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.0), b.max(p.0)));
    if x1 <= x0 {
        x0 -= 1.0;
        x1 += 1.0;
    }
    let y1 = pts.iter().map(|p| p.1).fold(0.0, f64::max).max(1e-9) * 1.08;
    let mut c = ChartBuilder::on(&area)
        .caption(chart.title, ("sans-serif", 22))
        .margin(14)
        .x_label_area_size(44)
        .y_label_area_size(70)
        .build_cartesian_2d(x0..x1, 0.0..y1)
        .map_err(err)?;
    let x = chart.x;
    c.configure_mesh()
        .x_desc(x.title())
        .y_desc(chart.y_title)
        .x_label_formatter(&|v| x.label(*v))
        .x_labels(match x {
            // One label per power of two, or per member.
            _ if x.log2() => (x1 - x0) as usize + 1,
            XAxis::Members => ((x1 - x0) as usize + 1).min(25),
            _ => 12,
        })
        .draw()
        .map_err(err)?;
    // The theory line last, so it shows over the curve that follows it.
    let mut order: Vec<(usize, &Series)> = chart.series.iter().enumerate().collect();
    order.sort_by_key(|(_, s)| s.name == super::output::THEORY);
    for (i, s) in order {
        let color = Palette99::pick(i).to_rgba();
        let style = if s.name == super::output::THEORY {
            ShapeStyle::from(&BLACK.mix(0.7)).stroke_width(1)
        } else {
            ShapeStyle::from(&color).stroke_width(2)
        };
        let line: Vec<(f64, f64)> = s.points.iter().map(|&(x, y)| (tx(x), y)).collect();
        c.draw_series(LineSeries::new(line.clone(), style))
            .map_err(err)?
            .label(s.name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
        c.draw_series(line.into_iter().map(|p| Circle::new(p, 3, style.filled())))
            .map_err(err)?;
    }
    c.configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(err)?;
    area.present().map_err(err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_svg_and_png() {
        let dir = tempfile::tempdir().unwrap();
        let series = [
            Series {
                name: "RAID 0".into(),
                points: vec![(1.0, 100.0), (2.0, 200.0), (4.0, 390.0)],
            },
            Series {
                name: super::super::output::THEORY.into(),
                points: vec![(1.0, 100.0), (4.0, 400.0)],
            },
        ];
        let chart = Chart {
            title: "t",
            x: XAxis::Members,
            y_title: "MB/s",
            series: &series,
        };
        for name in ["c.svg", "c.png"] {
            let f = dir.path().join(name);
            draw(&chart, &f).unwrap();
            assert!(std::fs::metadata(&f).unwrap().len() > 1000);
        }
        let svg = std::fs::read_to_string(dir.path().join("c.svg")).unwrap();
        assert!(svg.contains("RAID 0") && svg.contains("members"));
        assert!(draw(&chart, &dir.path().join("c.gif")).is_err());
    }
}
