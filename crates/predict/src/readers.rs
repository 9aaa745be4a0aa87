//! Readers for the predictor inputs in `shared/traces/`: the BlockFlex artifact's
//! level files and the CloudPhysics 30-minute feature CSVs. They parse any
//! `BufRead` (the caller opens the file) and name the file and line of bad input.

use std::io::BufRead;

use crate::vssd::WindowStats;
use crate::PredictError;

/// Seconds per step when stepping through a BlockFlex input, as the artifact does.
pub const BLOCKFLEX_STEP_S: f64 = 18.0;
/// The artifact stops reading after the line that takes it past this many steps.
pub const BLOCKFLEX_MAX_STEPS: usize = 10_000;

/// A series of levels at a fixed step.
#[derive(Debug, Clone, PartialEq)]
pub struct LevelSeries {
    /// Seconds between consecutive levels.
    pub step_s: f64,
    /// One level per step.
    pub levels: Vec<u32>,
}

/// A series of per-window statistics at a fixed window length.
#[derive(Debug, Clone, PartialEq)]
pub struct WindowSeries {
    /// Seconds per window.
    pub step_s: f64,
    /// One entry per window, fractions of the workload's peak.
    pub windows: Vec<WindowStats>,
}

fn bad(file: &str, line: usize, msg: impl Into<String>) -> PredictError {
    PredictError::Parse {
        file: file.to_string(),
        line,
        msg: msg.into(),
    }
}

/// Reads a BlockFlex predictor input (`total_obs: ...` header, then `duration_s level`
/// lines) into steps of [`BLOCKFLEX_STEP_S`]: a line of duration `d` becomes
/// `ceil(d / 18)` steps of its level, and reading stops after the line that takes the
/// series past [`BLOCKFLEX_MAX_STEPS`] steps (the artifact's `read_input`). Levels above
/// `max_level` are an error.
///
/// One line counts for at most [`BLOCKFLEX_MAX_STEPS`] steps (50 hours): a longer
/// duration could only be corrupt (the artifact's inputs hold lines of at most about
/// 7 hours), and expanding it whole would exhaust memory (`1e12 4.0` is 55 billion
/// steps) before reading stops.
pub fn read_blockflex<R: BufRead>(
    r: R,
    file: &str,
    max_level: u32,
) -> Result<LevelSeries, PredictError> {
    let mut levels = Vec::new();
    let mut lines = r.lines().enumerate();
    match lines.next() {
        Some((_, Ok(h))) if h.trim_start().starts_with("total_obs:") => {}
        Some((_, Ok(h))) => {
            return Err(bad(
                file,
                1,
                format!("expected a `total_obs: ...` header, found {h:?}"),
            ))
        }
        Some((_, Err(e))) => return Err(bad(file, 1, e.to_string())),
        None => return Err(bad(file, 1, "empty file")),
    }
    for (i, l) in lines {
        let n = i + 1;
        let l = l.map_err(|e| bad(file, n, e.to_string()))?;
        if l.trim().is_empty() {
            continue;
        }
        let mut f = l.split_whitespace();
        let (Some(d), Some(v), None) = (f.next(), f.next(), f.next()) else {
            return Err(bad(
                file,
                n,
                format!("expected `duration_s level`, found {l:?}"),
            ));
        };
        let d: f64 = d
            .parse()
            .map_err(|_| bad(file, n, format!("bad duration {d:?}")))?;
        let v: f64 = v
            .parse()
            .map_err(|_| bad(file, n, format!("bad level {v:?}")))?;
        if !d.is_finite() || d < 0.0 {
            return Err(bad(
                file,
                n,
                format!("duration {d} is not a non-negative number"),
            ));
        }
        if !v.is_finite() || v < 0.0 || v as u32 > max_level {
            return Err(bad(file, n, format!("level {v} outside 0..={max_level}")));
        }
        // Capped before the cast and the allocation: see the doc comment.
        let steps = (d / BLOCKFLEX_STEP_S)
            .ceil()
            .min(BLOCKFLEX_MAX_STEPS as f64) as usize;
        levels.extend(std::iter::repeat_n(v as u32, steps));
        if levels.len() > BLOCKFLEX_MAX_STEPS {
            break;
        }
    }
    if levels.is_empty() {
        return Err(bad(file, 2, "no level lines"));
    }
    Ok(LevelSeries {
        step_s: BLOCKFLEX_STEP_S,
        levels,
    })
}

/// Window length of the CloudPhysics feature files.
pub const CLOUDPHYSICS_WINDOW_S: f64 = 1800.0;

/// Reads a CloudPhysics 30-minute feature CSV (12 columns, header first) into
/// per-window statistics: bandwidth = bytes moved per window, IOPS = requests per
/// window, utilisation = the page working set of the window; each as a fraction of
/// its peak over the file (standing in for the vSSD's provisioned bandwidth and
/// capacity). The files hold sums per window, so max = min = average.
pub fn read_cloudphysics<R: BufRead>(r: R, file: &str) -> Result<WindowSeries, PredictError> {
    let mut lines = r.lines().enumerate();
    match lines.next() {
        Some((_, Ok(h))) if h.split(',').count() == 12 && h.starts_with("ts,") => {}
        Some((_, Ok(h))) => {
            return Err(bad(
                file,
                1,
                format!("expected the 12-column header starting `ts,`, found {h:?}"),
            ))
        }
        Some((_, Err(e))) => return Err(bad(file, 1, e.to_string())),
        None => return Err(bad(file, 1, "empty file")),
    }
    let mut raw = Vec::new();
    for (i, l) in lines {
        let n = i + 1;
        let l = l.map_err(|e| bad(file, n, e.to_string()))?;
        if l.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = l.split(',').collect();
        if f.len() != 12 {
            return Err(bad(
                file,
                n,
                format!("expected 12 fields, found {}", f.len()),
            ));
        }
        let mut v = [0f64; 12];
        for (k, s) in f.iter().enumerate() {
            v[k] = s
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|x| x.is_finite() && *x >= 0.0)
                .ok_or_else(|| {
                    bad(
                        file,
                        n,
                        format!("field {} is not a non-negative number: {s:?}", k + 1),
                    )
                })?;
        }
        raw.push((v[4], v[1], v[9]));
    }
    if raw.is_empty() {
        return Err(bad(file, 2, "no data lines"));
    }
    let peak = |g: fn(&(f64, f64, f64)) -> f64| {
        raw.iter().map(g).fold(0.0, f64::max).max(f64::MIN_POSITIVE)
    };
    let (pb, pi, pu) = (peak(|r| r.0), peak(|r| r.1), peak(|r| r.2));
    Ok(WindowSeries {
        step_s: CLOUDPHYSICS_WINDOW_S,
        windows: raw
            .iter()
            .map(|r| WindowStats::flat((r.0 / pb) as f32, (r.1 / pi) as f32, (r.2 / pu) as f32))
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blockflex_steps_like_the_artifact() {
        let s = read_blockflex(
            "total_obs: 2 diff:0 avg_duration: 1\n36.0 3.0\n19 1\n".as_bytes(),
            "x",
            16,
        )
        .unwrap();
        assert_eq!(s.levels, vec![3, 3, 1, 1]);
        // Stops after the line that passes 10,000 steps.
        let big = format!("total_obs: 3\n{} 2\n36 5\n36 6\n", 18.0 * 9_999.0);
        let s = read_blockflex(big.as_bytes(), "x", 16).unwrap();
        assert_eq!(s.levels.len(), 10_001);
        assert_eq!(*s.levels.last().unwrap(), 5);
    }

    #[test]
    fn a_huge_duration_counts_for_at_most_the_step_limit() {
        // 1e12 s is 55 billion steps, 1e300 overflows usize: both once took the
        // allocator down.
        for d in ["1e12", "1e300", "1.7976931348623157e308"] {
            let text = format!("total_obs: 2\n36 1\n{d} 4.0\n36 2\n");
            let s = read_blockflex(text.as_bytes(), "x", 16).unwrap();
            assert_eq!(s.levels.len(), 2 + BLOCKFLEX_MAX_STEPS, "{d}");
            assert_eq!(s.levels[..3], [1, 1, 4], "{d}");
            assert_eq!(*s.levels.last().unwrap(), 4, "{d}");
        }
        // Up to the limit a line keeps all its steps, as in the artifact.
        let text = format!("total_obs: 2\n36 1\n{} 4\n", 18.0 * 10_000.0);
        let s = read_blockflex(text.as_bytes(), "x", 16).unwrap();
        assert_eq!(s.levels.len(), 2 + 10_000);
        let e = read_blockflex("total_obs: 2\ninf 4\n".as_bytes(), "a.txt", 16).unwrap_err();
        assert!(e.to_string().starts_with("a.txt:2: duration inf"), "{e}");
    }

    #[test]
    fn blockflex_errors_name_file_and_line() {
        let e = read_blockflex("total_obs: 2\n36 3\n36 x\n".as_bytes(), "a.txt", 16).unwrap_err();
        assert_eq!(e.to_string(), "a.txt:3: bad level \"x\"");
        let e = read_blockflex("total_obs: 2\n36 3 4\n".as_bytes(), "a.txt", 16).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("a.txt:2: expected `duration_s level`"),
            "{e}"
        );
        let e = read_blockflex("36 3\n".as_bytes(), "a.txt", 16).unwrap_err();
        assert!(
            e.to_string().starts_with("a.txt:1: expected a `total_obs"),
            "{e}"
        );
        let e = read_blockflex("total_obs: 2\n36 17\n".as_bytes(), "a.txt", 16).unwrap_err();
        assert_eq!(e.to_string(), "a.txt:2: level 17 outside 0..=16");
        let e = read_blockflex("total_obs: 2\n-1 1\n".as_bytes(), "a.txt", 16).unwrap_err();
        assert!(e.to_string().starts_with("a.txt:2: duration"), "{e}");
        assert!(read_blockflex("total_obs: 0\n".as_bytes(), "a.txt", 16).is_err());
    }

    const HDR: &str = "ts,block_req_count,read_block_req_count,write_block_req_count,io_request_size_sum,read_io_request_size_sum,write_io_request_size_sum,seq_count,range,page_working_set_size,read_page_working_set_size,write_page_working_set_size\n";

    #[test]
    fn cloudphysics_fractions_of_peak() {
        let csv =
            format!("{HDR}1,10,0,10,400,0,400,0,0,50,0,50\n2,20,0,20,800,0,800,0,0,100,0,100\n");
        let s = read_cloudphysics(csv.as_bytes(), "w.csv").unwrap();
        assert_eq!(s.windows.len(), 2);
        assert_eq!(s.windows[0], WindowStats::flat(0.5, 0.5, 0.5));
        assert_eq!(s.windows[1].bw_max, 1.0);
    }

    #[test]
    fn cloudphysics_errors_name_file_and_line() {
        let csv = format!("{HDR}1,10,0,10,400,0,400,0,0,50,0,50\n2,20,0,20\n");
        let e = read_cloudphysics(csv.as_bytes(), "w.csv").unwrap_err();
        assert_eq!(e.to_string(), "w.csv:3: expected 12 fields, found 4");
        let csv = format!("{HDR}1,10,0,10,abc,0,400,0,0,50,0,50\n");
        let e = read_cloudphysics(csv.as_bytes(), "w.csv").unwrap_err();
        assert!(e.to_string().starts_with("w.csv:2: field 5"), "{e}");
        let e = read_cloudphysics("a,b\n".as_bytes(), "w.csv").unwrap_err();
        assert!(e.to_string().starts_with("w.csv:1:"), "{e}");
        assert!(read_cloudphysics(HDR.as_bytes(), "w.csv").is_err());
    }
}
