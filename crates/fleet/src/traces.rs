//! Readers for the real cluster and Azure excerpts the fleet is built from.
//!
//! The simulator itself is free of I/O; these readers are the one place that touches
//! files, so that a bad input is reported once, with its file and line, before any
//! simulation starts. Every series is resampled to the simulator's 5-minute step
//! ([`crate::STEP_S`]), the granularity of the Azure arrival bins.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use crate::FleetError;

/// Per-machine bandwidth usage from Alibaba 2018 `machine_usage` (`disk_io_percent`),
/// as a fraction of the device's bandwidth, one value per 5-minute bin.
#[derive(Debug, Clone, PartialEq)]
pub struct MachineSeries {
    /// Machine name (`m_1932`, ...).
    pub machine: String,
    /// Mean `disk_io_percent / 100` of the samples in each bin; a bin with no sample
    /// repeats the previous one.
    pub bw: Vec<f32>,
}

/// The real inputs of a fleet: cluster excerpts and Azure arrivals.
#[derive(Debug, Clone, PartialEq)]
pub struct Inputs {
    /// Alibaba machines' bandwidth series (real).
    pub alibaba: Vec<MachineSeries>,
    /// Google 2011 job local disk space, normalised by its maximum, one value per
    /// 5-minute step (each 10-minute bin repeated twice) (real).
    pub google_capacity: Vec<f32>,
    /// Azure VM arrivals per 5-minute bin: the channels (cores, one channel per core
    /// of a 16-core server, at most 16) of each arriving VM; bin `i` is step `i`.
    pub azure_bins: Vec<Vec<u8>>,
}

fn io_err(path: &Path, e: std::io::Error) -> FleetError {
    FleetError::Io {
        path: path.to_path_buf(),
        source: e,
    }
}

fn parse_err(path: &Path, line: usize, msg: impl Into<String>) -> FleetError {
    FleetError::Parse {
        path: path.to_path_buf(),
        line,
        msg: msg.into(),
    }
}

/// The file names expected in a cluster directory.
pub const ALIBABA_FILE: &str = "alibaba-2018-machine_usage-excerpt.csv";
/// Google 2011 job excerpt in a cluster directory.
pub const GOOGLE_FILE: &str = "google-2011-job617685-10min.csv";
/// Azure flavour map in an azure directory.
pub const AZURE_FLAVORS: &str = "azure-v1-flavor-map.txt";
/// Prefix of the Azure arrival files (`-train.txt`, `-dev.txt`).
pub const AZURE_ARRIVALS_PREFIX: &str = "azure-v1-vm-arrivals-";

/// The latest time stamp the readers accept, in seconds from the start of a trace:
/// 366 days. Both Alibaba `machine_usage` and the Azure arrivals count seconds from
/// the start of their trace (the Alibaba 2018 excerpt spans 8 days, the Azure v1
/// arrivals 30), and both are binned densely, one entry per 5-minute step from the
/// first time stamp; a later time stamp is a corrupt line, and would make a vector
/// of trillions of bins.
pub const MAX_TIME_S: u64 = 366 * 24 * 3600;

/// Parses a time stamp column, refusing one past [`MAX_TIME_S`].
fn parse_time(path: &Path, ln: usize, what: &str, text: &str) -> Result<u64, FleetError> {
    let t: u64 = text
        .trim()
        .parse()
        .map_err(|_| parse_err(path, ln, format!("bad {what} {text:?}")))?;
    if t > MAX_TIME_S {
        return Err(parse_err(
            path,
            ln,
            format!(
                "{what} {t} s is past {MAX_TIME_S} s (366 days), the longest trace the \
                 5-minute bins take"
            ),
        ));
    }
    Ok(t)
}

/// Reads Alibaba `machine_usage` lines (`machine_id,time_stamp_s,...,disk_io_percent`,
/// 9 columns, no header) into 5-minute bandwidth bins per machine, machines in name
/// order. Bins start at each file's first time stamp.
pub fn read_alibaba(text: &str, path: &Path) -> Result<Vec<MachineSeries>, FleetError> {
    let mut samples: BTreeMap<String, Vec<(u64, f32)>> = BTreeMap::new();
    let mut t0 = u64::MAX;
    for (i, line) in text.lines().enumerate() {
        let ln = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split(',').collect();
        if f.len() != 9 {
            return Err(parse_err(
                path,
                ln,
                format!("expected 9 comma-separated columns, found {}", f.len()),
            ));
        }
        let t = parse_time(path, ln, "time stamp", f[1])?;
        let io: f32 = f[8]
            .trim()
            .parse()
            .map_err(|_| parse_err(path, ln, format!("bad disk_io_percent {:?}", f[8])))?;
        // The trace marks unknown samples with -1 and 101: skip them (a bin with no
        // valid sample repeats the previous one). Anything else out of range is bad.
        if io == -1.0 || io == 101.0 {
            continue;
        }
        if !(0.0..=100.0).contains(&io) {
            return Err(parse_err(
                path,
                ln,
                format!("disk_io_percent {io} outside 0..100"),
            ));
        }
        t0 = t0.min(t);
        samples
            .entry(f[0].trim().to_string())
            .or_default()
            .push((t, io / 100.0));
    }
    if samples.is_empty() {
        return Err(parse_err(path, 0, "no samples"));
    }
    let step = crate::STEP_S;
    Ok(samples
        .into_iter()
        .map(|(machine, s)| {
            let first = s.iter().map(|x| x.0).min().unwrap_or(t0);
            let last = s.iter().map(|x| x.0).max().unwrap_or(t0);
            let n = ((last - first) / step + 1) as usize;
            let mut sum = vec![0f32; n];
            let mut cnt = vec![0u32; n];
            for (t, v) in s {
                let b = ((t - first) / step) as usize;
                sum[b] += v;
                cnt[b] += 1;
            }
            let mut bw = Vec::with_capacity(n);
            let mut prev = 0.0;
            for b in 0..n {
                if cnt[b] > 0 {
                    prev = sum[b] / cnt[b] as f32;
                }
                bw.push(prev);
            }
            MachineSeries { machine, bw }
        })
        .collect())
}

/// Reads the Google 2011 job excerpt (`idx,datetime,job_id,t_us,cpu,mem,disk_io_time,
/// local_disk_space`, no header, 10-minute bins) into local disk space normalised by
/// its maximum, repeated to 5-minute steps.
pub fn read_google(text: &str, path: &Path) -> Result<Vec<f32>, FleetError> {
    let mut v = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let ln = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split(',').collect();
        if f.len() != 8 {
            return Err(parse_err(
                path,
                ln,
                format!("expected 8 comma-separated columns, found {}", f.len()),
            ));
        }
        let d: f64 = f[7]
            .trim()
            .parse()
            .map_err(|_| parse_err(path, ln, format!("bad local_disk_space {:?}", f[7])))?;
        if !d.is_finite() || d < 0.0 {
            return Err(parse_err(
                path,
                ln,
                format!("local_disk_space {d} is negative or not finite"),
            ));
        }
        v.push(d);
    }
    let max = v.iter().cloned().fold(0.0, f64::max);
    if v.is_empty() || max <= 0.0 {
        return Err(parse_err(path, 0, "no positive local_disk_space value"));
    }
    Ok(v.iter()
        .flat_map(|&d| {
            let x = (d / max) as f32;
            [x, x]
        })
        .collect())
}

/// Reads the Azure flavour map (`cores,memory_GB letter` per line) into channels per
/// letter: one channel per core of a 16-core, 16-channel server, at most 16.
pub fn read_flavors(text: &str, path: &Path) -> Result<BTreeMap<char, u8>, FleetError> {
    let mut m = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let ln = i + 1;
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let (spec, letter) = line
            .split_once(' ')
            .ok_or_else(|| parse_err(path, ln, "expected `cores,memory_GB letter`"))?;
        let cores: f64 = spec
            .split(',')
            .next()
            .unwrap_or("")
            .parse()
            .map_err(|_| parse_err(path, ln, format!("bad core count in {spec:?}")))?;
        let mut ch = letter.trim().chars();
        let (Some(c), None) = (ch.next(), ch.next()) else {
            return Err(parse_err(
                path,
                ln,
                format!("flavour {letter:?} is not one letter"),
            ));
        };
        if cores.is_nan() || cores < 1.0 {
            return Err(parse_err(path, ln, format!("core count {cores} below 1")));
        }
        m.insert(c, cores.min(16.0).round() as u8);
    }
    if m.is_empty() {
        return Err(parse_err(path, 0, "no flavours"));
    }
    Ok(m)
}

/// Reads one Azure arrival file (`time_s` then a comma list of flavour letters, `|`
/// between batches) into `(time_s, channels of each VM)`.
pub fn read_arrivals(
    text: &str,
    path: &Path,
    flavors: &BTreeMap<char, u8>,
) -> Result<Vec<(u64, Vec<u8>)>, FleetError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let ln = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let (t, rest) = line.split_once(' ').unwrap_or((line, ""));
        let t = parse_time(path, ln, "time", t)?;
        let mut vms = Vec::new();
        for tok in rest.split(',') {
            let tok = tok.trim();
            if tok.is_empty() || tok == "|" {
                continue;
            }
            let mut cs = tok.chars();
            let ch = match (cs.next(), cs.next()) {
                (Some(c), None) => flavors.get(&c).copied(),
                _ => None,
            };
            vms.push(ch.ok_or_else(|| parse_err(path, ln, format!("unknown flavour {tok:?}")))?);
        }
        out.push((t, vms));
    }
    Ok(out)
}

fn read(path: &Path) -> Result<String, FleetError> {
    fs::read_to_string(path).map_err(|e| io_err(path, e))
}

/// Loads everything from a cluster directory (the two excerpt files by name) and an
/// Azure directory (the flavour map and every `azure-v1-vm-arrivals-*.txt`, merged
/// and placed in 5-minute bins by time).
pub fn load(cluster: &Path, azure: &Path) -> Result<Inputs, FleetError> {
    let p = cluster.join(ALIBABA_FILE);
    let alibaba = read_alibaba(&read(&p)?, &p)?;
    let p = cluster.join(GOOGLE_FILE);
    let google_capacity = read_google(&read(&p)?, &p)?;
    let p = azure.join(AZURE_FLAVORS);
    let flavors = read_flavors(&read(&p)?, &p)?;
    let mut files: Vec<PathBuf> = fs::read_dir(azure)
        .map_err(|e| io_err(azure, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(AZURE_ARRIVALS_PREFIX) && n.ends_with(".txt"))
        })
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(io_err(
            &azure.join(format!("{AZURE_ARRIVALS_PREFIX}*.txt")),
            std::io::Error::new(std::io::ErrorKind::NotFound, "no arrival files"),
        ));
    }
    let mut all = Vec::new();
    for p in &files {
        all.extend(read_arrivals(&read(p)?, p, &flavors)?);
    }
    Ok(Inputs {
        alibaba,
        google_capacity,
        azure_bins: bin_arrivals(all),
    })
}

/// Places arrivals in 5-minute bins counted from the earliest one. The bins are
/// dense, one per step from the earliest to the latest arrival: times come from
/// [`read_arrivals`], which bounds them by [`MAX_TIME_S`].
pub fn bin_arrivals(mut all: Vec<(u64, Vec<u8>)>) -> Vec<Vec<u8>> {
    all.sort_by_key(|a| a.0);
    let Some(t0) = all.first().map(|a| a.0) else {
        return Vec::new();
    };
    let n = ((all.last().map_or(t0, |a| a.0) - t0) / crate::STEP_S + 1) as usize;
    let mut bins = vec![Vec::new(); n];
    for (t, vms) in all {
        bins[((t - t0) / crate::STEP_S) as usize].extend(vms);
    }
    bins
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alibaba_bins_and_errors() {
        let p = Path::new("a.csv");
        let s = read_alibaba(
            "m_1,0,1,1,,,1,1,10\nm_1,100,1,1,,,1,1,30\nm_1,700,1,1,,,1,1,50\nm_2,5,1,1,,,1,1,4\n",
            p,
        )
        .unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].machine, "m_1");
        // bins of 300 s: [0,300): mean(10,30)=20%; [300,600): none -> repeat; [600,900): 50%
        assert_eq!(s[0].bw, vec![0.2, 0.2, 0.5]);
        let e = read_alibaba("m_1,0,1,1,,,1,1,10\nm_1,x,1,1,,,1,1,10\n", p).unwrap_err();
        assert_eq!(e.to_string(), "a.csv:2: bad time stamp \"x\"");
        let e = read_alibaba("m_1,0,1\n", p).unwrap_err();
        assert!(e.to_string().starts_with("a.csv:1: expected 9"), "{e}");
        let s = read_alibaba(
            "m_1,0,1,1,,,1,1,-1\nm_1,1,1,1,,,1,1,101\nm_1,2,1,1,,,1,1,7\n",
            p,
        );
        assert_eq!(
            s.unwrap()[0].bw,
            vec![0.07],
            "-1 and 101 mark unknown samples"
        );
        let e = read_alibaba("m_1,0,1,1,,,1,1,130\n", p).unwrap_err();
        assert!(e.to_string().contains("outside 0..100"), "{e}");
    }

    #[test]
    fn a_time_stamp_past_a_year_is_refused_with_its_line() {
        let p = Path::new("a.csv");
        // The probe's line: once a dense vector of 3e15 bins.
        let e = read_alibaba(
            "m_1932,0,41,92,,,43.04,33.08,5\nm_1932,999999999999999999,41,92,,,43.04,33.08,5\n",
            p,
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("a.csv:2: time stamp 999999999999999999 s is past 31622400 s"),
            "{e}"
        );
        let ok = format!("m_1,0,1,1,,,1,1,10\nm_1,{MAX_TIME_S},1,1,,,1,1,10\n");
        assert_eq!(read_alibaba(&ok, p).unwrap()[0].bw.len(), 105_409);

        let f = read_flavors("1,0.75 a\n", p).unwrap();
        let x = Path::new("x.txt");
        let e = read_arrivals("300 a\n18000000000000000000 a\n", x, &f).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("x.txt:2: time 18000000000000000000 s is past"),
            "{e}"
        );
        let e = read_arrivals("99999999999999999999 a\n", x, &f).unwrap_err();
        assert_eq!(e.to_string(), "x.txt:1: bad time \"99999999999999999999\"");
        let a = read_arrivals(&format!("0 a\n{MAX_TIME_S} a\n"), x, &f).unwrap();
        assert_eq!(bin_arrivals(a).len(), 105_409);
    }

    #[test]
    fn google_normalises_and_doubles() {
        let p = Path::new("g.csv");
        let g = read_google("0,d,1,0,0,0,0,0.5\n1,d,1,0,0,0,0,1.0\n", p).unwrap();
        assert_eq!(g, vec![0.5, 0.5, 1.0, 1.0]);
        let e = read_google("0,d,1,0,0,0,0,0.5\n1,d,1,0,0,0,0,-1\n", p).unwrap_err();
        assert!(e.to_string().starts_with("g.csv:2:"), "{e}");
    }

    #[test]
    fn azure_flavours_and_arrivals() {
        let p = Path::new("f.txt");
        let f = read_flavors("1,0.75 a\n16,112 d\n2,4 h\n", p).unwrap();
        assert_eq!(f[&'d'], 16);
        let a = read_arrivals("300 a,|,d,h\n600 \n1200 a\n", Path::new("x.txt"), &f).unwrap();
        assert_eq!(a[0], (300, vec![1, 16, 2]));
        let bins = bin_arrivals(a);
        assert_eq!(bins, vec![vec![1, 16, 2], vec![], vec![], vec![1]]);
        let e = read_arrivals("300 a,z\n", Path::new("x.txt"), &f).unwrap_err();
        assert_eq!(e.to_string(), "x.txt:1: unknown flavour \"z\"");
        assert!(read_flavors("x a\n", p).is_err());
    }
}
