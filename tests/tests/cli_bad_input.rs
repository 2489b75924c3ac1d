//! Every command given a nonexistent map, path or device, or an
//! out-of-range value: a non-zero exit with the documented status, exactly
//! one line on stderr, nothing on stdout. On a host without device-mapper
//! (this one), a command that needs dm must still fail with one clear line.
use std::{
    io::Read,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use pathpilot_tests::host::pathpilot_bin;

/// Exit statuses (docs/commands.md).
const USAGE: i32 = 2;
const NOT_FOUND: i32 = 3;
const NO_DAEMON: i32 = 6;

/// What a command that needs device-mapper exits with: not found where
/// dm exists, a plain failure naming device-mapper where it does not.
fn dm_not_found() -> (i32, &'static str) {
    // The kernel's device-mapper, not merely its node: a tool such as
    // libdevmapper creates /dev/mapper/control where no driver answers it.
    if std::path::Path::new("/sys/class/misc/device-mapper").exists() {
        (NOT_FOUND, "")
    } else {
        (1, "device-mapper")
    }
}

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs pathpilot with `args`; a command that has not ended after 20 s is
/// killed and counts as a failure (bad input must never hang).
fn run(args: &[&str]) -> Run {
    let mut child = Command::new(pathpilot_bin())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run pathpilot");
    let t = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break Some(st);
        }
        if t.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stdout = String::new();
    let mut stderr = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .ok();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .ok();
    Run {
        code: status.and_then(|s| s.code()),
        stdout,
        stderr,
    }
}

#[test]
fn bad_input_is_one_line_and_a_non_zero_exit() {
    let bad_config =
        std::env::temp_dir().join(format!("pathpilot-bad-{}.toml", std::process::id()));
    std::fs::write(&bad_config, "mode = \"tune\"\n[checker]\ninterval = 2\n").unwrap();
    let bad_config = bad_config.to_str().unwrap().to_string();
    let (dm_code, dm_word) = dm_not_found();
    let nosock = "/nonexistent/pathpilot.sock";
    // (args, expected exit status, a word the line must contain)
    let cases: Vec<(Vec<&str>, i32, &str)> = vec![
        (vec!["stat", "/dev/nosuchdisk"], NOT_FOUND, "nosuchdisk"),
        (vec!["stat", "--interval", "0", "sda"], USAGE, "interval"),
        (vec!["stat", "--interval", "2d", "sda"], USAGE, "interval"),
        (vec!["list", "nosuchmap"], dm_code, dm_word),
        (vec!["list", "--json", "nosuchmap"], dm_code, dm_word),
        (vec!["create", "--wwid", "3600nosuchwwid"], dm_code, dm_word),
        (
            vec!["create", "--all", "--selector", "bogus"],
            USAGE,
            "bogus",
        ),
        (
            vec!["create", "--all", "--features", "pg_init_retries=x"],
            USAGE,
            "pg_init_retries",
        ),
        (
            vec!["create", "--all", "--deny", "nonsense"],
            USAGE,
            "nonsense",
        ),
        (
            vec!["reload", "nosuchmap", "--selector", "service-time"],
            dm_code,
            dm_word,
        ),
        (vec!["reload", "m", "--weights", "sdz=101"], USAGE, "101"),
        (vec!["reload", "m", "--repeat-count", "-1"], USAGE, "-1"),
        (vec!["reload", "m", "--groups", ";;"], USAGE, "group"),
        (vec!["reload"], USAGE, "MAP"),
        (
            vec!["set", "nosuchmap", "nr_requests=4"],
            NOT_FOUND,
            "nosuchmap",
        ),
        (vec!["set", "sdzz", "queue_depth=4"], NOT_FOUND, "sdzz"),
        (vec!["set", "sdzz", "nr_requests=-5"], USAGE, "nr_requests"),
        (vec!["set", "sdzz", "bogus=1"], USAGE, "bogus"),
        (vec!["path", "fail", "sdzz"], NOT_FOUND, "sdzz"),
        (
            vec!["path", "reinstate", "999:999", "--map", "nosuchmap"],
            dm_code,
            dm_word,
        ),
        (vec!["path", "explode", "sda"], USAGE, "explode"),
        (vec!["remove", "nosuchmap"], dm_code, dm_word),
        (vec!["log", "--socket", nosock], NO_DAEMON, "daemon"),
        (
            vec!["log", "--follow", "--socket", nosock],
            NO_DAEMON,
            "daemon",
        ),
        (
            vec!["ctl", "{\"cmd\":\"status\"}", "--socket", nosock],
            NO_DAEMON,
            "daemon",
        ),
        (
            vec!["ctl", "not json", "--socket", nosock],
            NO_DAEMON,
            "daemon",
        ),
        (
            vec!["daemon", "--config", "/nonexistent/pathpilot.toml"],
            USAGE,
            "/nonexistent/pathpilot.toml",
        ),
        (vec!["daemon", "--config", &bad_config], USAGE, "line 3"),
        (vec!["daemon", "--mode", "fast"], USAGE, "fast"),
        (
            vec!["top", "--once", "--socket", nosock, "nosuchdisk"],
            NOT_FOUND,
            "nosuchdisk",
        ),
        (vec!["top", "--once", "--size", "0x0"], USAGE, "size"),
        (vec!["bogus-command"], USAGE, "bogus-command"),
    ];
    let mut bad = vec![];
    for (args, code, word) in &cases {
        let r = run(args);
        let lines = r.stderr.lines().count();
        let ok =
            r.code == Some(*code) && lines == 1 && r.stdout.is_empty() && r.stderr.contains(word);
        eprintln!(
            "{} pathpilot {}: exit {:?}: {}",
            if ok { "ok " } else { "BAD" },
            args.join(" "),
            r.code,
            r.stderr.trim_end()
        );
        if !ok {
            bad.push(format!(
                "pathpilot {}: exit {:?} (want {code}), {lines} stderr lines (want 1, with '{word}'), \
                 stdout {:?}\nstderr: {}",
                args.join(" "),
                r.code,
                r.stdout,
                r.stderr
            ));
        }
    }
    let _ = std::fs::remove_file(&bad_config);
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}
