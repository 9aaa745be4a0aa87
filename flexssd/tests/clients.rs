//! Real NBD clients against a running daemon: nbdinfo, nbdcopy, qemu-img,
//! qemu-io and fio's nbd engine with checksummed verification.

mod support;
use support::*;

#[test]
fn nbdinfo_lists_and_describes_exports() {
    require!(have("nbdinfo"), "nbdinfo (libnbd-bin) is not installed");
    let d = Daemon::start(SMALL_DEVICE);
    let out = run(
        "nbdinfo",
        &[
            "--list",
            &format!("nbd+unix://?socket={}", d.sock.display()),
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("default"), "{text}");
    let out = run("nbdinfo", &["--json", &d.uri("default")]);
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let e = &j["exports"][0];
    assert_eq!(e["export-size"].as_u64().unwrap(), 216 << 20, "{j}");
    assert_eq!(e["block_size_preferred"].as_u64(), Some(4096), "{j}");
    assert_eq!(e["can_flush"].as_bool(), Some(true), "{j}");
    assert_eq!(e["can_trim"].as_bool(), Some(true), "{j}");
    assert_eq!(e["can_zero"].as_bool(), Some(true), "{j}");
    assert_eq!(e["can_multi_conn"].as_bool(), Some(true), "{j}");
    // An unknown export is refused.
    let bad = run_any("nbdinfo", &[&d.uri("nope")]);
    assert!(!bad.status.success());
}

/// `qemu-img compare` of a raw image with a raw NBD export (fails the test on a difference).
fn qemu_img_compare(img: &std::path::Path, uri: &str) {
    run(
        "qemu-img",
        &[
            "compare",
            "-f",
            "raw",
            "-F",
            "raw",
            img.to_str().unwrap(),
            uri,
        ],
    );
}

#[test]
fn nbdcopy_round_trip_and_qemu_img_compare() {
    require!(
        have("nbdcopy") && have("qemu-img"),
        "nbdcopy or qemu-img is not installed"
    );
    let d = Daemon::start(SMALL_DEVICE);
    let img = d.path().join("in.img");
    let back = d.path().join("out.img");
    random_file(&img, 64 << 20, 42);
    let uri = d.uri("default");
    // Copy 64 MiB in, then the whole export out.
    run("nbdcopy", &["--flush", img.to_str().unwrap(), &uri]);
    run("nbdcopy", &[&uri, back.to_str().unwrap()]);
    let a = std::fs::read(&img).unwrap();
    let b = std::fs::read(&back).unwrap();
    assert_eq!(b.len(), 216 << 20);
    assert!(
        a == b[..a.len()],
        "data read back differs from data written"
    );
    assert!(
        b[a.len()..].iter().all(|&x| x == 0),
        "never-written space must read as zeros"
    );
    // qemu-img compares the export with the image (sizes differ: use the prefix).
    let short = d.path().join("short.img");
    std::fs::write(&short, &b[..a.len()]).unwrap();
    run(
        "qemu-img",
        &[
            "compare",
            "-f",
            "raw",
            "-F",
            "raw",
            "-s",
            img.to_str().unwrap(),
            short.to_str().unwrap(),
        ],
    );
    qemu_img_compare(&back, &uri);
    // Survives a clean restart.
    let mut d = d;
    d.stop();
    d.restart();
    qemu_img_compare(&back, &d.uri("default"));
}

/// Fast zeroing (`NBD_CMD_FLAG_FAST_ZERO`, as nbdkit and qemu-nbd offer it;
/// libnbd sends it on request): a vSSD zeroes by unmapping, so it advertises
/// it and does it. Then the zeroing path under a real converter: `qemu-img
/// convert` of a sparse image onto a target full of other bytes must leave
/// zeros in the holes (qemu 7.2 zeroes them with write-zeroes that may
/// unmap, not with the fast flag).
#[test]
fn fast_zero_with_libnbd_and_qemu_img_convert() {
    let Some(py) = nbd_python() else {
        eprintln!("SKIP fast zero: libnbd's Python bindings (python3-libnbd) are not installed");
        return;
    };
    require!(have("qemu-img"), "qemu-img is not installed");
    let d = Daemon::start(SMALL_DEVICE);
    let uri = d.uri("default");
    assert_eq!(
        fast_zero_outcome(py, &uri),
        "zeroed zeros\nplain zeros\n",
        "a vSSD zeroes fast"
    );
    // Fill the whole export with other bytes, then convert a sparse image
    // of the same size onto it: every hole must come back as zeros.
    let size = 216u64 << 20;
    let convert = |src: &std::path::Path| {
        let src = src.to_str().unwrap();
        run(
            "qemu-img",
            &["convert", "-n", "-f", "raw", "-O", "raw", src, &uri],
        );
    };
    let junk = d.path().join("junk.img");
    random_file(&junk, size as usize, 7);
    convert(&junk);
    let img = d.path().join("sparse.img");
    let f = std::fs::File::create(&img).unwrap();
    f.set_len(size).unwrap();
    drop(f);
    let piece = d.path().join("piece.img");
    random_file(&piece, 3 << 20, 11);
    let data = std::fs::read(&piece).unwrap();
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(&img).unwrap();
        for (k, at) in [0u64, 50 << 20, 199 << 20].into_iter().enumerate() {
            f.write_all_at(&data[k << 20..(k + 1) << 20], at).unwrap();
        }
    }
    convert(&img);
    qemu_img_compare(&img, &uri);
}

#[test]
fn qemu_io_patterns_trim_and_zero() {
    require!(have("qemu-io"), "qemu-io (qemu-utils) is not installed");
    let d = Daemon::start(SMALL_DEVICE);
    let uri = d.uri("default");
    let out = run(
        "qemu-io",
        &[
            "-f",
            "raw",
            "-c",
            "write -P 0xab 0 1M",
            "-c",
            "read -P 0xab 0 1M",
            "-c",
            "write -P 0x11 3000 5000",
            "-c",
            "read -P 0x11 3000 5000",
            "-c",
            "read -P 0xab 0 3000",
            "-c",
            "discard 1M 64k",
            "-c",
            "read -P 0 1M 64k",
            "-c",
            "write -z 4096 8192",
            "-c",
            "read -P 0 4096 8192",
            "-c",
            "flush",
            &uri,
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("Pattern verification failed"), "{text}");
    // Past the end is refused, not wrapped around.
    let out = run_any(
        "qemu-io",
        &[
            "-f",
            "raw",
            "-c",
            &format!("write -P 1 {} 4096", 216u64 << 20),
            &uri,
        ],
    );
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        all.to_lowercase().contains("error")
            || all.contains("Input/output")
            || all.contains("Invalid"),
        "{all}"
    );
}

#[test]
fn fio_verify_crc32c_single_and_multi_conn() {
    require!(have("fio"), "fio is not installed");
    let d = Daemon::start(SMALL_DEVICE);
    let uri = d.uri("default");
    for (jobs, rw) in [("1", "randwrite"), ("4", "randrw")] {
        let out = run(
            "fio",
            &[
                "--name=verify",
                "--ioengine=nbd",
                &format!("--uri={uri}"),
                &format!("--rw={rw}"),
                "--bs=4k",
                "--iodepth=16",
                &format!("--numjobs={jobs}"),
                "--size=32m",
                "--offset_increment=40m",
                "--verify=crc32c",
                "--verify_fatal=1",
                "--do_verify=1",
                "--verify_state_save=0",
                "--group_reporting",
            ],
        );
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("err= 0"), "{text}");
        assert!(!text.contains("verify: bad"), "{text}");
    }
}

#[test]
fn nbd_over_localhost_tcp() {
    require!(
        have("nbdinfo") && have("qemu-io"),
        "nbdinfo or qemu-io is not installed"
    );
    let port = free_port();
    // The harness writes the [nbd] table itself: TCP goes on the command line.
    let d = Daemon::start_with_args(SMALL_DEVICE, &["--nbd-tcp", &format!("127.0.0.1:{port}")]);
    let uri = format!("nbd://127.0.0.1:{port}/default");
    let out = run("nbdinfo", &["--size", &uri]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        (216u64 << 20).to_string()
    );
    let out = run(
        "qemu-io",
        &[
            "-f",
            "raw",
            "-c",
            "write -P 0x5a 0 256k",
            "-c",
            "read -P 0x5a 0 256k",
            &uri,
        ],
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains("Pattern verification failed"));
    // The same bytes through the unix socket.
    let out = run(
        "qemu-io",
        &["-f", "raw", "-c", "read -P 0x5a 0 256k", &d.uri("default")],
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains("Pattern verification failed"));
}

/// `nbdinfo --map --json`: (offset, length, hole) per extent.
fn nbdinfo_map(uri: &str) -> Vec<(u64, u64, bool)> {
    let out = run("nbdinfo", &["--map", "--json", uri]);
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    j.as_array()
        .unwrap_or_else(|| panic!("not a map: {j}"))
        .iter()
        .map(|e| {
            let t = e["type"].as_u64().unwrap();
            (
                e["offset"].as_u64().unwrap(),
                e["length"].as_u64().unwrap(),
                t & 1 != 0,
            )
        })
        .collect()
}

/// A map from (start, end, hole) runs, merging neighbours of the same kind.
fn runs(parts: &[(u64, u64, bool)]) -> Vec<(u64, u64, bool)> {
    let mut out: Vec<(u64, u64, bool)> = Vec::new();
    for &(s, e, h) in parts {
        match out.last_mut() {
            Some(last) if last.2 == h && last.0 + last.1 == s => last.1 += e - s,
            _ => out.push((s, e - s, h)),
        }
    }
    out
}

/// Block status with real clients: a fresh export is one hole; after sparse
/// writes and a trim, `nbdinfo --map` and `qemu-img map` show exactly the
/// written ranges as data; `nbdcopy` and `qemu-img convert` skip the holes
/// (sparse copies with the same content).
#[test]
fn block_status_maps_holes_for_real_clients() {
    require!(have("nbdinfo"), "nbdinfo (libnbd-bin) is not installed");
    require!(have("qemu-io"), "qemu-io (qemu-utils) is not installed");
    const M: u64 = 1 << 20;
    let d = Daemon::start(SMALL_DEVICE);
    let uri = d.uri("default");
    let size = 216 * M;
    assert_eq!(
        nbdinfo_map(&uri),
        [(0, size, true)],
        "a fresh export is one hole"
    );
    let io = |cmd: &str| {
        run("qemu-io", &["-f", "raw", "-c", cmd, &uri]);
    };
    io(&format!("write -P 0xab {} {}", 100 * M, M));
    assert_eq!(
        nbdinfo_map(&uri),
        runs(&[
            (0, 100 * M, true),
            (100 * M, 101 * M, false),
            (101 * M, size, true)
        ])
    );
    io(&format!("write -P 0xcd {} 4096", 10 * M));
    io(&format!("discard {} {}", 100 * M + 256 * 1024, 512 * 1024));
    let want = runs(&[
        (0, 10 * M, true),
        (10 * M, 10 * M + 4096, false),
        (10 * M + 4096, 100 * M, true),
        (100 * M, 100 * M + 256 * 1024, false),
        (100 * M + 256 * 1024, 100 * M + 768 * 1024, true),
        (100 * M + 768 * 1024, 101 * M, false),
        (101 * M, size, true),
    ]);
    assert_eq!(nbdinfo_map(&uri), want);
    if have("qemu-img") {
        let out = run("qemu-img", &["map", "--output=json", "-f", "raw", &uri]);
        let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let parts: Vec<(u64, u64, bool)> = j
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                let s = e["start"].as_u64().unwrap();
                (
                    s,
                    s + e["length"].as_u64().unwrap(),
                    !e["data"].as_bool().unwrap(),
                )
            })
            .collect();
        assert_eq!(runs(&parts), want, "qemu-img map: {j}");
        // convert writes a sparse copy with the same content.
        let img = d.dir.path().join("convert.img");
        run(
            "qemu-img",
            &[
                "convert",
                "-f",
                "raw",
                "-O",
                "raw",
                &uri,
                img.to_str().unwrap(),
            ],
        );
        qemu_img_compare(&img, &uri);
        let used = std::fs::metadata(&img)
            .map(|m| std::os::unix::fs::MetadataExt::blocks(&m) * 512)
            .unwrap();
        assert!(
            used <= 2 * M,
            "qemu-img convert copied holes: {used} bytes allocated"
        );
    }
    if have("nbdcopy") {
        let img = d.dir.path().join("copy.img");
        std::fs::File::create(&img).unwrap().set_len(size).unwrap();
        run("nbdcopy", &[&uri, img.to_str().unwrap()]);
        let used = std::fs::metadata(&img)
            .map(|m| std::os::unix::fs::MetadataExt::blocks(&m) * 512)
            .unwrap();
        assert!(
            used <= 2 * M,
            "nbdcopy copied holes: {used} bytes allocated"
        );
        if have("qemu-img") {
            qemu_img_compare(&img, &uri);
        }
    }
}
