//! `cargo xtask test`: the README's test command. Style gates first (cheap),
//! then one release build shared by the host and VM tests.
use std::{process::Command, time::Instant};

use anyhow::{Context, Result, bail};
use xtask::util::{run, workspace_root};

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
    let steps: [(&str, Vec<&str>); 4] = [
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
        (
            "test",
            vec!["test", "--release", "--workspace", "--exclude", EBPF],
        ),
    ];
    for (name, a) in steps {
        let t = Instant::now();
        println!("xtask test: {name}: cargo {}", a.join(" "));
        let mut c = cargo(&a);
        if name == "test" && !args.cargo_test_args.is_empty() {
            c.arg("--").args(&args.cargo_test_args);
        }
        run(&mut c)?;
        println!("xtask test: {name} ok ({:.0} s)", t.elapsed().as_secs_f64());
    }
    if args.cargo_test_args.is_empty() {
        let t = Instant::now();
        fuzz()?;
        println!("xtask test: fuzz ok ({:.0} s)", t.elapsed().as_secs_f64());
    }
    println!("xtask test: all ok in {:.0} s", t0.elapsed().as_secs_f64());
    Ok(())
}

/// The fuzz targets (fuzz/, cargo-fuzz layout) and how long each runs.
const FUZZ_TARGETS: &[&str] = &["table_parse", "config_parse", "socket_protocol"];
const FUZZ_SECS_DEFAULT: u64 = 60;

/// A bounded libFuzzer run of every target, from the seeds in
/// fuzz/corpus/<target> (kept in the repo). New inputs go to a scratch
/// corpus so the run leaves the tree unchanged; a crash fails the step and
/// leaves its reproducer in fuzz/artifacts/<target>/.
/// `PATHPILOT_FUZZ_SECS` changes the time per target.
fn fuzz() -> Result<()> {
    let secs: u64 = match std::env::var("PATHPILOT_FUZZ_SECS") {
        Ok(v) => v.parse().context("PATHPILOT_FUZZ_SECS is not a number")?,
        Err(_) => FUZZ_SECS_DEFAULT,
    };
    let bin = crate::setup::cargo_fuzz_bin();
    if !bin.is_file() {
        bail!(
            "{} is missing: run `cargo xtask setup` (the fuzz step needs cargo-fuzz)",
            bin.display()
        );
    }
    let scratch = std::env::temp_dir().join(format!("pathpilot-fuzz-{}", std::process::id()));
    let root = workspace_root();
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
        let r = run(&mut c);
        let _ = std::fs::remove_dir_all(&work);
        r.with_context(|| format!("fuzz target {target} failed (see fuzz/artifacts/{target}/)"))?;
        println!(
            "xtask test: fuzz {target} ok ({:.0} s)",
            t.elapsed().as_secs_f64()
        );
    }
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(())
}
