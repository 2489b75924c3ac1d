//! Builds the eBPF programs (ebpf/probes) with the nightly toolchain and
//! bpf-linker, so a plain `cargo build` embeds them in the binary.
use std::{env, path::PathBuf};

fn main() {
    // aya-build watches the program crate; the shared types it compiles in
    // are a separate crate and must trigger a rebuild too.
    println!("cargo:rerun-if-changed=../ebpf/common/src");
    println!("cargo:rerun-if-changed=../ebpf/common/Cargo.toml");
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
    // The same place `cargo xtask setup` installs to (xtask::util::cache_dir).
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
