//! Plots as SVG, drawn with plotters: grouped bars (one group per workload, one bar per
//! series) and lines (one per series). Shared by every benchmark that plots.
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::Error;

const SIZE: (u32, u32) = (900, 400);
/// The plot's share of the width; the legend takes the rest, so it never covers data.
const PLOT_WIDTH: u32 = 700;
const PALETTE: [RGBColor; 10] = [
    RGBColor(0x4c, 0x72, 0xb0),
    RGBColor(0xdd, 0x84, 0x52),
    RGBColor(0x55, 0xa8, 0x68),
    RGBColor(0xc4, 0x4e, 0x52),
    RGBColor(0x81, 0x72, 0xb3),
    RGBColor(0x93, 0x78, 0x60),
    RGBColor(0xda, 0x8b, 0xc3),
    RGBColor(0x8c, 0x8c, 0x8c),
    RGBColor(0xcc, 0xb9, 0x74),
    RGBColor(0x64, 0xb5, 0xcd),
];

fn colour(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

fn plot_error(e: impl std::fmt::Display) -> Error {
    Error::Failed(format!("drawing a plot: {e}"))
}

/// The series' names and colours, one per line, in the area right of the plot; `line` draws
/// a short line instead of a box.
fn legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    names: &[&str],
    line: bool,
) -> Result<(), Error> {
    for (j, name) in names.iter().enumerate() {
        let (x, y) = (8, 40 + 18 * j as i32);
        let c = colour(j);
        if line {
            area.draw(&PathElement::new(vec![(x, y + 6), (x + 14, y + 6)], c.stroke_width(2))).map_err(plot_error)?;
        } else {
            area.draw(&Rectangle::new([(x, y), (x + 12, y + 12)], c.filled())).map_err(plot_error)?;
        }
        area.draw(&Text::new(*name, (x + 20, y), ("sans-serif", 12).into_font().color(&BLACK))).map_err(plot_error)?;
    }
    Ok(())
}

/// Grouped bars: `series[j].1[i]` is series j's bar in group i (NaN draws nothing).
pub struct Bars {
    pub title: String,
    pub y_label: String,
    pub groups: Vec<String>,
    pub series: Vec<(String, Vec<f64>)>,
}

/// The bars as an SVG document.
pub fn bars(b: &Bars) -> Result<String, Error> {
    let mut svg = String::new();
    {
        let whole = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        whole.fill(&WHITE).map_err(plot_error)?;
        let (root, side) = whole.split_horizontally(PLOT_WIDTH);
        let top =
            b.series.iter().flat_map(|s| s.1.iter().copied()).filter(|v| v.is_finite()).fold(1.0, f64::max) * 1.15;
        let n = b.groups.len().max(1);
        let mut chart = ChartBuilder::on(&root)
            .caption(&b.title, ("sans-serif", 15))
            .margin(12)
            .x_label_area_size(30)
            .y_label_area_size(50)
            .build_cartesian_2d(0f64..n as f64, 0f64..top)
            .map_err(plot_error)?;
        chart.configure_mesh().disable_x_mesh().x_labels(0).y_desc(&b.y_label).draw().map_err(plot_error)?;
        // the group names under each group's centre (the axis's own labels fall between groups)
        let style = ("sans-serif", 13).into_font().color(&BLACK).pos(Pos::new(HPos::Center, VPos::Top));
        for (i, g) in b.groups.iter().enumerate() {
            let (x, y) = chart.backend_coord(&(i as f64 + 0.5, 0.0));
            root.draw(&Text::new(g.as_str(), (x, y + 6), style.clone())).map_err(plot_error)?;
        }
        let width = 0.8 / b.series.len().max(1) as f64;
        for (j, (_, vals)) in b.series.iter().enumerate() {
            let c = colour(j);
            let rects = vals.iter().enumerate().filter(|(_, v)| v.is_finite()).map(move |(i, v)| {
                let x0 = i as f64 + 0.1 + j as f64 * width;
                Rectangle::new([(x0, 0.0), (x0 + width * 0.95, *v)], c.filled())
            });
            chart.draw_series(rects).map_err(plot_error)?;
        }
        legend(&side, &b.series.iter().map(|s| s.0.as_str()).collect::<Vec<_>>(), false)?;
        whole.present().map_err(plot_error)?;
    }
    Ok(svg)
}

/// Lines: each series is (x, y) points, drawn in x order.
pub struct Lines {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<(String, Vec<(f64, f64)>)>,
}

/// The lines as an SVG document.
pub fn lines(l: &Lines) -> Result<String, Error> {
    let mut svg = String::new();
    {
        let whole = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        whole.fill(&WHITE).map_err(plot_error)?;
        let (root, side) = whole.split_horizontally(PLOT_WIDTH);
        let pts = || l.series.iter().flat_map(|s| s.1.iter().copied());
        let (xmin, xmax) = pts().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), (x, _)| (a.min(x), b.max(x)));
        let (xmin, xmax) = if xmin < xmax { (xmin, xmax) } else { (xmin - 1.0, xmin + 1.0) };
        let top = pts().map(|p| p.1).fold(0.0, f64::max) * 1.1;
        let mut chart = ChartBuilder::on(&root)
            .caption(&l.title, ("sans-serif", 15))
            .margin(12)
            .x_label_area_size(30)
            .y_label_area_size(50)
            .build_cartesian_2d(xmin..xmax, 0f64..top.max(1e-9))
            .map_err(plot_error)?;
        chart.configure_mesh().x_desc(&l.x_label).y_desc(&l.y_label).draw().map_err(plot_error)?;
        for (j, (_, points)) in l.series.iter().enumerate() {
            let mut p = points.clone();
            p.sort_by(|a, b| a.0.total_cmp(&b.0));
            chart.draw_series(LineSeries::new(p, colour(j).stroke_width(2))).map_err(plot_error)?;
        }
        legend(&side, &l.series.iter().map(|s| s.0.as_str()).collect::<Vec<_>>(), true)?;
        whole.present().map_err(plot_error)?;
    }
    Ok(svg)
}

/// A heatmap: column i at time `times[i]`, row j of `rows` from the bottom, each cell a value
/// in [0, 1] (NaN draws nothing), white to dark.
pub struct Heatmap {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub times: Vec<f64>,
    pub columns: Vec<Vec<f64>>,
}

/// The heatmap as an SVG document.
pub fn heatmap(h: &Heatmap) -> Result<String, Error> {
    let mut svg = String::new();
    {
        let whole = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        whole.fill(&WHITE).map_err(plot_error)?;
        let rows = h.columns.iter().map(Vec::len).max().unwrap_or(0).max(1);
        let t0 = h.times.first().copied().unwrap_or(0.0);
        let t1 = h.times.last().copied().unwrap_or(1.0).max(t0 + 1e-9);
        // each column lasts until the next one (the last as long as the one before it)
        let width = |i: usize| match (h.times.get(i), h.times.get(i + 1)) {
            (Some(a), Some(b)) => b - a,
            _ => h.times.len().checked_sub(2).map_or(1.0, |k| h.times[k + 1] - h.times[k]),
        };
        let mut chart = ChartBuilder::on(&whole)
            .caption(&h.title, ("sans-serif", 15))
            .margin(12)
            .x_label_area_size(30)
            .y_label_area_size(50)
            .build_cartesian_2d(t0..t1 + width(h.times.len().saturating_sub(1)), 0f64..rows as f64)
            .map_err(plot_error)?;
        chart.configure_mesh().disable_mesh().x_desc(&h.x_label).y_desc(&h.y_label).draw().map_err(plot_error)?;
        let cells = h.columns.iter().enumerate().flat_map(|(i, col)| {
            let (x0, w) = (h.times[i], width(i));
            col.iter().enumerate().filter(|(_, v)| v.is_finite()).map(move |(j, v)| {
                let shade = (255.0 * (1.0 - v.clamp(0.0, 1.0))) as u8;
                Rectangle::new([(x0, j as f64), (x0 + w, j as f64 + 1.0)], RGBColor(shade, shade, 255).filled())
            })
        });
        chart.draw_series(cells).map_err(plot_error)?;
        whole.present().map_err(plot_error)?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_and_lines_are_svg_with_their_labels() {
        let b = bars(&Bars {
            title: "t".into(),
            y_label: "x std".into(),
            groups: vec!["A".into(), "C".into()],
            series: vec![("std".into(), vec![1.0, 1.0]), ("nextto".into(), vec![1.5, f64::NAN])],
        })
        .unwrap();
        assert!(b.starts_with("<svg") && b.contains("nextto") && b.contains(">\nC\n<"), "{b}");
        assert!(b.matches("<rect").count() >= 3);
        let l = lines(&Lines {
            title: "t".into(),
            x_label: "theta".into(),
            y_label: "M ops/s".into(),
            series: vec![("std".into(), vec![(0.5, 1.0), (0.25, 2.0)])],
        })
        .unwrap();
        assert!(l.contains("<polyline") || l.contains("<path"), "{l}");
        assert!(l.contains("theta"));
    }
}
