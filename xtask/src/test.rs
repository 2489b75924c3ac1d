//! `cargo xtask test`: the README's test command. Style gates first (cheap),
//! then one release build shared by the host and VM tests.
use std::{process::Command, time::Instant};

use anyhow::Result;
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
    println!("xtask test: all ok in {:.0} s", t0.elapsed().as_secs_f64());
    Ok(())
}
