//! Builds the eBPF programs (ebpf/probes) with the nightly toolchain and
//! bpf-linker, so a plain `cargo build` embeds them in the binary.
use std::{env, path::PathBuf};

fn main() {
    // aya-build watches the program crate; the shared types it compiles in
    // are a separate crate and must trigger a rebuild too.
    println!("cargo:rerun-if-changed=../ebpf/common/src");
    println!("cargo:rerun-if-changed=../ebpf/common/Cargo.toml");
    git_commit();
    ensure_bpf_linker();
    let pkg = aya_build::Package {
        name: "pathpilot-ebpf",
        root_dir: concat!(env!("CARGO_MANIFEST_DIR"), "/../ebpf/probes"),
        ..Default::default()
    };
    if let Err(e) = aya_build::build_ebpf([pkg], aya_build::Toolchain::default()) {
        panic!("building the eBPF programs failed: {e:#}\n(run `cargo xtask setup` once)");
    }
}

/// `cargo xtask setup` installs bpf-linker into a tools folder outside the
/// clone; put it on PATH for aya-build when it is not there already.
fn ensure_bpf_linker() {
    println!("cargo:rerun-if-env-changed=PATHPILOT_TOOLS");
    println!("cargo:rerun-if-env-changed=PATHPILOT_CACHE");
    let path = env::var_os("PATH").unwrap_or_default();
    if env::split_paths(&path).any(|d| d.join("bpf-linker").is_file()) {
        return;
    }
    // The same place `cargo xtask setup` installs to (pathpilot_testbed::dirs::cache_dir).
    let tools = env::var_os("PATHPILOT_TOOLS")
        .map(PathBuf::from)
        .or_else(|| env::var_os("PATHPILOT_CACHE").map(|c| PathBuf::from(c).join("tools")))
        .or_else(|| env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/pathpilot/tools")))
        .expect("neither PATHPILOT_TOOLS, PATHPILOT_CACHE nor HOME is set");
    let bin = tools.join("bin");
    if !bin.join("bpf-linker").is_file() {
        panic!(
            "bpf-linker not found on PATH nor in {}: run `cargo xtask setup` first",
            bin.display()
        );
    }
    let joined = env::join_paths(std::iter::once(bin).chain(env::split_paths(&path)))
        .expect("PATH entry with a separator");
    // SAFETY: build scripts are single-threaded at this point.
    unsafe { env::set_var("PATH", joined) };
}

/// The commit the binary is built from, for `--version` ("unknown" outside
/// a git checkout, e.g. from a source tarball).
fn git_commit() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    // Rebuilt when HEAD moves: HEAD itself, and the branch it names.
    println!("cargo:rerun-if-changed={root}/.git/HEAD");
    if let Ok(head) = std::fs::read_to_string(format!("{root}/.git/HEAD"))
        && let Some(r) = head.trim().strip_prefix("ref: ")
    {
        println!("cargo:rerun-if-changed={root}/.git/{r}");
    }
    let commit = std::process::Command::new("git")
        .args(["-C", root, "rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=PATHPILOT_GIT_COMMIT={commit}");
}
