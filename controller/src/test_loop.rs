//! A loop device over a small temporary file: a real block device for unit
//! tests on the host (root only, as `losetup` needs).
use std::{path::PathBuf, process::Command};

pub struct TestLoop {
    /// `/dev/loopN`.
    pub dev: String,
    dir: PathBuf,
}

impl TestLoop {
    /// Attaches a 1 MiB image; `None` (the test skips, saying so) when not
    /// root.
    pub fn attach(tag: &str) -> Option<TestLoop> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: needs root to attach a loop device");
            return None;
        }
        let dir = std::env::temp_dir().join(format!("pp-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let img = dir.join("img");
        std::fs::write(&img, vec![0u8; 1 << 20]).unwrap();
        let out = Command::new("losetup")
            .args(["--find", "--show"])
            .arg(&img)
            .output()
            .unwrap();
        assert!(out.status.success(), "losetup: {out:?}");
        let dev = String::from_utf8_lossy(&out.stdout).trim().to_string();
        Some(TestLoop { dev, dir })
    }

    /// The kernel name (`loopN`).
    pub fn name(&self) -> &str {
        self.dev.trim_start_matches("/dev/")
    }

    /// Detaches now; whether `losetup -d` succeeded.
    pub fn detach(mut self) -> bool {
        self.detach_once()
    }

    fn detach_once(&mut self) -> bool {
        if self.dev.is_empty() {
            return true;
        }
        let ok = Command::new("losetup")
            .args(["-d", &self.dev])
            .status()
            .is_ok_and(|s| s.success());
        let _ = std::fs::remove_dir_all(&self.dir);
        self.dev.clear();
        ok
    }
}

impl Drop for TestLoop {
    fn drop(&mut self) {
        self.detach_once();
    }
}
