//! Black-box tests of `flexssd sim harvest`: a small fleet with every output on
//! small input files, the real excerpts when they are present, determinism, and bad
//! input (missing file, malformed line, impossible parameters).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

mod support;

fn ok(args: &[&str]) -> String {
    support::sim_ok("harvest", args)
}

fn fails(args: &[&str]) -> String {
    support::sim_fails("harvest", args)
}

/// Writes small cluster and azure directories (made-up values in the real
/// formats) under `dir`; returns (cluster, azure).
fn inputs(dir: &Path) -> (PathBuf, PathBuf) {
    let c = dir.join("cluster");
    let a = dir.join("azure");
    std::fs::create_dir_all(&c).unwrap();
    std::fs::create_dir_all(&a).unwrap();
    let mut ali = String::new();
    for m in 0..3 {
        for i in 0..600u64 {
            let io = if (i / 30 + m) % 4 == 0 {
                55
            } else {
                3 + (i % 7)
            };
            writeln!(ali, "m_{m},{},40,90,,,1.0,1.0,{io}", 1000 + i * 60).unwrap();
        }
    }
    std::fs::write(c.join("alibaba-2018-machine_usage-excerpt.csv"), ali).unwrap();
    let mut g = String::new();
    for i in 0..400 {
        let d = 0.002 + 0.001 * ((i / 25) % 5) as f64;
        writeln!(
            g,
            "{i},2011-05-01 00:00:00,1,{},0.5,0.1,0.001,{d}",
            i * 600_000_000u64
        )
        .unwrap();
    }
    std::fs::write(c.join("google-2011-job617685-10min.csv"), g).unwrap();
    std::fs::write(
        a.join("azure-v1-flavor-map.txt"),
        "1,0.75 a\n2,4 h\n4,8 l\n8,16 n\n16,112 d\n",
    )
    .unwrap();
    let mut arr = String::new();
    for i in 1..=1000u64 {
        writeln!(arr, "{} a,h,|,l,n,|,a", i * 300).unwrap();
    }
    std::fs::write(a.join("azure-v1-vm-arrivals-train.txt"), arr).unwrap();
    (c, a)
}

fn small<'a>(c: &'a str, a: &'a str) -> Vec<&'a str> {
    vec![
        "--regular",
        "60",
        "--harvest",
        "600",
        "--hours",
        "24",
        "--warmup-hours",
        "6",
        "--unsold-hosts",
        "30",
        "--cluster-traces",
        c,
        "--azure",
        a,
    ]
}

#[test]
fn small_fleet_writes_every_output() {
    let d = tempfile::tempdir().unwrap();
    let (c, a) = inputs(d.path());
    let (c, a) = (c.to_str().unwrap(), a.to_str().unwrap());
    let csv = d.path().join("f.csv");
    let units = d.path().join("u.csv");
    let svg = d.path().join("f.svg");
    let mut args = small(c, a);
    args.extend([
        "--csv",
        csv.to_str().unwrap(),
        "--units-csv",
        units.to_str().unwrap(),
        "--plot",
        svg.to_str().unwrap(),
    ]);
    let table = ok(&args);
    assert!(table.contains("SYNTHETIC"), "{table}");
    assert!(table.contains("sold (60 homes"), "{table}");
    assert!(table.contains("unsold (30 homes"), "{table}");
    assert!(table.contains("early reclamations"), "{table}");
    let text = std::fs::read_to_string(&csv).unwrap();
    let mut lines = text.lines();
    assert!(lines
        .next()
        .unwrap()
        .starts_with("scenario,predictor,unit,resource,subset"));
    // sold: vm+ssd x capacity+bandwidth x all+under60; unsold: ssd x 2 x 2
    assert_eq!(lines.clone().count(), 8 + 4);
    assert!(lines.all(|l| l.ends_with(",synthetic")));
    assert_eq!(
        std::fs::read_to_string(&units).unwrap().lines().count(),
        1 + 60 + units_ssds(&units) + 30
    );
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(svg.contains("<svg") && svg.contains("Fig. 17"));

    // Same seed, same JSON numbers; every predictor runs.
    let mut j = small(c, a);
    j.push("--json");
    let one: serde_json::Value = serde_json::from_str(&ok(&j)).unwrap();
    let two: serde_json::Value = serde_json::from_str(&ok(&j)).unwrap();
    assert_eq!(one["scenarios"], two["scenarios"]);
    assert_eq!(one["provenance"]["harvest_tenants_synthetic"], true);
    let c0 = &one["scenarios"][0]["counters"];
    assert_eq!(c0["requests"], 600);
    conserves(c0);
    j.extend(["--predictor", "oracle", "--unsold-predictor", "oracle"]);
    let o: serde_json::Value = serde_json::from_str(&ok(&j)).unwrap();
    assert_eq!(o["scenarios"][0]["counters"]["reclamations"], 0);
    assert_eq!(o["scenarios"][0]["predictor"], "oracle");
}

/// The counters' conservation laws, which hold only if every tenant and every
/// gSSD is accounted for exactly once (`invariant_violations` is 0 by
/// construction of the reclamation check; these are not).
fn conserves(c: &serde_json::Value) {
    let n = |k: &str| {
        c[k].as_u64()
            .unwrap_or_else(|| panic!("no counter {k}: {c}"))
    };
    assert_eq!(
        n("requests"),
        n("completed") + n("exceptions") + n("unserved") + n("running_at_end"),
        "{c}"
    );
    assert_eq!(
        n("gssds_created"),
        n("live_at_end")
            + n("expired")
            + n("erased_on_release")
            + n("reclaimed_unassigned")
            + n("reclamations"),
        "{c}"
    );
    assert_eq!(n("reclamations"), n("migrations") + n("exceptions"), "{c}");
    assert_eq!(n("invariant_violations"), 0, "{c}");
}

fn units_ssds(units: &Path) -> usize {
    std::fs::read_to_string(units)
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("sold,ssd,"))
        .count()
}

#[test]
fn real_excerpts_run() {
    // The shared inputs are part of the checkout CI runs on: missing, the test
    // fails rather than passing on nothing.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/traces");
    assert!(
        root.join("cluster").is_dir() && root.join("azure").is_dir(),
        "{} has no cluster/ and azure/: this test needs the shared traces",
        root.display()
    );
    let (c, a) = (root.join("cluster"), root.join("azure"));
    let out = ok(&[
        "--regular",
        "200",
        "--harvest",
        "3000",
        "--hours",
        "48",
        "--unsold-hosts",
        "70",
        "--cluster-traces",
        c.to_str().unwrap(),
        "--azure",
        a.to_str().unwrap(),
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["provenance"]["real_regular"], 16);
    for s in v["scenarios"].as_array().unwrap() {
        conserves(&s["counters"]);
        // After is before plus what tenants use, so only a strict gain says
        // that served tenants' use is counted.
        let cap = &s["ssd_capacity"];
        assert!(s["counters"]["served"].as_u64().unwrap() > 0, "{s}");
        assert!(
            cap["avg_after"].as_f64().unwrap() > cap["avg_before"].as_f64().unwrap() + 1e-6,
            "{s}"
        );
    }
}

#[test]
fn bad_input_is_named() {
    let d = tempfile::tempdir().unwrap();
    let (c, a) = inputs(d.path());
    let (cs, as_) = (c.to_str().unwrap(), a.to_str().unwrap());

    // Missing directory / file.
    let e = fails(&["--cluster-traces", "/nonexistent/cluster", "--azure", as_]);
    assert!(
        e.contains("/nonexistent/cluster/alibaba-2018-machine_usage-excerpt.csv"),
        "{e}"
    );
    // Malformed line: file and line named.
    let g = c.join("google-2011-job617685-10min.csv");
    let mut text = std::fs::read_to_string(&g).unwrap();
    text.push_str("400,2011-05-01,1,0,0.5,0.1,0.001,lots\n");
    std::fs::write(&g, text).unwrap();
    let e = fails(&small(cs, as_));
    assert!(e.contains("google-2011-job617685-10min.csv:401:"), "{e}");
    assert!(e.contains("local_disk_space"), "{e}");
    let (c, _) = inputs(d.path());
    let arr = a.join("azure-v1-vm-arrivals-train.txt");
    std::fs::write(&arr, "300 a,h\n600 a,q\n").unwrap();
    let e = fails(&small(c.to_str().unwrap(), as_));
    assert!(
        e.contains("azure-v1-vm-arrivals-train.txt:2: unknown flavour \"q\""),
        "{e}"
    );
    let (c, a) = inputs(d.path());
    let (cs, as_) = (c.to_str().unwrap(), a.to_str().unwrap());
    // Impossible parameters.
    let mut args = small(cs, as_);
    args[5] = "0"; // --hours 0
    assert!(fails(&args).contains("--hours"));
    let mut args = small(cs, as_);
    args[5] = "5000"; // more hours than the arrivals cover
    assert!(fails(&args).contains("Azure bins"));
    let mut args = small(cs, as_);
    args.extend(["--predictor", "crystal-ball"]);
    assert!(fails(&args).contains("unknown predictor"));
}

#[test]
fn predictors_compare_on_one_fleet_and_splitting_serves_more() {
    let d = tempfile::tempdir().unwrap();
    let (c, a) = inputs(d.path());
    let (c, a) = (c.to_str().unwrap(), a.to_str().unwrap());
    let csv = d.path().join("p.csv");
    let svg = d.path().join("p.svg");
    let mut args = small(c, a);
    args.extend([
        "--scenario",
        "sold",
        "--predictor",
        "oracle,last,histogram",
        "--per-predictor-csv",
        csv.to_str().unwrap(),
        "--per-predictor-plot",
        svg.to_str().unwrap(),
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&ok(&args)).unwrap();
    let runs = v["scenarios"].as_array().unwrap();
    let names: Vec<&str> = runs
        .iter()
        .map(|s| s["predictor"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["oracle", "last", "histogram"]);
    for s in runs {
        conserves(&s["counters"]);
    }
    let text = std::fs::read_to_string(&csv).unwrap();
    let rows: Vec<&str> = text.lines().collect();
    assert!(rows[0].starts_with("predictor,homes,requests,served,split_served,capacity_gb_hours"));
    assert_eq!(rows.len(), 4);
    for (row, s) in rows[1..].iter().zip(runs) {
        let f: Vec<&str> = row.split(',').collect();
        assert_eq!(f[0], s["predictor"].as_str().unwrap());
        assert_eq!(f[5], s["counters"]["capacity_gb_hours"].to_string());
        assert_eq!(*f.last().unwrap(), "synthetic");
    }
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(
        svg.contains("<svg") && svg.contains("capacity harvested") && svg.contains("histogram")
    );

    // Without the split, no demand is served on several gSSDs, and fewer are.
    let mut j = small(c, a);
    j.extend(["--scenario", "sold", "--predictor", "oracle", "--json"]);
    let with: serde_json::Value = serde_json::from_str(&ok(&j)).unwrap();
    j.push("--no-split");
    let without: serde_json::Value = serde_json::from_str(&ok(&j)).unwrap();
    let (w, wo) = (
        &with["scenarios"][0]["counters"],
        &without["scenarios"][0]["counters"],
    );
    assert_eq!(wo["split_served"], 0, "{wo}");
    assert!(w["split_served"].as_u64().unwrap() > 0, "{w}");
    assert!(w["served"].as_u64().unwrap() > wo["served"].as_u64().unwrap());
    assert_eq!(without["config"]["split"], false);
}

/// `--predictor-config` sets the learned predictors as the daemon's
/// `[harvest.predictor]` does: a higher duration quantile with no
/// provisioning promises longer and lends more; the settings given are echoed
/// in the JSON; a misspelt key or an impossible value is named.
#[test]
fn learned_predictors_take_their_settings_from_a_file() {
    let d = tempfile::tempdir().unwrap();
    let (c, a) = inputs(d.path());
    let (c, a) = (c.to_str().unwrap(), a.to_str().unwrap());
    let f = d.path().join("learned.toml");
    let fs = f.to_str().unwrap();
    let args = |with_file: bool| {
        let mut v = small(c, a);
        v.extend(["--scenario", "sold", "--predictor", "quantile"]);
        if with_file {
            v.extend(["--predictor-config", fs]);
        }
        v
    };
    let json = |with_file: bool| -> serde_json::Value {
        let mut v = args(with_file);
        v.push("--json");
        serde_json::from_str(&ok(&v)).unwrap()
    };
    std::fs::write(&f, "ratio = 0.0\n[quantile]\nduration_quantile = 0.5\n").unwrap();
    let (base, long) = (json(false), json(true));
    assert!(base.get("predictor_config").is_none(), "{base}");
    assert_eq!(
        long["predictor_config"]["quantile"]["duration_quantile"],
        0.5
    );
    let granted = |v: &serde_json::Value| {
        v["scenarios"][0]["counters"]["capacity_gb_hours"]
            .as_u64()
            .unwrap()
    };
    assert!(
        granted(&long) > granted(&base),
        "{} TB-hours with the longer promise against {}",
        granted(&long),
        granted(&base)
    );
    std::fs::write(&f, "[quantile]\nduration_quantil = 0.5\n").unwrap();
    let e = fails(&args(true));
    assert!(
        e.contains("learned.toml") && e.contains("duration_quantil"),
        "{e}"
    );
    std::fs::write(&f, "[quantile]\nduration_quantile = 1.5\n").unwrap();
    let e = fails(&args(true));
    assert!(
        e.contains("learned.toml")
            && e.contains("quantile.duration_quantile = 1.5: must be a number from 0 to 1"),
        "{e}"
    );
    // Every setting is checked, the LSTMs' too, naming its key.
    std::fs::write(&f, "epochs = 0\n").unwrap();
    let e = fails(&args(true));
    assert!(
        e.contains("learned.toml") && e.contains("epochs = 0: must be from 1 to 10000"),
        "{e}"
    );
}
