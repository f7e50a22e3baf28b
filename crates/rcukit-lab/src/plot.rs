//! SVG charts with plotters.
//!
//! Only plotters' SVG backend is compiled in (no `ttf` feature), so text is written as SVG
//! `<text>` elements that the viewer renders with its own fonts: no font-kit, no fontconfig,
//! no system libraries. A figure is a vertical stack of panels, each a line chart or a
//! horizontal bar chart. Logarithmic axes are drawn by plotting `log10` of the values on a
//! linear axis labelled with the original values, which keeps one code path for both.

use anyhow::{anyhow, Result};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;

/// One named line of points.
#[derive(Clone, Debug)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// (x, y) points, drawn in order.
    pub points: Vec<(f64, f64)>,
}

/// An axis: its label and whether it is logarithmic.
#[derive(Clone, Debug)]
pub struct Axis {
    /// Axis description.
    pub label: String,
    /// Logarithmic scale (values ≤ 0 are left out).
    pub log: bool,
}

impl Axis {
    /// A linear axis.
    pub fn linear(label: impl Into<String>) -> Axis {
        Axis {
            label: label.into(),
            log: false,
        }
    }

    /// A logarithmic axis.
    pub fn log(label: impl Into<String>) -> Axis {
        Axis {
            label: label.into(),
            log: true,
        }
    }

    fn map(&self, v: f64) -> Option<f64> {
        if self.log {
            (v > 0.0 && v.is_finite()).then(|| v.log10())
        } else {
            v.is_finite().then_some(v)
        }
    }

    /// The tick label at plotted value `v` on an axis spanning `span` plotted units. A log
    /// axis spanning two decades or more is labelled at powers of ten only.
    fn label_of(&self, v: f64, span: f64) -> String {
        if !self.log {
            return crate::report::num(v);
        }
        if (v - v.round()).abs() < 1e-6 {
            let k = v.round() as i32;
            return if k < 0 {
                format!("{}", 10f64.powi(k))
            } else {
                crate::report::num(10f64.powi(k))
            };
        }
        if span >= 2.0 {
            return String::new();
        }
        crate::report::num(10f64.powf(v))
    }

    /// How many ticks to ask plotters for: enough that a log axis gets one at every power of
    /// ten.
    fn ticks(&self, span: f64) -> usize {
        if self.log && span >= 2.0 {
            (span.ceil() as usize * 5).clamp(10, 60)
        } else {
            10
        }
    }
}

/// One panel of a figure.
#[derive(Clone, Debug)]
pub enum Panel {
    /// Lines with markers.
    Lines {
        /// Panel title.
        title: String,
        /// Horizontal axis.
        x: Axis,
        /// Vertical axis.
        y: Axis,
        /// The lines.
        series: Vec<Series>,
    },
    /// Horizontal bars: one row per category, one bar per series in each row.
    Bars {
        /// Panel title.
        title: String,
        /// The value axis (horizontal).
        value: Axis,
        /// Row names, top to bottom.
        categories: Vec<String>,
        /// (legend text, one value per category; NaN for "no bar").
        series: Vec<(String, Vec<f64>)>,
    },
}

const WIDTH: u32 = 960;
const PANEL_HEIGHT: u32 = 440;

const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
];

fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// Render `panels` stacked vertically into one SVG document.
pub fn render(panels: &[Panel]) -> Result<String> {
    if panels.is_empty() {
        return Err(anyhow!("a figure needs at least one panel"));
    }
    let mut svg = String::new();
    {
        let height = PANEL_HEIGHT * panels.len() as u32;
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| anyhow!("plot: {e}"))?;
        let areas = root.split_evenly((panels.len(), 1));
        for (area, panel) in areas.iter().zip(panels) {
            match panel {
                Panel::Lines {
                    title,
                    x,
                    y,
                    series,
                } => lines(area, title, x, y, series)?,
                Panel::Bars {
                    title,
                    value,
                    categories,
                    series,
                } => bars(area, title, value, categories, series)?,
            }
        }
        root.present().map_err(|e| anyhow!("plot: {e}"))?;
    }
    Ok(svg)
}

/// A range around `values` with a little padding; never empty.
fn padded_range(values: impl Iterator<Item = f64>, from_zero: bool) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() || !hi.is_finite() {
        return (0.0, 1.0);
    }
    if from_zero {
        lo = lo.min(0.0);
    }
    if hi - lo < 1e-12 {
        return (lo - 0.5, hi + 0.5);
    }
    let pad = (hi - lo) * 0.05;
    (
        if from_zero && lo == 0.0 {
            0.0
        } else {
            lo - pad
        },
        hi + pad,
    )
}

/// A chart on the SVG backend, with `f64` coordinates on both axes.
type Chart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// The legend, in the upper right corner.
fn draw_legend<'a>(chart: &mut Chart<'a, 'a>) -> Result<()> {
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(|e| anyhow!("plot: {e}"))
}

/// Each series' points on the axes' scales (points an axis cannot show are left out).
fn map_points(series: &[Series], x: &Axis, y: &Axis) -> Vec<Vec<(f64, f64)>> {
    series
        .iter()
        .map(|s| {
            s.points
                .iter()
                .filter_map(|&(px, py)| Some((x.map(px)?, y.map(py)?)))
                .collect()
        })
        .collect()
}

fn lines(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    title: &str,
    x: &Axis,
    y: &Axis,
    series: &[Series],
) -> Result<()> {
    let mapped = map_points(series, x, y);
    let xr = padded_range(mapped.iter().flatten().map(|p| p.0), false);
    let yr = padded_range(mapped.iter().flatten().map(|p| p.1), !y.log);
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(80)
        .build_cartesian_2d(xr.0..xr.1, yr.0..yr.1)
        .map_err(|e| anyhow!("plot: {e}"))?;
    let (xs, ys) = (xr.1 - xr.0, yr.1 - yr.0);
    let fx = |v: &f64| x.label_of(*v, xs);
    let fy = |v: &f64| y.label_of(*v, ys);
    chart
        .configure_mesh()
        .x_desc(x.label.as_str())
        .y_desc(y.label.as_str())
        .x_labels(x.ticks(xs))
        .y_labels(y.ticks(ys))
        .x_label_formatter(&fx)
        .y_label_formatter(&fy)
        .light_line_style(RGBColor(235, 235, 235))
        .draw()
        .map_err(|e| anyhow!("plot: {e}"))?;
    for (i, (s, pts)) in series.iter().zip(&mapped).enumerate() {
        let c = color(i);
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(2)))
            .map_err(|e| anyhow!("plot: {e}"))?
            .label(s.name.as_str())
            .legend(move |(lx, ly)| {
                PathElement::new(vec![(lx, ly), (lx + 20, ly)], c.stroke_width(2))
            });
        if pts.len() <= 64 {
            chart
                .draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled())))
                .map_err(|e| anyhow!("plot: {e}"))?;
        }
    }
    draw_legend(&mut chart)
}

fn bars(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    title: &str,
    value: &Axis,
    categories: &[String],
    series: &[(String, Vec<f64>)],
) -> Result<()> {
    let n = categories.len().max(1);
    let k = series.len().max(1);
    let mapped: Vec<Vec<Option<f64>>> = series
        .iter()
        .map(|(_, vals)| vals.iter().map(|&v| value.map(v)).collect())
        .collect();
    let mut vr = padded_range(mapped.iter().flatten().flatten().copied(), !value.log);
    if k > 1 {
        // Room on the right for the legend.
        vr.1 += (vr.1 - vr.0) * 0.3;
    }
    // Bars start at the left edge of the value axis (zero on a linear axis).
    let base = if value.log { vr.0 } else { 0.0 };
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(label_width(categories))
        .build_cartesian_2d(vr.0..vr.1, -0.5..(n as f64 - 0.5))
        .map_err(|e| anyhow!("plot: {e}"))?;
    let vs = vr.1 - vr.0;
    let fx = |v: &f64| value.label_of(*v, vs);
    let fy = |v: &f64| category_at(categories, *v);
    chart
        .configure_mesh()
        .x_desc(value.label.as_str())
        .x_labels(value.ticks(vs))
        .x_label_formatter(&fx)
        .y_label_formatter(&fy)
        .y_labels(n + 1)
        .disable_y_mesh()
        .light_line_style(RGBColor(235, 235, 235))
        .draw()
        .map_err(|e| anyhow!("plot: {e}"))?;
    for (j, ((name, _), vals)) in series.iter().zip(&mapped).enumerate() {
        let c = color(j);
        chart
            .draw_series(bar_rects(vals, j, k, base, c))
            .map_err(|e| anyhow!("plot: {e}"))?
            .label(name.as_str())
            .legend(move |(lx, ly)| Rectangle::new([(lx, ly - 5), (lx + 15, ly + 5)], c.filled()));
    }
    if k > 1 {
        draw_legend(&mut chart)?;
    }
    Ok(())
}

/// The label of the row at `y` (row i from the top sits at y = n - 1 - i); none between rows.
fn category_at(categories: &[String], y: f64) -> String {
    let (n, r) = (categories.len(), y.round());
    if (y - r).abs() > 0.01 || r < 0.0 || r >= n as f64 {
        return String::new();
    }
    categories
        .get(n - 1 - r as usize)
        .cloned()
        .unwrap_or_default()
}

/// Room for the category labels left of the bars, in pixels.
fn label_width(categories: &[String]) -> u32 {
    let longest = categories.iter().map(|c| c.chars().count()).max();
    (longest.unwrap_or(4) as u32 * 8 + 20).min(360)
}

/// The bars of series `j` of `k`: one per category (row `i` from the top at y = n - 1 - i),
/// from `base` to the value, in a band of the row of its own.
fn bar_rects(
    vals: &[Option<f64>],
    j: usize,
    k: usize,
    base: f64,
    c: RGBColor,
) -> Vec<Rectangle<(f64, f64)>> {
    let (n, band) = (vals.len(), 0.8 / k as f64);
    vals.iter()
        .enumerate()
        .filter_map(|(i, v)| {
            let v = (*v)?;
            let top = (n - 1 - i) as f64 + 0.4 - j as f64 * band;
            Some(Rectangle::new(
                [(base, top), (v, top - band * 0.9)],
                c.filled(),
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_text_without_system_fonts() {
        let svg = render(&[
            Panel::Lines {
                title: "latency".into(),
                x: Axis::log("µs"),
                y: Axis::linear("fraction"),
                series: vec![Series {
                    name: "rcu".into(),
                    points: vec![(1.0, 0.1), (10.0, 0.5), (100.0, 1.0)],
                }],
            },
            Panel::Bars {
                title: "update time".into(),
                value: Axis::log("ms"),
                categories: vec!["rwlock".into(), "rcu-sync".into()],
                series: vec![("total".into(), vec![1.0, 3000.0])],
            },
        ])
        .unwrap();
        assert!(svg.starts_with("<svg"));
        assert!(svg.contains("<text"));
        assert!(svg.contains("rcu-sync"));
        assert!(svg.contains("latency"));
    }
}
