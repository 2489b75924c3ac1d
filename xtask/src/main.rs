//! `cargo xtask`: setup, the VM testbed, benchmarks, and the test command.
use anyhow::Result;
use clap::{Parser, Subcommand};

mod bench;
mod benchdoc;
mod demo;
mod package;
mod setup;
mod soak;
mod test;
mod vm_cmd;

#[derive(Parser)]
#[command(
    name = "cargo xtask",
    about = "pathpilot's build, testbed and benchmark helpers"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Install (idempotently) everything the build and the tests need:
    /// apt packages, rust-src for nightly, bpf-linker.
    Setup(setup::Args),
    /// Benchmarks: figures and ratios measured side by side in one run
    /// (docs/benchmarks/README.md).
    Bench(bench::Args),
    /// Set up, build, and show pathpilot at work on something real.
    Demo(demo::Args),
    /// A long run under changing workloads and path faults (a benchmark,
    /// not part of the test command): data verified, daemon RSS, fds and
    /// BPF map entries sampled.
    Soak(soak::Args),
    /// The test command: format and lint checks, release build, every test
    /// (host eBPF tests on loop devices and VM tests of real dm-multipath).
    Test(test::Args),
    /// Boot the dm-multipath VM testbed and run a command in it.
    #[command(subcommand)]
    Vm(Box<vm_cmd::Cmd>),
    /// Build the Debian package: target/debian/pathpilot_<version>_amd64.deb.
    Package(package::Args),
}

fn main() -> Result<()> {
    match Cli::parse().cmd {
        Cmd::Bench(a) => bench::run(a),
        Cmd::Demo(a) => demo::run_demo(a),
        Cmd::Setup(a) => setup::run(a),
        Cmd::Soak(a) => soak::run(a),
        Cmd::Test(a) => test::run_tests(a),
        Cmd::Vm(c) => vm_cmd::run(*c),
        Cmd::Package(a) => package::run(a),
    }
}
