//! `pathpilot top` in a real terminal (tmux) against a live observer on a
//! loop device: keys work, and the figures on screen match `pathpilot stat`.
use std::{
    process::{Child, Command, Stdio},
    thread::sleep,
    time::{Duration, Instant},
};

use pathpilot_tests::host::{LoopDev, pathpilot_bin};

struct Tmux(String);

impl Tmux {
    fn new(cmd: &str) -> Self {
        let name = format!("pptop{}", std::process::id());
        let st = Command::new("tmux")
            .args([
                "new-session",
                "-d",
                "-s",
                &name,
                "-x",
                "100",
                "-y",
                "30",
                cmd,
            ])
            .status()
            .expect("tmux (cargo xtask setup installs it)");
        assert!(st.success());
        Self(name)
    }
    fn keys(&self, k: &str) {
        Command::new("tmux")
            .args(["send-keys", "-t", &self.0, k])
            .status()
            .unwrap();
    }
    fn pane(&self) -> String {
        let out = Command::new("tmux")
            .args(["capture-pane", "-p", "-t", &self.0])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
    fn wait_for(&self, what: &str, secs: u64) -> String {
        let t = Instant::now();
        loop {
            let p = self.pane();
            if p.contains(what) || t.elapsed() > Duration::from_secs(secs) {
                return p;
            }
            sleep(Duration::from_millis(200));
        }
    }
    fn alive(&self) -> bool {
        Command::new("tmux")
            .args(["has-session", "-t", &self.0])
            .status()
            .is_ok_and(|s| s.success())
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["kill-session", "-t", &self.0])
            .status();
    }
}

struct Kill(Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The IOPS column of `dev`'s row in the paths table.
fn iops_on_screen(pane: &str, dev: &str) -> Option<f64> {
    pane.lines()
        .find(|l| l.trim_start_matches('│').starts_with(dev))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|v| v.trim_end_matches('k').parse().ok())
}

#[test]
fn top_shows_what_stat_measures_and_obeys_keys() {
    let lo = LoopDev::new(64);
    // A rate-limited load, so both views see the same steady figure.
    let _fio = Kill(
        Command::new("fio")
            .args([
                "--name=steady",
                &format!("--filename={}", lo.path),
                "--rw=randread",
                "--bs=4k",
                "--direct=1",
                "--ioengine=psync",
                "--rate_iops=400",
                "--time_based",
                "--runtime=60",
                "--output=/dev/null",
            ])
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let bin = pathpilot_bin();
    let tmux = Tmux::new(&format!("{} top {} --interval 2s", bin.display(), lo.path));
    let stat = Command::new(&bin)
        .args([
            "stat",
            &lo.path,
            "--json",
            "--interval",
            "2s",
            "--count",
            "3",
        ])
        .output()
        .unwrap();
    assert!(stat.status.success());
    let last: serde_json::Value = serde_json::from_slice(
        stat.stdout
            .split(|b| *b == b'\n')
            .rfind(|l| !l.is_empty())
            .unwrap(),
    )
    .unwrap();
    let want = last["iops"].as_f64().unwrap();
    assert!((300.0..=500.0).contains(&want), "fio's rate limit: {last}");
    let pane = tmux.wait_for(lo.name(), 10);
    let got = iops_on_screen(&pane, lo.name())
        .unwrap_or_else(|| panic!("no row for {}:\n{pane}", lo.name()));
    assert!(
        (got - want).abs() <= want * 0.15,
        "top shows {got} IOPS, stat measured {want}:\n{pane}"
    );

    tmux.keys("?");
    let pane = tmux.wait_for("pause / resume the tuner", 5);
    assert!(pane.contains("pause / resume the tuner"), "{pane}");
    tmux.keys("x");
    tmux.keys("Tab");
    tmux.keys("f");
    let pane = tmux.wait_for("(y/n)", 5);
    assert!(
        pane.contains(&format!("fail path {} of (watched)? (y/n)", lo.name())),
        "{pane}"
    );
    tmux.keys("y");
    let pane = tmux.wait_for("read-only", 5);
    assert!(pane.contains("read-only: no pathpilot daemon"), "{pane}");
    tmux.keys("q");
    let t = Instant::now();
    while tmux.alive() && t.elapsed() < Duration::from_secs(5) {
        sleep(Duration::from_millis(100));
    }
    assert!(!tmux.alive(), "q quits");
}

#[test]
fn top_without_daemon_or_root_says_so() {
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(pathpilot_bin())
        .args(["top", "--once", "--socket", "/nonexistent/pathpilot.sock"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(5), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("no pathpilot daemon") && err.contains("root"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
}
