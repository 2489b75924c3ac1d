//! `pathpilot stat` as a user runs it.
use std::{
    io::{BufRead, BufReader},
    process::{Child, ChildStderr, Command, Stdio},
    time::{Duration, Instant},
};

use pathpilot_tests::host::{LoopDev, loaded_program_ids, pathpilot_bin, program_ids_of, sh};

/// `pathpilot ARGS`, once it says it is observing (the observer is
/// attached: I/O before that is not seen), and its stderr, kept open.
fn stat_observing(args: &[&str]) -> (Child, BufReader<ChildStderr>) {
    let mut child = Command::new(pathpilot_bin())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    assert!(line.contains("observing"), "{line}");
    (child, err)
}

/// 50 direct writes of 64 KiB to `dev` under a `stat --json` child, and
/// the objects it printed.
fn json_after_writes(child: Child, dev: &str) -> Vec<serde_json::Value> {
    sh(&format!(
        "dd if=/dev/zero of={dev} bs=64k count=50 oflag=direct status=none"
    ));
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is JSON"))
        .collect()
}

#[test]
fn a_missing_device_is_one_clear_line() {
    let out = Command::new(pathpilot_bin())
        .args(["stat", "/dev/does-not-exist"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "not-found exit status");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("/dev/does-not-exist"), "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn bad_values_are_usage_errors() {
    for args in [
        vec!["stat", "--interval", "soon", "loop0"],
        vec!["stat", "--count", "-3", "loop0"],
        vec!["stat", "/dev/null"],
        // The old opt-out is still accepted, but not beside the opt-in.
        vec!["stat", "--bio-probe", "--no-bio-probe", "loop0"],
    ] {
        let out = Command::new(pathpilot_bin()).args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
    }
}

#[test]
fn non_root_is_told_to_be_root() {
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(pathpilot_bin())
        .args(["stat", "loop0", "--count", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(5), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("root"), "{err}");
}

#[test]
fn json_stream_has_one_object_per_device_per_interval() {
    let a = LoopDev::new(16);
    let b = LoopDev::new(16);
    let (child, _err) = stat_observing(&[
        "stat",
        &a.path,
        b.name(),
        "--json",
        "--interval",
        "1s",
        "--count",
        "6",
    ]);
    // The 50 writes take well under a second on an idle machine; the six
    // intervals leave room for a busy one, where each synchronous write
    // may wait on the loop device's backing file.
    let objs = json_after_writes(child, &a.path);
    assert_eq!(objs.len(), 12, "2 devices x 6 intervals");
    for o in &objs {
        for k in [
            "device",
            "dev",
            "interval_s",
            "read_ios",
            "write_ios",
            "read_bytes",
            "write_bytes",
            "merges",
            "avg_request_bytes",
            "size_hist",
            "lat_p50_us",
            "lat_p99_us",
            "inflight_max",
            "sequential_ios",
            "random_ios",
        ] {
            assert!(o.get(k).is_some(), "missing {k} in {o}");
        }
    }
    let writes: u64 = objs
        .iter()
        .filter(|o| o["device"] == a.name())
        .map(|o| o["write_ios"].as_u64().unwrap())
        .sum();
    assert_eq!(writes, 50, "per-interval counts add up to the whole run");
    assert!(
        objs.iter()
            .filter(|o| o["device"] == b.name())
            .all(|o| o["write_ios"] == 0)
    );
}

/// `stat DEV EXTRA --json` over 2 s of a new loop device while 50
/// direct writes of 64 KiB go to it: the programs it loaded, and the sum
/// of each figure over its objects.
fn programs_and_sums_of_writes(extra: &[&str]) -> (usize, impl Fn(&str) -> u64) {
    let lo = LoopDev::new(16);
    let mut args = vec!["stat", &lo.path];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--json", "--interval", "1s", "--count", "2"]);
    let (child, _err) = stat_observing(&args);
    let programs = program_ids_of(child.id()).len();
    let objs = json_after_writes(child, &lo.path);
    let sum = move |k: &str| {
        objs.iter()
            .map(|o| o[k].as_u64().unwrap_or_else(|| panic!("{k} in {o}")))
            .sum::<u64>()
    };
    (programs, sum)
}

#[test]
fn by_default_there_is_no_bio_probe_and_bios_still_add_up() {
    let (programs, sum) = programs_and_sums_of_writes(&[]);
    assert_eq!(
        programs,
        pathpilot::observer::BTF_TRACEPOINTS.len(),
        "no program on block_bio_queue"
    );
    assert_eq!((sum("bios"), sum("bio_bytes")), (50, 50 * 65536));
    assert_eq!((sum("splits"), sum("sequential_bios")), (0, 0));
}

#[test]
fn the_bio_probe_counts_bios_one_by_one_in_their_order() {
    let (programs, sum) = programs_and_sums_of_writes(&["--bio-probe"]);
    assert_eq!(
        programs,
        1 + pathpilot::observer::BTF_TRACEPOINTS.len(),
        "a program on block_bio_queue too"
    );
    assert_eq!((sum("bios"), sum("bio_bytes")), (50, 50 * 65536));
    // dd writes one bio after the other: each where the last one ended
    // (the first perhaps not).
    assert_eq!(sum("sequential_bios") + sum("random_bios"), 50);
    assert!(sum("sequential_bios") >= 49, "{}", sum("sequential_bios"));
}

#[test]
fn ctrl_c_detaches_everything() {
    let lo = LoopDev::new(16);
    let (mut child, _err) = stat_observing(&["stat", "--bio-probe", &lo.path]);
    let ours = program_ids_of(child.id());
    assert_eq!(
        ours.len(),
        1 + pathpilot::observer::BTF_TRACEPOINTS.len(),
        "one program per tracepoint, the bio probe's too, while stat runs: {ours:?}"
    );
    unsafe { libc_kill(child.id() as i32, 2) };
    let t = Instant::now();
    let st = child.wait().unwrap();
    assert!(st.success(), "Ctrl-C is a clean stop: {st}");
    assert!(t.elapsed() < Duration::from_secs(3));
    let mut left: Vec<u32> = Vec::new();
    for _ in 0..20 {
        let loaded = loaded_program_ids();
        left = ours
            .iter()
            .copied()
            .filter(|i| loaded.contains(i))
            .collect();
        if left.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(left.is_empty(), "programs left loaded: {left:?}");
}

unsafe extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

#[test]
fn daemon_bad_config_names_key_and_line() {
    let dir = std::env::temp_dir().join(format!("pp-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("bad.toml");
    std::fs::write(&cfg, "mode = \"tune\"\n[checker]\ninterval_sec = 2\n").unwrap();
    let out = Command::new(pathpilot_bin())
        .args(["daemon", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("line 3") && err.contains("interval_sec"),
        "{err}"
    );
    std::fs::write(&cfg, "[maps]\nselector = \"fastest\"\n").unwrap();
    let out = Command::new(pathpilot_bin())
        .args(["daemon", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("line 2: selector: unknown selector 'fastest'"),
        "{err}"
    );
    let out = Command::new(pathpilot_bin())
        .args(["daemon", "--config", "/nonexistent/pathpilot.toml"])
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/pathpilot.toml"));
    std::fs::remove_dir_all(&dir).unwrap();
}
