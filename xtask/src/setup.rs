//! `cargo xtask setup`: everything the build and the tests need on a fresh
//! Debian 12 machine, installed idempotently; a second run only checks.
use std::{path::PathBuf, process::Command, time::Instant};

use anyhow::{Context, Result, bail};

use pathpilot_testbed::dirs::{cache_dir, workspace_root};
use pathpilot_testbed::process;

/// Debian packages the build, the host tests and the VM testbed use.
/// (qemu-utils is deliberately absent: on this distribution its backported
/// version conflicts with qemu-system-x86, and nothing here needs it.)
pub const APT_PACKAGES: &[&str] = &[
    // build: the udev crate links libudev; devicemapper-sys links
    // libdevmapper and runs bindgen, which needs libclang
    "pkg-config",
    "libudev-dev",
    "libdevmapper-dev",
    "libclang-dev",
    // host tests: load generators, a check that no program stays loaded,
    // `systemd-analyze verify` of the unit
    "fio",
    "bpftool",
    // mkfs.ext4 for the observer's stalled-device test (fsfreeze is util-linux)
    "e2fsprogs",
    // the observer benchmark's anchor: bpftrace's classic biolatency
    "bpftrace",
    "tmux",
    "systemd",
    // the package's tests: man pages rendered, dpkg-deb, strip, bash
    "man-db",
    "binutils",
    // the VM testbed
    "qemu-system-x86",
    "busybox-static",
    "cpio",
    "kmod",
    "xz-utils",
    "dmsetup",
    "multipath-tools",
    // flock(1), copied into the guest: tests hold a map's lock file
    "util-linux",
    "iproute2",
    // promtool: the alerting and recording rules, their unit tests, the
    // dashboard's queries and the daemon's scrape checked
    "prometheus",
];

const BPF_LINKER_VERSION: &str = "0.13.0";
/// cargo-fuzz runs the fuzz targets in `cargo xtask test` (with nightly).
pub const CARGO_FUZZ_VERSION: &str = "0.13.2";

#[derive(clap::Args)]
pub struct Args {
    /// Skip the apt packages (for machines where someone else manages them).
    #[arg(long)]
    pub no_apt: bool,
}

pub fn run(args: Args) -> Result<()> {
    let t0 = Instant::now();
    if !args.no_apt {
        step("apt packages", apt)?;
    }
    step("rust-src for the nightly eBPF toolchain", rust_src)?;
    step("bpf-linker", bpf_linker)?;
    step("cargo-fuzz", cargo_fuzz)?;
    println!("setup: done in {:.1} s", t0.elapsed().as_secs_f64());
    Ok(())
}

fn step(what: &str, f: impl FnOnce() -> Result<String>) -> Result<()> {
    let t = Instant::now();
    let said = f().with_context(|| format!("setup step '{what}' failed"))?;
    println!("setup: {what}: {said} ({:.1} s)", t.elapsed().as_secs_f64());
    Ok(())
}

fn missing_packages() -> Vec<&'static str> {
    APT_PACKAGES
        .iter()
        .copied()
        .filter(|p| {
            let st = Command::new("dpkg-query")
                .args(["-W", "-f=${Status}", p])
                .output();
            !matches!(st, Ok(o) if String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
        })
        .collect()
}

/// Whether apt's package lists can name the kernel the VM testbed
/// downloads (a machine may have every package but empty lists).
fn lists_know_the_testbed_kernel() -> bool {
    Command::new("apt-cache")
        .args(["depends", "linux-image-amd64"])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("linux-image-6"))
}

fn apt() -> Result<String> {
    let missing = missing_packages();
    if missing.is_empty() {
        if !lists_know_the_testbed_kernel() && unsafe { libc::geteuid() } == 0 {
            println!("setup: apt lists cannot name the testbed kernel: apt-get update");
            process::run(Command::new("apt-get").args(["update", "-qq"]))?;
        }
        return Ok(format!("all {} present", APT_PACKAGES.len()));
    }
    if unsafe { libc::geteuid() } != 0 {
        bail!(
            "missing packages {} and not root: run `apt-get install {}` as root",
            missing.join(" "),
            missing.join(" ")
        );
    }
    println!("setup: installing {}", missing.join(" "));
    process::run(Command::new("apt-get").args(["update", "-qq"]))?;
    process::run(
        Command::new("apt-get")
            .env("DEBIAN_FRONTEND", "noninteractive")
            .args(["install", "-y", "-qq", "--no-install-recommends"])
            .args(&missing),
    )?;
    let still = missing_packages();
    if !still.is_empty() {
        bail!("apt-get did not install {}", still.join(" "));
    }
    Ok(format!("installed {}", missing.join(" ")))
}

fn nightly_sysroot() -> Result<PathBuf> {
    let s = process::output(Command::new("rustc").args(["+nightly", "--print", "sysroot"]))
        .context("the nightly toolchain is needed to build the eBPF programs")?;
    Ok(PathBuf::from(s.trim()))
}

fn rust_src() -> Result<String> {
    let sysroot = nightly_sysroot()?;
    if sysroot.join("lib/rustlib/src/rust/library/core").is_dir() {
        return Ok("already present".into());
    }
    let script = workspace_root().join("../shared/toolchain/install-rust-src.sh");
    if script.is_file() {
        process::run(Command::new("bash").arg(&script).arg("nightly"))?;
    } else {
        process::run(Command::new("rustup").args([
            "component",
            "add",
            "rust-src",
            "--toolchain",
            "nightly",
        ]))?;
    }
    Ok("installed".into())
}

/// Where bpf-linker goes; controller/build.rs looks in the same place.
pub fn tools_dir() -> PathBuf {
    std::env::var_os("PATHPILOT_TOOLS")
        .map(PathBuf::from)
        .unwrap_or_else(|| cache_dir().join("tools"))
}

fn bpf_linker() -> Result<String> {
    let tools = tools_dir();
    let bin = tools.join("bin/bpf-linker");
    if let Ok(v) = process::output(Command::new(&bin).arg("--version"))
        && v.contains(BPF_LINKER_VERSION)
    {
        return Ok(format!("{} at {}", v.trim(), bin.display()));
    }
    // bpf-linker must link the same LLVM as rustc's bpf backend: point it
    // at nightly's own libLLVM instead of the system's (Debian's is too old).
    let sysroot = nightly_sysroot()?;
    let lib = std::fs::read_dir(sysroot.join("lib"))?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|n| n.starts_with("libLLVM.so.") && n.contains("-rust-"))
        .context("nightly's sysroot has no libLLVM.so.*-rust-*")?;
    let vv = process::output(Command::new("rustc").args(["+nightly", "-vV"]))?;
    let major = vv
        .lines()
        .find_map(|l| l.strip_prefix("LLVM version: "))
        .and_then(|v| v.split('.').next())
        .context("rustc -vV printed no LLVM version")?
        .to_string();
    let prefix = tools.join("rust-llvm");
    let libdir = prefix.join("lib");
    std::fs::create_dir_all(&libdir)?;
    for name in ["libLLVM.so", lib.as_str()] {
        let link = libdir.join(name);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(sysroot.join("lib").join(&lib), &link)?;
    }
    println!(
        "setup: building bpf-linker {BPF_LINKER_VERSION} against LLVM {major} (about 2 minutes)"
    );
    process::run(
        Command::new("cargo")
            .env("LLVM_PREFIX", &prefix)
            .args(["install", "--locked", "--quiet"])
            .arg(format!("bpf-linker@{BPF_LINKER_VERSION}"))
            .args(["--no-default-features", "--features"])
            .arg(format!("llvm-{major}"))
            .arg("--root")
            .arg(&tools),
    )?;
    Ok(format!("installed at {}", bin.display()))
}

/// The cargo-fuzz binary `cargo xtask test` runs (`cargo-fuzz fuzz run ..`
/// is what `cargo fuzz run ..` executes).
pub fn cargo_fuzz_bin() -> PathBuf {
    tools_dir().join("bin/cargo-fuzz")
}

fn cargo_fuzz() -> Result<String> {
    let bin = cargo_fuzz_bin();
    if let Ok(v) = process::output(Command::new(&bin).arg("--version"))
        && v.contains(CARGO_FUZZ_VERSION)
    {
        return Ok(format!("{} at {}", v.trim(), bin.display()));
    }
    println!("setup: building cargo-fuzz {CARGO_FUZZ_VERSION} (about 1.5 minutes)");
    process::run(
        Command::new("cargo")
            .args(["install", "--locked", "--quiet"])
            .arg(format!("cargo-fuzz@{CARGO_FUZZ_VERSION}"))
            .arg("--root")
            .arg(tools_dir()),
    )?;
    Ok(format!("installed at {}", bin.display()))
}
