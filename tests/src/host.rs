//! Host-side test support: loop devices, eBPF programs, and the built
//! `pathpilot` and `xtask` binaries.
use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
};

/// A loop device over a fresh sparse file, detached and deleted on drop.
pub struct LoopDev {
    pub path: String,
    backing: PathBuf,
}

impl LoopDev {
    pub fn new(size_mib: u64) -> Self {
        Self::new_in(&std::env::temp_dir(), size_mib)
    }

    /// The same with its backing file in `dir`.
    pub fn new_in(dir: &Path, size_mib: u64) -> Self {
        let backing = dir.join(format!(
            "pathpilot-loop-{}-{}.img",
            std::process::id(),
            unique()
        ));
        let f = std::fs::File::create(&backing).expect("create loop backing file");
        f.set_len(size_mib << 20).expect("size loop backing file");
        let out = Command::new("losetup")
            .args(["--find", "--show"])
            .arg(&backing)
            .output()
            .expect("run losetup (util-linux)");
        assert!(
            out.status.success(),
            "losetup failed (these tests need root): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
        Self { path, backing }
    }

    /// Kernel name, e.g. `loop3`.
    pub fn name(&self) -> &str {
        self.path.trim_start_matches("/dev/")
    }
}

impl Drop for LoopDev {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.path]).status();
        let _ = std::fs::remove_file(&self.backing);
    }
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::SeqCst)
}

/// Runs a shell command, panicking with its output when it fails.
pub fn sh(cmd: &str) -> Output {
    let out = Command::new("sh")
        .args(["-c", cmd])
        .output()
        .expect("run sh");
    assert!(
        out.status.success(),
        "`{cmd}` failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The `pathpilot` binary of the profile these tests were built with.
pub fn pathpilot_bin() -> PathBuf {
    workspace_bin("pathpilot")
}

/// The `xtask` binary (`cargo xtask`) of the profile these tests were
/// built with: the tests run its commands rather than link it.
pub fn xtask_bin() -> PathBuf {
    workspace_bin("xtask")
}

/// A binary of the workspace build: `target/<profile>/NAME`, next to the
/// test executable's `deps/`.
fn workspace_bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let dir = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("test executable in target/<profile>/deps");
    let bin = dir.join(name);
    assert!(
        bin.is_file(),
        "{} is missing: build it first (`cargo build --release`, or run the README's test command)",
        bin.display()
    );
    bin
}

/// The kernel programs currently loaded, (id, name), from bpftool.
fn loaded_programs() -> Vec<(u32, String)> {
    let out = sh("bpftool -j prog show");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("bpftool json");
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|p| {
                    let id = p["id"].as_u64()? as u32;
                    Some((id, p["name"].as_str().unwrap_or_default().to_string()))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The kernel program ids currently loaded.
pub fn loaded_program_ids() -> Vec<u32> {
    loaded_programs().into_iter().map(|(id, _)| id).collect()
}

/// The kernel's names of the loaded programs among `ids`.
pub fn program_names(ids: &[u32]) -> Vec<String> {
    loaded_programs()
        .into_iter()
        .filter(|(id, _)| ids.contains(id))
        .map(|(_, name)| name)
        .collect()
}

/// Ids of the eBPF programs a process holds open, from its fdinfo.
pub fn program_ids_of(pid: u32) -> Vec<u32> {
    let mut ids = Vec::new();
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fdinfo")) else {
        return ids;
    };
    for e in dir.flatten() {
        if let Ok(info) = std::fs::read_to_string(e.path()) {
            ids.extend(info.lines().filter_map(|l| {
                l.strip_prefix("prog_id:")
                    .and_then(|v| v.trim().parse::<u32>().ok())
            }));
        }
    }
    ids.sort();
    ids.dedup();
    ids
}
