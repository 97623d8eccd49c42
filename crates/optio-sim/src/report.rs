//! Reports: tables for people, JSON for scripts, plots (PNG or SVG) for papers.

use std::path::Path;

use plotters::prelude::*;
use serde_json::Value;

use crate::SimError;

/// A table of text cells; numbers are formatted by the experiment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Table {
    /// Caption printed above the table.
    pub title: String,
    /// Column headers.
    pub headers: Vec<String>,
    /// Rows of cells.
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with a caption and headers.
    pub fn new(title: &str, headers: &[&str]) -> Table {
        Table {
            title: title.to_string(),
            headers: headers.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// Appends a row.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Aligned text: the first column left-aligned, the others right-aligned.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if !self.title.is_empty() {
            out.push_str(&self.title);
            out.push('\n');
        }
        out.push_str(&aligned(&self.headers, &self.rows, |column| column == 0));
        out
    }
}

/// The one table layout of Optio's text output (the CLI's tables use it too): a header line
/// and one line per row, columns two spaces apart and as wide as their widest cell, text
/// columns (`left(column)`) aligned left and the others right, trailing spaces trimmed. Cells
/// beyond the headers are left out.
pub fn aligned(headers: &[String], rows: &[Vec<String>], left: impl Fn(usize) -> bool) -> String {
    let columns = headers.len();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate().take(columns) {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let line = |cells: &[String], out: &mut String| {
        let parts: Vec<String> = cells
            .iter()
            .enumerate()
            .take(columns)
            .map(|(i, c)| {
                let w = widths[i];
                if left(i) { format!("{c:<w$}") } else { format!("{c:>w$}") }
            })
            .collect();
        out.push_str(parts.join("  ").trim_end());
        out.push('\n');
    };
    line(headers, &mut out);
    for row in rows {
        line(row, &mut out);
    }
    out
}

/// How a plot draws its series.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlotKind {
    /// Lines through the points.
    Line,
    /// Points only.
    Scatter,
    /// Bars at integer x positions (series side by side).
    Bars,
}

/// One named series of (x, y) points.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// Legend name.
    pub name: String,
    /// Points.
    pub points: Vec<(f64, f64)>,
}

/// A plot.
#[derive(Clone, Debug, PartialEq)]
pub struct Plot {
    /// Title.
    pub title: String,
    /// Drawing style.
    pub kind: PlotKind,
    /// x-axis label.
    pub x_label: String,
    /// y-axis label.
    pub y_label: String,
    /// Series.
    pub series: Vec<Series>,
    /// Logarithmic x axis.
    pub log_x: bool,
}

/// What an experiment produced.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Title of the experiment.
    pub title: String,
    /// Tables, in order.
    pub tables: Vec<Table>,
    /// Free-text notes printed after the tables (what the numbers mean, the paper's values).
    pub notes: Vec<String>,
    /// Everything for scripts.
    pub json: Value,
    /// Plots, drawn with `--plot FILE` (the first to FILE, others to FILE-2, FILE-3, …).
    pub plots: Vec<Plot>,
}

impl Report {
    /// The report for people.
    pub fn render_text(&self) -> String {
        let mut out = String::new();
        if !self.title.is_empty() {
            out.push_str(&format!("{}\n\n", self.title));
        }
        for table in &self.tables {
            out.push_str(&table.render());
            out.push('\n');
        }
        for note in &self.notes {
            out.push_str(note);
            out.push('\n');
        }
        out
    }

    /// Draws the plots: the first to `path`, the n-th to `stem-n.ext`. PNG or SVG by extension.
    /// Returns the files written.
    pub fn draw(&self, path: &Path) -> Result<Vec<std::path::PathBuf>, SimError> {
        let mut written = Vec::new();
        for (i, plot) in self.plots.iter().enumerate() {
            let target = if i == 0 {
                path.to_path_buf()
            } else {
                let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("plot");
                let ext = path.extension().and_then(|s| s.to_str()).unwrap_or("png");
                path.with_file_name(format!("{stem}-{}.{ext}", i + 1))
            };
            draw_plot(plot, &target)?;
            written.push(target);
        }
        Ok(written)
    }
}

const FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");

fn register_font() {
    // Registering twice is harmless; plotters keeps the last registration.
    let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, FONT);
}

fn plot_error(path: &Path, error: impl std::fmt::Display) -> SimError {
    SimError::Plot { path: path.display().to_string(), reason: error.to_string() }
}

fn draw_plot(plot: &Plot, path: &Path) -> Result<(), SimError> {
    register_font();
    let size = (960, 600);
    match path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase).as_deref() {
        Some("svg") => {
            let root = SVGBackend::new(path, size).into_drawing_area();
            draw_on(plot, &root).map_err(|e| plot_error(path, e))?;
            root.present().map_err(|e| plot_error(path, e))
        }
        Some("png") => {
            let root = BitMapBackend::new(path, size).into_drawing_area();
            draw_on(plot, &root).map_err(|e| plot_error(path, e))?;
            root.present().map_err(|e| plot_error(path, e))
        }
        _ => Err(plot_error(path, "the plot file must end in .png or .svg")),
    }
}

const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

fn draw_on<DB: DrawingBackend>(
    plot: &Plot,
    root: &DrawingArea<DB, plotters::coord::Shift>,
) -> Result<(), Box<dyn std::error::Error + 'static>>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let points = plot.series.iter().flat_map(|s| s.points.iter());
    let (mut x_min, mut x_max, mut y_min, mut y_max) = (f64::MAX, f64::MIN, 0.0f64, f64::MIN);
    for &(x, y) in points {
        x_min = x_min.min(x);
        x_max = x_max.max(x);
        y_min = y_min.min(y);
        y_max = y_max.max(y);
    }
    if x_min > x_max {
        (x_min, x_max, y_max) = (0.0, 1.0, 1.0);
    }
    if plot.kind == PlotKind::Bars {
        x_min -= 0.5;
        x_max += 0.5;
    }
    if x_max <= x_min {
        x_max = x_min + 1.0;
    }
    if y_max <= y_min {
        y_max = y_min + 1.0;
    }
    let y_range = y_min..y_max * 1.08;
    let mut builder = ChartBuilder::on(root);
    builder
        .caption(&plot.title, ("sans-serif", 24))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(72);
    if plot.log_x && x_min > 0.0 {
        let mut chart = builder.build_cartesian_2d((x_min..x_max).log_scale(), y_range)?;
        chart
            .configure_mesh()
            .x_desc(&plot.x_label)
            .y_desc(&plot.y_label)
            .label_style(("sans-serif", 14))
            .draw()?;
        for (i, series) in plot.series.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            chart
                .draw_series(LineSeries::new(series.points.iter().copied(), color.stroke_width(2)))?
                .label(&series.name)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .label_font(("sans-serif", 14))
            .draw()?;
        return Ok(());
    }
    let mut chart = builder.build_cartesian_2d(x_min..x_max, y_range)?;
    chart
        .configure_mesh()
        .x_desc(&plot.x_label)
        .y_desc(&plot.y_label)
        .label_style(("sans-serif", 14))
        .draw()?;
    let count = plot.series.len().max(1) as f64;
    for (i, series) in plot.series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let drawn = match plot.kind {
            PlotKind::Line => chart.draw_series(LineSeries::new(
                series.points.iter().copied(),
                color.stroke_width(2),
            ))?,
            PlotKind::Scatter => chart
                .draw_series(series.points.iter().map(|&p| Circle::new(p, 3, color.filled())))?,
            PlotKind::Bars => {
                let width = 0.8 / count;
                let offset = -0.4 + width * i as f64;
                chart.draw_series(series.points.iter().map(|&(x, y)| {
                    Rectangle::new([(x + offset, 0.0), (x + offset + width, y)], color.filled())
                }))?
            }
        };
        drawn
            .label(&series.name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(kind: PlotKind) -> Report {
        Report {
            title: "t".into(),
            plots: vec![Plot {
                title: "sample".into(),
                kind,
                x_label: "x".into(),
                y_label: "y".into(),
                series: vec![
                    Series { name: "a".into(), points: vec![(1.0, 2.0), (2.0, 3.0), (3.0, 1.0)] },
                    Series { name: "b".into(), points: vec![(1.0, 1.0), (2.0, 2.5), (3.0, 2.0)] },
                ],
                log_x: false,
            }],
            ..Report::default()
        }
    }

    #[test]
    fn draws_png_and_svg() {
        let dir = std::env::temp_dir().join(format!("optio-sim-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        for (kind, name) in
            [(PlotKind::Line, "a.png"), (PlotKind::Bars, "b.svg"), (PlotKind::Scatter, "c.png")]
        {
            let path = dir.join(name);
            let written = sample(kind).draw(&path).expect("draws");
            let bytes = std::fs::read(&written[0]).expect("written");
            assert!(bytes.len() > 1000, "{name}: {} bytes", bytes.len());
            if name.ends_with(".png") {
                assert_eq!(&bytes[1..4], b"PNG");
            } else {
                assert!(String::from_utf8_lossy(&bytes).contains("<svg"));
            }
        }
        assert!(sample(PlotKind::Line).draw(&dir.join("x.gif")).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn tables_align() {
        let mut table = Table::new("cap", &["name", "value"]);
        table.row(vec!["a".into(), "1".into()]);
        table.row(vec!["long".into(), "22".into()]);
        assert_eq!(table.render(), "cap\nname  value\na         1\nlong     22\n");
    }
}
