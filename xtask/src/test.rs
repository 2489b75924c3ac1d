//! `cargo xtask test`: the README's test command. Style gates first (cheap),
//! then one release build shared by the host and VM tests, then the fuzz
//! targets. Every step runs even after another failed (a build failure
//! skips only the tests that need it), and the run ends with a summary of
//! every failure: one failing suite must not hide the state of the rest.
use std::{
    io::{BufRead, BufReader, Write},
    process::Command,
    time::Instant,
};

use anyhow::{Context, Result, bail};
use pathpilot_testbed::dirs::workspace_root;
use pathpilot_testbed::process;

#[derive(clap::Args)]
pub struct Args {
    /// Extra arguments for `cargo test` (e.g. a test name filter).
    #[arg(last = true)]
    pub cargo_test_args: Vec<String>,
}

/// The eBPF crate builds only for bpfel-unknown-none, through
/// controller/build.rs; a host build of the workspace must leave it out.
const EBPF: &str = "pathpilot-ebpf";

fn cargo(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO"));
    c.current_dir(workspace_root()).args(args);
    c
}

pub fn run_tests(args: Args) -> Result<()> {
    let t0 = Instant::now();
    let mut failures: Vec<String> = vec![];
    let steps: [(&str, Vec<&str>); 3] = [
        ("format", vec!["fmt", "--all", "--check"]),
        (
            "lint",
            vec![
                "clippy",
                "--release",
                "--workspace",
                "--exclude",
                EBPF,
                "--all-targets",
                "--",
                "-D",
                "warnings",
            ],
        ),
        (
            "build",
            vec!["build", "--release", "--workspace", "--exclude", EBPF],
        ),
    ];
    let mut built = true;
    for (name, a) in steps {
        let t = Instant::now();
        println!("xtask test: {name}: cargo {}", a.join(" "));
        match process::run(&mut cargo(&a)) {
            Ok(()) => println!("xtask test: {name} ok ({:.0} s)", t.elapsed().as_secs_f64()),
            Err(e) => {
                println!("xtask test: {name} FAILED: {e:#}");
                failures.push(format!("{name}: {e:#}"));
                built &= name != "build";
            }
        }
    }
    if built {
        let t = Instant::now();
        let mut a = vec![
            "test",
            "--release",
            "--workspace",
            "--exclude",
            EBPF,
            "--no-fail-fast",
        ];
        if !args.cargo_test_args.is_empty() {
            a.push("--");
            a.extend(args.cargo_test_args.iter().map(String::as_str));
        }
        println!("xtask test: test: cargo {}", a.join(" "));
        let failed = run_collecting_failures(&mut cargo(&a))?;
        if failed.is_empty() {
            println!("xtask test: test ok ({:.0} s)", t.elapsed().as_secs_f64());
        } else {
            println!(
                "xtask test: test FAILED ({:.0} s)",
                t.elapsed().as_secs_f64()
            );
            failures.extend(failed.into_iter().map(|f| format!("test: {f}")));
        }
    } else {
        failures.push("test: not run (the build failed)".into());
    }
    if args.cargo_test_args.is_empty() {
        let t = Instant::now();
        let failed = fuzz()?;
        if failed.is_empty() {
            println!("xtask test: fuzz ok ({:.0} s)", t.elapsed().as_secs_f64());
        }
        failures.extend(failed.into_iter().map(|f| format!("fuzz: {f}")));
    }
    let secs = t0.elapsed().as_secs_f64();
    if failures.is_empty() {
        println!("xtask test: all ok in {secs:.0} s");
        return Ok(());
    }
    println!(
        "\nxtask test: {} failure(s) in {secs:.0} s:",
        failures.len()
    );
    for f in &failures {
        println!("  - {f}");
    }
    bail!("{} failure(s)", failures.len())
}

/// Runs `cargo test` with its stdout and stderr echoed as they come, and
/// returns what failed: each failed test with its test binary, and each
/// target that failed without a failed test (a crash, a build error).
fn run_collecting_failures(c: &mut Command) -> Result<Vec<String>> {
    let (reader, writer) = std::io::pipe().context("pipe")?;
    let shown = format!("{c:?}");
    let mut child = c
        .stdout(writer.try_clone()?)
        .stderr(writer)
        .spawn()
        .with_context(|| format!("cannot start {shown}"))?;
    // The command holds the only writers now: the reads end at its exit.
    c.stdout(std::process::Stdio::inherit())
        .stderr(std::process::Stdio::inherit());
    let mut summary = FailureLog::default();
    let mut out = std::io::stdout();
    for line in BufReader::new(reader).split(b'\n') {
        let line = String::from_utf8_lossy(&line?).into_owned();
        let _ = writeln!(out, "{line}");
        summary.line(&line);
    }
    let st = child.wait()?;
    let mut failed = summary.finish();
    if !st.success() && failed.is_empty() {
        failed.push(format!("{shown} failed: {st}"));
    }
    Ok(failed)
}

/// What a `cargo test --no-fail-fast` run says failed, read line by line.
#[derive(Default)]
struct FailureLog {
    /// The test binary running now (`tests/vm_alua.rs`, `unittests ...`).
    binary: String,
    /// A test of the running binary failed.
    binary_failed: bool,
    failed: Vec<String>,
}

impl FailureLog {
    fn line(&mut self, line: &str) {
        let l = line.trim();
        if let Some(rest) = l.strip_prefix("Running ") {
            self.binary = rest.split(" (").next().unwrap_or(rest).to_string();
            self.binary_failed = false;
        } else if let Some(rest) = l.strip_prefix("Doc-tests ") {
            self.binary = format!("doc-tests {rest}");
            self.binary_failed = false;
        } else if let Some(name) = l
            .strip_prefix("test ")
            .and_then(|r| r.strip_suffix(" ... FAILED"))
        {
            self.failed.push(format!("{name} ({})", self.binary));
            self.binary_failed = true;
        } else if let Some(target) = l
            .strip_prefix("error: test failed, to rerun pass `")
            .and_then(|r| r.strip_suffix('`'))
            && !self.binary_failed
        {
            // The binary failed with no test failed: it crashed, or a
            // test took the process down.
            self.failed.push(format!(
                "{} ({target}): the test binary failed without a failed test",
                self.binary
            ));
        }
    }

    fn finish(self) -> Vec<String> {
        self.failed
    }
}

/// The fuzz targets (fuzz/, cargo-fuzz layout) and how long each runs.
const FUZZ_TARGETS: &[&str] = &["table_parse", "config_parse", "socket_protocol"];
const FUZZ_SECS_DEFAULT: u64 = 60;

/// A bounded libFuzzer run of every target, from the seeds in
/// fuzz/corpus/<target> (kept in the repo). New inputs go to a scratch
/// corpus so the run leaves the tree unchanged; a crash fails that target
/// (the others still run) and leaves its reproducer in
/// fuzz/artifacts/<target>/. `PATHPILOT_FUZZ_SECS` changes the time per
/// target. Returns the targets that failed.
fn fuzz() -> Result<Vec<String>> {
    let secs: u64 = match std::env::var("PATHPILOT_FUZZ_SECS") {
        Ok(v) => v.parse().context("PATHPILOT_FUZZ_SECS is not a number")?,
        Err(_) => FUZZ_SECS_DEFAULT,
    };
    let bin = crate::setup::cargo_fuzz_bin();
    if !bin.is_file() {
        return Ok(vec![format!(
            "{} is missing: run `cargo xtask setup` (the fuzz step needs cargo-fuzz)",
            bin.display()
        )]);
    }
    let scratch = std::env::temp_dir().join(format!("pathpilot-fuzz-{}", std::process::id()));
    let root = workspace_root();
    let mut failed = vec![];
    for target in FUZZ_TARGETS {
        let t = Instant::now();
        let work = scratch.join(target);
        std::fs::create_dir_all(&work)?;
        let seeds = root.join("fuzz/corpus").join(target);
        println!("xtask test: fuzz {target} for {secs} s");
        // cargo-fuzz invokes cargo, which must be nightly's (sanitizers).
        let mut c = Command::new(&bin);
        c.current_dir(&root)
            .env("RUSTUP_TOOLCHAIN", "nightly")
            .env_remove("CARGO")
            .args(["fuzz", "run", target])
            .arg(&work)
            .arg(&seeds)
            .arg("--")
            .arg(format!("-max_total_time={secs}"))
            .arg("-print_final_stats=1");
        let r = process::run(&mut c);
        let _ = std::fs::remove_dir_all(&work);
        match r {
            Ok(()) => println!(
                "xtask test: fuzz {target} ok ({:.0} s)",
                t.elapsed().as_secs_f64()
            ),
            Err(e) => {
                println!("xtask test: fuzz {target} FAILED: {e:#}");
                failed.push(format!("{target} (see fuzz/artifacts/{target}/): {e:#}"));
            }
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_no_fail_fast_run_names_every_failed_test_and_crashed_binary() {
        let mut log = FailureLog::default();
        for l in [
            "     Running unittests src/lib.rs (target/release/deps/pathpilot-1)",
            "test tuner::tests::fine ... ok",
            "     Running tests/vm_alua.rs (target/release/deps/vm_alua-bd71)",
            "test an_unavailable_port_fails_over_and_back ... FAILED",
            "test the_map_is_the_one_multipath_tools_builds ... ok",
            "error: test failed, to rerun pass `-p pathpilot-tests --test vm_alua`",
            "     Running tests/vm_daemon.rs (target/release/deps/vm_daemon-40)",
            "test observe_mode_changes_nothing ... ok",
            "     Running tests/vm_faults.rs (target/release/deps/vm_faults-9)",
            "error: test failed, to rerun pass `-p pathpilot-tests --test vm_faults`",
            "error: 2 targets failed:",
            "    `-p pathpilot-tests --test vm_alua`",
            "    `-p pathpilot-tests --test vm_faults`",
        ] {
            log.line(l);
        }
        assert_eq!(
            log.finish(),
            vec![
                "an_unavailable_port_fails_over_and_back (tests/vm_alua.rs)".to_string(),
                "tests/vm_faults.rs (-p pathpilot-tests --test vm_faults): the test binary \
                 failed without a failed test"
                    .to_string(),
            ]
        );
    }

    #[test]
    fn a_clean_run_reports_nothing() {
        let mut log = FailureLog::default();
        for l in [
            "     Running tests/vm_alua.rs (target/release/deps/vm_alua-bd71)",
            "test a ... ok",
            "test result: ok. 1 passed; 0 failed",
        ] {
            log.line(l);
        }
        assert!(log.finish().is_empty());
    }
}
