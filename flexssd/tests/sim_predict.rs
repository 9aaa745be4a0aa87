//! Black-box tests of `flexssd sim predict`: one small real input (a CloudPhysics
//! 30-minute workload, about 300 windows) with every output, determinism, and bad
//! input named by file and line.

use std::path::{Path, PathBuf};

mod support;

fn ok(args: &[&str]) -> String {
    support::sim_ok("predict", args)
}

fn fails(args: &[&str]) -> String {
    support::sim_fails("predict", args)
}

fn traces() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/traces")
}

#[test]
fn one_real_workload_every_output_and_deterministic() {
    // The shared inputs are part of the checkout CI runs on: a missing input is
    // a broken setup, and a test that skipped would pass on it.
    let f = traces().join("cloudphysics-30min/w01.csv");
    assert!(
        f.exists(),
        "{} is missing: this test needs the shared traces (../shared/traces)",
        f.display()
    );
    let input = format!("cloudphysics:{}", f.display());
    let dir = tempfile::tempdir().unwrap();
    // Small models keep this fast in a debug build; the paper's sizes run in the script.
    let cfg = dir.path().join("small.toml");
    std::fs::write(&cfg, "epochs = 1\n[duration]\nhidden = 8\n").unwrap();
    let cfg = cfg.to_str().unwrap();
    let csv = dir.path().join("p.csv");
    let svg = dir.path().join("p.svg");
    let table = ok(&[
        "--input",
        &input,
        "--ratios",
        "0,5",
        "--config",
        cfg,
        "--csv",
        csv.to_str().unwrap(),
        "--plot",
        svg.to_str().unwrap(),
    ]);
    assert!(
        table.contains("bandwidth") && table.contains("capacity_duration"),
        "{table}"
    );
    let text = std::fs::read_to_string(&csv).unwrap();
    let mut lines = text.lines();
    assert_eq!(
        lines.next().unwrap(),
        "input,source,metric,model,ratio_pct,n,accuracy,over,under,waste"
    );
    let rows: Vec<Vec<String>> = lines
        .map(|l| l.split(',').map(String::from).collect())
        .collect();
    // 4 metrics x 4 models (lstm, quantile, quantile_online, last) x 2 ratios.
    assert_eq!(rows.len(), 32);
    for r in &rows {
        let acc: f64 = r[6].parse().unwrap();
        assert!((0.0..=1.0).contains(&acc), "{r:?}");
        if r[2] == "bandwidth" || r[2] == "capacity" {
            assert!(r[5].parse::<u64>().unwrap() > 250, "{r:?}");
        }
    }
    // (Over-provisioning cannot lower level accuracy by construction; what can
    // go wrong is the ratio not being applied, or the tallies disagreeing.)
    let col = |metric: &str, model: &str, ratio: f64, c: usize| -> f64 {
        rows.iter()
            .find(|r| r[2] == metric && r[3] == model && r[4].parse::<f64>().unwrap() == ratio)
            .unwrap()[c]
            .parse()
            .unwrap()
    };
    for metric in ["bandwidth", "capacity"] {
        for model in ["lstm", "quantile", "last"] {
            // Every judged window is accurate (provisioned >= actual) or under.
            for ratio in [0.0, 5.0] {
                let (acc, under) = (col(metric, model, ratio, 6), col(metric, model, ratio, 8));
                assert!(
                    (acc + under - 1.0).abs() < 1e-9,
                    "{metric} {model} {ratio}%: {acc} + {under}"
                );
                assert_eq!(
                    col(metric, model, ratio, 5),
                    col(metric, "lstm", 0.0, 5),
                    "same windows judged"
                );
            }
            // 5% raises every prediction that is neither 0 nor the whole device
            // by at least one unit: it must cost waste.
            assert!(
                col(metric, model, 5.0, 9) > col(metric, model, 0.0, 9),
                "{metric} {model}: 5% over-provisioning wastes no more than 0%"
            );
        }
    }
    assert!(std::fs::read_to_string(&svg).unwrap().starts_with("<svg"));
    // Same input, same numbers (a second run, as JSON, against the CSV).
    let json = ok(&[
        "--input", &input, "--ratios", "0,5", "--config", cfg, "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let v = v.as_array().unwrap();
    assert_eq!(v.len(), 32);
    for (j, r) in v.iter().zip(&rows) {
        assert_eq!(j["metric"].as_str().unwrap(), r[2]);
        let a: f64 = r[6].parse().unwrap();
        assert!(
            (j["accuracy"].as_f64().unwrap() - a).abs() < 1e-12,
            "{j} vs {r:?}"
        );
    }
}

#[test]
fn split_trains_on_some_inputs_and_reports_on_others() {
    let root = traces();
    for f in ["cloudphysics-30min/w01.csv", "cloudphysics-30min/w02.csv"] {
        assert!(
            root.join(f).exists(),
            "{} is missing: this test needs the shared traces (../shared/traces)",
            root.join(f).display()
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let split = dir.path().join("split.txt");
    std::fs::write(
        &split,
        "# one VM trains, another is reported\ntrain cloudphysics w01.csv\ntest cloudphysics w02.csv\n",
    )
    .unwrap();
    let (trade, cost, csv) = (
        dir.path().join("t.csv"),
        dir.path().join("c.csv"),
        dir.path().join("r.csv"),
    );
    let svg = dir.path().join("t.svg");
    ok(&[
        "--split",
        split.to_str().unwrap(),
        "--traces",
        root.to_str().unwrap(),
        "--models",
        "quantile",
        "--ratios",
        "0,5",
        "--csv",
        csv.to_str().unwrap(),
        "--tradeoff",
        trade.to_str().unwrap(),
        "--tradeoff-plot",
        svg.to_str().unwrap(),
        "--cost",
        cost.to_str().unwrap(),
    ]);
    let rows = std::fs::read_to_string(&csv).unwrap();
    // Only the test input is reported; no LSTM rows were asked for.
    assert!(
        rows.lines().skip(1).all(|l| l.starts_with("w02.csv,")),
        "{rows}"
    );
    assert!(!rows.contains(",lstm,") && rows.contains(",quantile,") && rows.contains(",last,"));
    let trade = std::fs::read_to_string(&trade).unwrap();
    assert_eq!(
        trade.lines().next().unwrap(),
        "input,source,metric,model,knob,accuracy,waste"
    );
    // The quantile sweep: a higher quantile is at least as accurate on levels.
    let acc = |knob: &str| -> f64 {
        trade
            .lines()
            .find(|l| l.contains(",bandwidth,quantile,") && l.contains(knob))
            .unwrap()
            .split(',')
            .nth(5)
            .unwrap()
            .parse()
            .unwrap()
    };
    assert!(acc("q=0.95") >= acc("q=0.50"), "{trade}");
    let cost = std::fs::read_to_string(&cost).unwrap();
    assert!(cost.contains("cloudphysics,bandwidth,quantile,"), "{cost}");
    assert!(std::fs::read_to_string(&svg).unwrap().starts_with("<svg"));
}

#[test]
fn bad_inputs_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad-bw.txt");
    std::fs::write(
        &bad,
        "total_obs: 2 diff:0 avg_duration: 1\n36 3\n18 three\n",
    )
    .unwrap();
    let e = fails(&["--input", &format!("blockflex:{}", bad.display())]);
    assert!(e.contains("bad-bw.txt:3: bad level \"three\""), "{e}");

    let bad = dir.path().join("w99.csv");
    std::fs::write(&bad, "ts,a,b\n1,2,3\n").unwrap();
    let e = fails(&["--input", &format!("cloudphysics:{}", bad.display())]);
    assert!(e.contains("w99.csv:1:"), "{e}");

    let e = fails(&["--input", "nosuchkind:/x"]);
    assert!(e.contains("unknown kind"), "{e}");
    let e = fails(&["--input", "blockflex:/no/such/file"]);
    assert!(e.contains("does not exist"), "{e}");
    let e = fails(&["--input", "blockflex"]);
    assert!(e.contains("KIND:PATH"), "{e}");
    let good = dir.path().join("ok-bw.txt");
    std::fs::write(&good, "total_obs: 1\n360 1\n").unwrap();
    let e = fails(&[
        "--input",
        &format!("blockflex:{}", good.display()),
        "--ratios=-5",
    ]);
    assert!(e.contains("ratios"), "{e}");
    let cfg = dir.path().join("c.toml");
    std::fs::write(&cfg, "ratoi = 1\n").unwrap();
    let e = fails(&[
        "--input",
        &format!("blockflex:{}", good.display()),
        "--config",
        cfg.to_str().unwrap(),
    ]);
    assert!(e.contains("c.toml"), "{e}");
    // The quantile model's settings are checked too.
    std::fs::write(
        &cfg,
        "model = \"quantile\"\n[quantile]\nlevel_quantile = 2.0\n",
    )
    .unwrap();
    let e = fails(&[
        "--input",
        &format!("blockflex:{}", good.display()),
        "--config",
        cfg.to_str().unwrap(),
        "--models",
        "quantile",
    ]);
    assert!(e.contains("quantile"), "{e}");
    let good_in = format!("blockflex:{}", good.display());
    let e = fails(&["--input", &good_in, "--models", "gru"]);
    assert!(e.contains("unknown model \"gru\""), "{e}");

    // Splits: the file, its lines, the files it names, and leaks are all checked.
    let e = fails(&["--split", "/no/such/split.txt"]);
    assert!(e.contains("read split file /no/such/split.txt"), "{e}");
    let split = dir.path().join("split.txt");
    let traces = dir.path().to_str().unwrap();
    std::fs::write(
        &split,
        "train blockflex ok-bw.txt\ntset blockflex ok-bw.txt\n",
    )
    .unwrap();
    let e = fails(&["--split", split.to_str().unwrap(), "--traces", traces]);
    assert!(
        e.contains("split.txt:2: expected `train|test KIND NAME`"),
        "{e}"
    );
    std::fs::write(&split, "test blockflex missing-bw.txt\n").unwrap();
    let e = fails(&["--split", split.to_str().unwrap(), "--traces", traces]);
    assert!(e.contains("does not exist"), "{e}");
    std::fs::write(&split, "train cloudphysics w99.csv\n").unwrap();
    let e = fails(&["--split", split.to_str().unwrap(), "--traces", traces]);
    assert!(e.contains("no test inputs"), "{e}");
    std::fs::write(&split, "test blockflex ../ok-bw.txt\n").unwrap();
    let e = fails(&["--split", split.to_str().unwrap(), "--traces", traces]);
    assert!(e.contains("must be a file name"), "{e}");
    let e = fails(&["--input", &good_in, "--train", &good_in]);
    assert!(e.contains("both a training and a test input"), "{e}");
    std::fs::write(&split, "test blockflex ok-bw.txt\n").unwrap();
    let e = fails(&["--split", split.to_str().unwrap(), "--input", &good_in]);
    assert!(e.contains("either --split or --input"), "{e}");
}

#[test]
fn inputs_too_short_to_evaluate_are_named() {
    let dir = tempfile::tempdir().unwrap();
    // 36 s: two windows of 18 s, none of them judged.
    let short = dir.path().join("short-bw.txt");
    std::fs::write(&short, "total_obs: 1\n36 1\n").unwrap();
    let short_in = format!("blockflex:{}", short.display());
    let e = fails(&["--input", &short_in, "--models", "quantile"]);
    assert!(
        e.contains("no input is long enough to evaluate")
            && e.contains("short-bw.txt (Bandwidth, 2 windows)")
            && e.contains("9 and 9 windows"),
        "{e}"
    );
    // Beside a long enough input: run, warn, and give no accuracy for it.
    let good = dir.path().join("ok-bw.txt");
    std::fs::write(&good, "total_obs: 1\n360 1\n").unwrap();
    let good_in = format!("blockflex:{}", good.display());
    let out = support::sim(
        "predict",
        &[
            "--input", &short_in, "--input", &good_in, "--models", "quantile", "--json",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("too short to evaluate, left out of the averages")
            && err.contains("short-bw.txt (Bandwidth, 2 windows)")
            && !err.contains("ok-bw.txt ("),
        "{err}"
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v.as_array().unwrap();
    assert!(!rows.is_empty());
    for r in rows {
        let n = r["n"].as_u64().unwrap();
        if r["input"] == "short-bw.txt" {
            assert_eq!(n, 0, "{r}");
        } else if r["metric"] == "bandwidth" {
            assert!(n > 0, "{r}");
        }
        // Nothing judged, no share: null, not 0.
        for k in ["accuracy", "over", "under", "waste"] {
            assert_eq!(r[k].is_null(), n == 0, "{k}: {r}");
        }
    }
}

#[test]
fn a_bad_config_is_blamed_not_the_trace() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("ok-bw.txt");
    std::fs::write(&good, "total_obs: 1\n360 1\n").unwrap();
    let good_in = format!("blockflex:{}", good.display());
    let cfg = dir.path().join("c.toml");
    for (toml, msg) in [
        ("levels = 0\n", "levels = 0: must be from 1 to 256"),
        (
            "levels = 100000\n",
            "levels = 100000: must be from 1 to 256",
        ),
        ("ratio = nan\n", "ratio = NaN: must be a number from 0 to 1"),
        ("ratio = -1.0\n", "ratio = -1: must be a number from 0 to 1"),
        (
            "train_every_s = 0.0\n",
            "train_every_s = 0: must be a number from 0.001",
        ),
        ("epochs = 0\n", "epochs = 0: must be from 1 to 10000"),
    ] {
        std::fs::write(&cfg, toml).unwrap();
        let e = fails(&["--input", &good_in, "--config", cfg.to_str().unwrap()]);
        assert!(e.contains("c.toml") && e.contains(msg), "{toml}: {e}");
        assert!(!e.contains("ok-bw.txt"), "{toml}: {e}");
    }
}
