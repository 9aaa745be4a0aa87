//! Black-box tests of `flexssd sim sla-placement`: a small run with every
//! output, determinism, trace-derived tenants, and bad input.

use std::path::Path;

mod support;

fn ok(args: &[&str]) -> String {
    support::sim_ok("sla-placement", args)
}

fn fails(args: &[&str]) -> String {
    support::sim_fails("sla-placement", args)
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// CSV rows as maps from column to value.
fn csv_rows(p: &Path) -> Vec<std::collections::HashMap<String, String>> {
    let text = std::fs::read_to_string(p).unwrap();
    let mut lines = text.lines();
    let header: Vec<String> = lines.next().unwrap().split(',').map(String::from).collect();
    lines
        .map(|l| {
            header
                .iter()
                .cloned()
                .zip(l.split(',').map(String::from))
                .collect()
        })
        .collect()
}

#[test]
fn small_run_writes_table_csv_and_plot() {
    let d = tempfile::tempdir().unwrap();
    let csv = d.path().join("out.csv");
    let svg = d.path().join("out.svg");
    let args = [
        "--tenants",
        "30",
        "--trials",
        "2",
        "--percentiles",
        "p95,p99.9",
        "--groups",
        "paper,read",
        "--csv",
        path(&csv),
        "--plot",
        path(&svg),
    ];
    let table = ok(&args);
    assert!(
        table.contains("30 tenants per population, 2 trial(s)"),
        "{table}"
    );
    assert!(
        table.contains("group paper: 10 read, 10 write, 10 mixed (mean per trial)"),
        "{table}"
    );
    for needle in ["paper   p95", "paper   p99.9", "read    p95", "regulator"] {
        assert!(table.contains(needle), "no {needle:?} in\n{table}");
    }
    let rows = csv_rows(&csv);
    assert_eq!(rows.len(), 2 * 2 * 4, "{rows:?}");
    let disks = |g: &str, p: &str, m: &str| -> f64 {
        rows.iter()
            .find(|r| r["group"] == g && r["percentile"] == p && r["method"] == m)
            .unwrap_or_else(|| panic!("no row {g} {p} {m}"))["disks_mean"]
            .parse()
            .unwrap()
    };
    for g in ["paper", "read"] {
        for p in ["p95", "p99.9"] {
            let reg = disks(g, p, "regulator");
            assert!(reg >= 1.0);
            // Aggregate IOPS never beats curves on these tenants.
            assert!(disks(g, p, "iops") >= reg, "{g} {p}");
        }
    }
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("<rect") && svg.contains("regulator"));
    // Same options, same output.
    assert_eq!(ok(&args), table);
    // A subset of the groups and percentiles reproduces the full run's cells.
    let sub = d.path().join("sub.csv");
    ok(&[
        "--tenants",
        "30",
        "--trials",
        "2",
        "--percentiles",
        "p99.9",
        "--groups",
        "read",
        "--csv",
        path(&sub),
    ]);
    let sub = csv_rows(&sub);
    assert_eq!(sub.len(), 4);
    for r in &sub {
        let full = rows
            .iter()
            .find(|x| {
                x["group"] == "read" && x["percentile"] == "p99.9" && x["method"] == r["method"]
            })
            .unwrap();
        assert_eq!(r, full);
    }
}

#[test]
fn json_output_and_seeds() {
    let run = |seed: &str| {
        let out = ok(&[
            "--tenants",
            "24",
            "--trials",
            "1",
            "--percentiles",
            "p99",
            "--groups",
            "mixed",
            "--metric",
            "area",
            "--seed",
            seed,
            "--json",
        ]);
        serde_json::from_str::<serde_json::Value>(&out).unwrap()
    };
    let a = run("7");
    assert_eq!(a["metric"], "area");
    assert_eq!(a["rows"].as_array().unwrap().len(), 4);
    assert_eq!(a["trial_results"].as_array().unwrap().len(), 4);
    assert_eq!(a["rows"][3]["method"], "regulator");
    assert_eq!(run("7"), a);
    assert_ne!(run("8")["trial_results"], a["trial_results"]);
}

#[test]
fn tenants_from_a_trace() {
    let d = tempfile::tempdir().unwrap();
    let trace = d.path().join("t.csv");
    // MSR format: 40 seconds, reads every second, writes every other.
    let mut text = String::new();
    for s in 0..40u64 {
        let t = 128_166_385_295_514_663 + s * 10_000_000;
        text.push_str(&format!("{t},hm,0,Read,{},4096,100\n", s * 4096));
        if s % 2 == 0 {
            text.push_str(&format!("{},hm,0,Write,{},8192,100\n", t + 1, s * 8192));
        }
    }
    std::fs::write(&trace, text).unwrap();
    let spec = format!("msr:{}", path(&trace));
    let out = ok(&[
        "--trace",
        &spec,
        "--tenants",
        "20",
        "--trials",
        "1",
        "--window-ms",
        "1000",
    ]);
    assert!(out.contains("trace curve shapes (1)"), "{out}");
    assert!(out.contains("t.csv:0"), "{out}");
    assert!(out.contains("traces  p95"), "{out}");
    // Too few busy windows.
    let e = fails(&["--trace", &spec, "--min-busy-windows", "100"]);
    assert!(e.contains("busy windows"), "{e}");
    // A bad trace is named.
    let e = fails(&["--trace", "msr:/nonexistent/trace.csv"]);
    assert!(e.contains("/nonexistent/trace.csv"), "{e}");
    // Windows: a count in range, a window not too short, and not too many of
    // them over the trace (a 1 µs window over 39 s once ran out of memory).
    for (flag, v, msg) in [
        (
            "--windows",
            "0",
            "--windows must be from 1 to 1000000, got 0",
        ),
        (
            "--windows",
            "1000000000",
            "--windows must be from 1 to 1000000, got 1000000000",
        ),
        (
            "--window-ms",
            "0.000001",
            "--window-ms must be at least 0.001 (1 µs), got 0.000001",
        ),
        ("--window-ms", "NaN", "--window-ms must be at least 0.001"),
        ("--window-ms", "inf", "--window-ms must be at least 0.001"),
    ] {
        let e = fails(&["--trace", &spec, flag, v]);
        assert!(e.contains(msg), "{flag} {v}: {e}");
    }
    let e = fails(&["--trace", &spec, "--window-ms", "0.001"]);
    assert!(
        e.contains("t.csv: --window-ms 0.001 makes 39000001 windows over its span of 39.000 s, more than 1000000; use --window-ms 0.039001 or more"),
        "{e}"
    );
    ok(&[
        "--trace",
        &spec,
        "--tenants",
        "2",
        "--trials",
        "1",
        "--window-ms",
        "0.039001",
        "--min-busy-windows",
        "1",
    ]);
}

#[test]
fn no_tenant_placed_gives_no_ratio_not_nan() {
    let d = tempfile::tempdir().unwrap();
    let csv = d.path().join("sla.csv");
    let args = [
        "--trials",
        "1",
        "--tenants",
        "20",
        "--size-min",
        "1e12",
        "--size-max",
        "1e13",
        "--groups",
        "read",
        "--percentiles",
        "p99",
        "--csv",
        path(&csv),
    ];
    let table = ok(&args);
    assert!(!table.contains("NaN"), "{table}");
    assert!(table.contains("n/a"), "{table}");
    assert!(
        table.contains("No tenant was placed (every one rejected, so no disk used and the ratios are n/a) in: read p99 iops, read p99 weighted-iops, read p99 sla-random, read p99 regulator."),
        "{table}"
    );
    let text = std::fs::read_to_string(&csv).unwrap();
    assert!(!text.contains("NaN"), "{text}");
    let rows = csv_rows(&csv);
    assert_eq!(rows.len(), 4);
    for r in &rows {
        assert_eq!(r["rejected_total"], "20", "{r:?}");
        for k in ["vs_sla_random", "vs_regulator", "regulator_saves_pct"] {
            assert_eq!(r[k], "", "{k}: {r:?}");
        }
    }
    let json: serde_json::Value =
        serde_json::from_str(&ok(&[&args[..12], &["--json"]].concat())).unwrap();
    for r in json["rows"].as_array().unwrap() {
        assert!(r["vs_regulator"].is_null(), "{r}");
    }
}

#[test]
fn bad_input_gets_clear_errors() {
    let d = tempfile::tempdir().unwrap();
    let units = d.path().join("units.toml");
    std::fs::write(
        &units,
        "[[unit]]\nname = \"ssd\"\ncost = 1\nspeed = 9\n[unit.curves]\np95 = [[0, 10], [1, 0]]\n",
    )
    .unwrap();
    let e = fails(&["--units", path(&units)]);
    assert!(
        e.contains("units file") && e.contains("units.toml") && e.contains("unknown field `speed`"),
        "{e}"
    );
    // A non-concave curve.
    std::fs::write(
        &units,
        "[[unit]]\nname = \"ssd\"\ncost = 1\n[unit.curves]\np95 = [[0, 10], [1, 1], [5, 0]]\n",
    )
    .unwrap();
    let e = fails(&["--units", path(&units)]);
    assert!(e.contains("p95 curve is not concave"), "{e}");
    // A valid catalogue that cannot serve the requested percentile.
    std::fs::write(
        &units,
        "[[unit]]\nname = \"ssd\"\ncost = 1\n[unit.curves]\np95 = [[0, 300000], [30000, 0]]\n",
    )
    .unwrap();
    let e = fails(&["--units", path(&units), "--percentiles", "p99"]);
    assert!(
        e.contains("no unit type in the catalogue offers a p99 curve"),
        "{e}"
    );
    // ... but it serves p95.
    let out = ok(&[
        "--units",
        path(&units),
        "--percentiles",
        "p95",
        "--tenants",
        "10",
        "--trials",
        "1",
    ]);
    assert!(out.contains("paper   p95"), "{out}");
    // JSON catalogues take curves in sla::Curve's own serialisation.
    let json = d.path().join("units.json");
    std::fs::write(
        &json,
        r#"{"unit": [{"name": "measured", "cost": 1.5, "curves": {"p99": [[0.0, 250000.0], [20000.0, 150000.0], [25000.0, 0.0]]}}]}"#,
    )
    .unwrap();
    let out = ok(&[
        "--units",
        path(&json),
        "--percentiles",
        "p99",
        "--groups",
        "mixed",
        "--tenants",
        "10",
        "--trials",
        "1",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["catalogue"]["unit"][0]["name"], "measured");
    assert_eq!(
        v["rows"][3]["per_type"].as_str().unwrap().split(':').next(),
        Some("measured")
    );
    let e = fails(&["--metric", "cosine"]);
    assert!(e.contains("unknown metric \"cosine\""), "{e}");
    let e = fails(&["--percentiles", "p90"]);
    assert!(e.contains("unknown percentile"), "{e}");
    let e = fails(&["--groups", "everyone"]);
    assert!(e.contains("unknown group \"everyone\""), "{e}");
    let e = fails(&["--write-weights", "3,6"]);
    assert!(e.contains("three weights"), "{e}");
    let e = fails(&["--units", "/nonexistent/units.toml"]);
    assert!(e.contains("/nonexistent/units.toml"), "{e}");
}
