//! `flexssd plot`: SVG charts from the CSV files that experiments write, so every
//! result in `docs/results/` has a picture made by the same binary, with no
//! plotting stack to install.
//!
//! Input is "long" CSV with a header: one row per point, a column naming the
//! series, one for x and one for y (`scenario,percentile,latency_us`, say).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, ensure, Context, Result};
use clap::{Args, Subcommand};
use plotters::prelude::*;

/// Plot kinds.
#[derive(Debug, Subcommand)]
pub enum PlotCmd {
    /// One line per series: x against y.
    Lines(LinesArgs),
}

/// Options of `flexssd plot lines`.
#[derive(Debug, Args)]
pub struct LinesArgs {
    /// Input CSV with a header row.
    #[arg(long)]
    pub csv: PathBuf,
    /// Column with the x values.
    #[arg(long)]
    pub x: String,
    /// Column with the y values.
    #[arg(long)]
    pub y: String,
    /// Column naming the series (one line each).
    #[arg(long)]
    pub series: String,
    /// Output SVG file.
    #[arg(long)]
    pub out: PathBuf,
    /// Chart title.
    #[arg(long, default_value = "")]
    pub title: String,
    /// X-axis label (default: the x column).
    #[arg(long)]
    pub xlabel: Option<String>,
    /// Y-axis label (default: the y column).
    #[arg(long)]
    pub ylabel: Option<String>,
    /// Logarithmic y axis.
    #[arg(long)]
    pub logy: bool,
    /// Series drawn as points only (comma-separated names), e.g. per-second
    /// samples beside a curve.
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    pub scatter: Vec<String>,
    /// A horizontal reference line at this y (a bound, say).
    #[arg(long, value_name = "Y")]
    pub hline: Option<f64>,
}

/// Runs a plot command.
pub fn run(cmd: &PlotCmd) -> Result<()> {
    match cmd {
        PlotCmd::Lines(a) => lines(a),
    }
}

type Series = BTreeMap<String, Vec<(f64, f64)>>;

/// Reads `(series, x, y)` points from a CSV file, naming file and line on errors.
fn read_points(path: &Path, sc: &str, xc: &str, yc: &str) -> Result<Series> {
    let mut rd =
        csv::Reader::from_path(path).with_context(|| format!("open {}", path.display()))?;
    let hdr = rd
        .headers()
        .with_context(|| format!("{}: no header row", path.display()))?
        .clone();
    let columns = if hdr.is_empty() {
        "the header row is empty".to_string()
    } else {
        format!("columns: {}", hdr.iter().collect::<Vec<_>>().join(", "))
    };
    let col = |name: &str| {
        hdr.iter()
            .position(|h| h == name)
            .with_context(|| format!("{}: no column {name:?} ({columns})", path.display()))
    };
    let (si, xi, yi) = (col(sc)?, col(xc)?, col(yc)?);
    let mut out = Series::new();
    for (n, rec) in rd.records().enumerate() {
        let line = n + 2;
        let rec = rec.with_context(|| format!("{}:{line}: malformed CSV", path.display()))?;
        let num = |i: usize, what: &str| -> Result<f64> {
            let v = rec.get(i).unwrap_or("");
            let x = v.trim().parse::<f64>().with_context(|| {
                format!("{}:{line}: {what} {v:?} is not a number", path.display())
            })?;
            // An infinite value has no place on an axis (and made the axis
            // range infinite, on which the chart never finished drawing).
            ensure!(
                x.is_finite(),
                "{}:{line}: {what} {v:?} is not a finite number",
                path.display()
            );
            Ok(x)
        };
        let (x, y) = (num(xi, xc)?, num(yi, yc)?);
        out.entry(rec.get(si).unwrap_or("").to_string())
            .or_default()
            .push((x, y));
    }
    if out.is_empty() {
        bail!("{}: no data rows", path.display());
    }
    for pts in out.values_mut() {
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    Ok(out)
}

fn lines(a: &LinesArgs) -> Result<()> {
    let data = read_points(&a.csv, &a.series, &a.x, &a.y)?;
    let all = data.values().flatten();
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in all {
        (x0, x1, y0, y1) = (x0.min(x), x1.max(x), y0.min(y), y1.max(y));
    }
    if let Some(h) = a.hline {
        ensure!(h.is_finite(), "--hline must be a finite number, got {h}");
        (y0, y1) = (y0.min(h), y1.max(h));
    }
    for name in &a.scatter {
        if !data.contains_key(name) {
            bail!("--scatter: no series {name:?} in {}", a.csv.display());
        }
    }
    if x0 == x1 {
        x1 = x0 + 1.0;
    }
    let root = SVGBackend::new(&a.out, (900, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut b = ChartBuilder::on(&root);
    b.caption(&a.title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(72);
    let xlabel = a.xlabel.clone().unwrap_or_else(|| a.x.clone());
    let ylabel = a.ylabel.clone().unwrap_or_else(|| a.y.clone());
    // twelve colours told apart at a glance (Tableau's ten, black, navy): a
    // figure of a dozen series repeats none
    let palette = [
        RGBColor(214, 39, 40),
        RGBColor(31, 119, 180),
        RGBColor(44, 160, 44),
        RGBColor(255, 127, 14),
        RGBColor(148, 103, 189),
        RGBColor(23, 190, 207),
        BLACK,
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
        RGBColor(188, 189, 34),
        RGBColor(0, 0, 128),
    ];
    macro_rules! draw {
        ($chart:expr) => {{
            let mut chart = $chart;
            chart
                .configure_mesh()
                .x_desc(xlabel.as_str())
                .y_desc(ylabel.as_str())
                .draw()?;
            for (i, (name, pts)) in data.iter().enumerate() {
                let c = palette[i % palette.len()];
                if a.scatter.contains(name) {
                    chart
                        .draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled())))?
                        .label(name.as_str())
                        .legend(move |(x, y)| Circle::new((x + 10, y), 3, c.filled()));
                    continue;
                }
                chart
                    .draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(2)))?
                    .label(name.as_str())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
                    });
                chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled())))?;
            }
            if let Some(h) = a.hline {
                let grey = RGBColor(90, 90, 90);
                chart
                    .draw_series(LineSeries::new(
                        vec![(x0, h), (x1, h)],
                        grey.stroke_width(1),
                    ))?
                    .label(format!("bound {h}"))
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], grey));
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .position(SeriesLabelPosition::UpperLeft)
                .draw()?;
        }};
    }
    if a.logy {
        if y0 <= 0.0 {
            bail!("--logy needs positive y values; the smallest is {y0}");
        }
        draw!(b.build_cartesian_2d(x0..x1, (y0 * 0.8..y1 * 1.25).log_scale())?);
    } else {
        let pad = (y1 - y0).abs() * 0.05 + f64::EPSILON;
        draw!(b.build_cartesian_2d(x0..x1, (y0.min(0.0))..(y1 + pad))?);
    }
    root.present()
        .with_context(|| format!("write {}", a.out.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_long_csv_and_reports_bad_lines() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("a.csv");
        std::fs::write(&p, "s,x,y\na,2,20\na,1,10\nb,1,5\n").unwrap();
        let s = read_points(&p, "s", "x", "y").unwrap();
        assert_eq!(s["a"], vec![(1.0, 10.0), (2.0, 20.0)]);
        std::fs::write(&p, "s,x,y\na,1,10\na,oops,3\n").unwrap();
        let e = read_points(&p, "s", "x", "y").unwrap_err().to_string();
        assert!(e.contains("a.csv:3") && e.contains("oops"), "{e}");
        let e = read_points(&p, "s", "x", "nope").unwrap_err().to_string();
        assert!(
            e.ends_with("a.csv: no column \"nope\" (columns: s, x, y)"),
            "{e}"
        );
        std::fs::write(&p, "\n").unwrap();
        let e = read_points(&p, "s", "x", "y").unwrap_err().to_string();
        assert!(
            e.ends_with("a.csv: no column \"s\" (the header row is empty)"),
            "{e}"
        );
    }

    #[test]
    fn refuses_values_that_are_not_finite() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("a.csv");
        for (row, what) in [
            ("a,1,inf", "y \"inf\""),
            ("a,-inf,1", "x \"-inf\""),
            ("a,1,NaN", "y \"NaN\""),
            ("a,1e999,1", "x \"1e999\""),
        ] {
            std::fs::write(&p, format!("s,x,y\na,0,1\n{row}\n")).unwrap();
            let e = read_points(&p, "s", "x", "y").unwrap_err().to_string();
            assert!(
                e.ends_with(&format!("a.csv:3: {what} is not a finite number")),
                "{row}: {e}"
            );
        }
        std::fs::write(&p, "s,x,y\na,0,1\na,1,2\n").unwrap();
        for h in [f64::NAN, f64::INFINITY] {
            let args = LinesArgs {
                csv: p.clone(),
                x: "x".into(),
                y: "y".into(),
                series: "s".into(),
                out: d.path().join("a.svg"),
                title: String::new(),
                xlabel: None,
                ylabel: None,
                logy: false,
                scatter: vec![],
                hline: Some(h),
            };
            let e = run(&PlotCmd::Lines(args)).unwrap_err().to_string();
            assert_eq!(e, format!("--hline must be a finite number, got {h}"));
            assert!(!d.path().join("a.svg").exists(), "nothing is written");
        }
    }

    #[test]
    fn draws_an_svg() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("a.csv");
        std::fs::write(&p, "s,x,y\na,1,10\na,2,30\nb,1,5\nb,2,7\n").unwrap();
        let out = d.path().join("a.svg");
        let args = LinesArgs {
            csv: p,
            x: "x".into(),
            y: "y".into(),
            series: "s".into(),
            out: out.clone(),
            title: "t".into(),
            xlabel: None,
            ylabel: None,
            logy: true,
            scatter: vec!["b".into()],
            hline: Some(12.0),
        };
        run(&PlotCmd::Lines(args)).unwrap();
        let svg = std::fs::read_to_string(out).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.contains("polyline"),
            "{}",
            &svg[..200.min(svg.len())]
        );
    }
}
