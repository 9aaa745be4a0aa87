//! Black-box tests of `flexssd sim elastic`'s bad input: times and flags out of
//! range get an error naming them, never a replay that does not end or prints a
//! wrapped duration.

use std::path::Path;

mod support;

fn ok(args: &[&str]) -> String {
    support::sim_ok("elastic", args)
}

fn fails(args: &[&str]) -> String {
    support::sim_fails("elastic", args)
}

fn trace(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_string()
}

#[test]
fn a_short_replay_runs() {
    let d = tempfile::tempdir().unwrap();
    let t = trace(d.path(), "u.csv", "t_s,used\n0,100\n60,1000000000\n");
    let out = ok(&["--usage-trace", &t, "--end-s", "120"]);
    assert!(out.contains(", 120 s, "), "{out}");
}

#[test]
fn out_of_range_trace_times_are_named_by_line() {
    let d = tempfile::tempdir().unwrap();
    // 1e30 s saturated to u64::MAX ns and the replay never ended.
    let t = trace(d.path(), "h.csv", "t_s,used\n0,100\n1e30,10\n");
    let e = fails(&["--usage-trace", &t]);
    assert!(e.contains("h.csv:3: t_s \"1e30\" is over 31622400"), "{e}");
    let t = trace(d.path(), "u.csv", "t_s,used\n0,1e30\n");
    let e = fails(&["--usage-trace", &t]);
    assert!(e.contains("u.csv:2: used \"1e30\" is over"), "{e}");
}

#[test]
fn flags_out_of_range_are_refused() {
    let d = tempfile::tempdir().unwrap();
    let t = trace(d.path(), "u.csv", "t_s,used\n10,100\n60,1000\n");
    for (args, msg) in [
        (
            &["--end-s=-5"][..],
            "--end-s must be from the trace's first point, 10 s",
        ),
        (&["--end-s", "NaN"], "--end-s must be from"),
        (&["--end-s", "5"], "got 5"),
        (&["--end-s", "1e30"], "--end-s must be from"),
        (
            &["--time-scale", "1e-12"],
            "after scaling times by --time-scale 0.000000000001",
        ),
        (
            &["--time-scale", "0"],
            "--time-scale must be a positive number, got 0",
        ),
        (
            &["--time-scale", "NaN"],
            "--time-scale must be a positive number, got NaN",
        ),
        (
            &["--add-s", "NaN"],
            "--add-s must be from 0 to 31622400 seconds, got NaN",
        ),
        (
            &["--add-s=-5"],
            "--add-s must be from 0 to 31622400 seconds, got -5",
        ),
        (
            &["--remove-s", "1e30"],
            "--remove-s must be from 0 to 31622400 seconds",
        ),
        (
            &["--move-mibps", "0"],
            "--move-mibps must be a positive number, got 0",
        ),
        (
            &["--move-mibps", "NaN"],
            "--move-mibps must be a positive number, got NaN",
        ),
        (
            &["--move-mibps=-1"],
            "--move-mibps must be a positive number, got -1",
        ),
    ] {
        let mut a = vec!["--usage-trace", t.as_str()];
        a.extend_from_slice(args);
        let e = fails(&a);
        assert!(e.contains(msg), "{args:?}: {e}");
        assert!(!e.contains("18446744074"), "{args:?}: {e}");
    }
}
