//! The SVG chart: throughput (MB/s, log scale) by record size, one line per target, one panel
//! per phase. plotters' SVG backend writes text as `<text>` elements, so no font is needed.

use std::path::Path;

use anyhow::{anyhow, Result};
use plotters::prelude::*;

use super::Report;
use crate::targets::TargetKind;
use crate::workload::{format_size, Phase};

const PANELS: [Phase; 5] = [
    Phase::WriteSingle,
    Phase::WriteBatch,
    Phase::RangeWhole,
    Phase::RangeSub,
    Phase::PointRead,
];

fn color(kind: TargetKind) -> RGBColor {
    match kind {
        TargetKind::Tsblob => RGBColor(0xd6, 0x27, 0x28),
        TargetKind::Minio => RGBColor(0x1f, 0x77, 0xb4),
        TargetKind::Reductstore => RGBColor(0x2c, 0xa0, 0x2c),
        TargetKind::Limit => RGBColor(0x7f, 0x7f, 0x7f),
        TargetKind::LimitStore => RGBColor(0xbc, 0xbd, 0x22),
    }
}

/// Writes the chart to `path`.
pub fn write(report: &Report, path: &Path) -> Result<()> {
    let err = |e: &dyn std::fmt::Display| anyhow!("cannot draw the chart {}: {e}", path.display());
    let mut sizes: Vec<u64> = report.cells.iter().map(|c| c.size).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let panels: Vec<Phase> = PANELS
        .into_iter()
        .filter(|p| {
            report
                .cells
                .iter()
                .any(|c| c.phase == *p && c.result.is_some())
        })
        .collect();
    let rows = panels.len().div_ceil(2).max(1);
    let root = SVGBackend::new(path, (1200, 360 * rows as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let areas = root.split_evenly((rows, 2));
    for (phase, area) in panels.iter().zip(areas.iter()) {
        let points = |kind: TargetKind| -> Vec<(f64, f64)> {
            sizes
                .iter()
                .enumerate()
                .filter_map(|(i, s)| {
                    let cell = report
                        .cells
                        .iter()
                        .find(|c| c.phase == *phase && c.size == *s && c.target == kind)?;
                    let mbps = cell.result.as_ref()?.mb_per_s;
                    (mbps > 0.0).then_some((i as f64, mbps))
                })
                .collect()
        };
        let all: Vec<f64> = report
            .targets
            .iter()
            .flat_map(|t| points(t.kind))
            .map(|p| p.1)
            .collect();
        let lo = all.iter().copied().fold(f64::INFINITY, f64::min).min(1.0) / 2.0;
        let hi = all.iter().copied().fold(0.0, f64::max).max(10.0) * 2.0;
        let mut chart = ChartBuilder::on(area)
            .caption(
                format!("{} — MB/s by record size", phase.name()),
                ("sans-serif", 18),
            )
            .margin(12)
            .x_label_area_size(30)
            .y_label_area_size(60)
            .build_cartesian_2d(-0.3f64..(sizes.len() as f64 - 0.7), (lo..hi).log_scale())
            .map_err(|e| err(&e))?;
        let sizes_for_labels = sizes.clone();
        chart
            .configure_mesh()
            .x_labels(sizes.len())
            .x_label_formatter(&move |x| {
                let i = x.round();
                if (x - i).abs() < 0.01 && i >= 0.0 {
                    sizes_for_labels
                        .get(i as usize)
                        .map(|s| format_size(*s))
                        .unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .y_desc("MB/s")
            .draw()
            .map_err(|e| err(&e))?;
        for t in &report.targets {
            let pts = points(t.kind);
            if pts.is_empty() {
                continue;
            }
            let c = color(t.kind);
            chart
                .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
                .map_err(|e| err(&e))?
                .label(t.kind.name())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
                });
            chart
                .draw_series(pts.into_iter().map(|p| Circle::new(p, 4, c.filled())))
                .map_err(|e| err(&e))?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperLeft)
            .draw()
            .map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}
