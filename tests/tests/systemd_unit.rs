//! The systemd unit as shipped: `systemd-analyze verify` accepts it (with
//! ExecStart pointed at the binary just built), and it keeps what the
//! daemon's start-up promises rely on: Type=notify (READY after the maps
//! exist), ordering before the local mounts, and its hardening.
use std::process::Command;

use pathpilot_tests::host::pathpilot_bin;

const UNIT: &str = include_str!("../../packaging/pathpilot.service");

#[test]
fn the_unit_verifies_and_orders_mounts_after_the_maps() {
    for line in [
        "Type=notify",
        "NotifyAccess=main",
        "Before=local-fs-pre.target blk-availability.service shutdown.target",
        "DefaultDependencies=no",
        "ExecStart=/usr/sbin/pathpilot daemon --config /etc/pathpilot/config.toml",
        "NoNewPrivileges=yes",
        "ProtectHome=yes",
        "PrivateTmp=yes",
    ] {
        assert!(UNIT.lines().any(|l| l == line), "{line} missing:\n{UNIT}");
    }
    let caps = UNIT
        .lines()
        .find_map(|l| l.strip_prefix("CapabilityBoundingSet="))
        .expect("a capability bounding set");
    for c in ["CAP_SYS_ADMIN", "CAP_BPF", "CAP_PERFMON", "CAP_SYS_RAWIO"] {
        assert!(caps.split(' ').any(|x| x == c), "{c} not in {caps}");
    }
    // verify wants the ExecStart binary to exist: the one just built.
    let dir = std::env::temp_dir().join(format!("pathpilot-unit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let unit = dir.join("pathpilot.service");
    let bin = pathpilot_bin();
    std::fs::write(
        &unit,
        UNIT.replace("/usr/sbin/pathpilot", &bin.display().to_string()),
    )
    .unwrap();
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&unit)
        .output()
        .expect("systemd-analyze (Debian package systemd)");
    let err = String::from_utf8_lossy(&out.stderr);
    // Only complaints about this unit count: the host's own units may
    // have theirs.
    let ours: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("pathpilot.service"))
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success() && ours.is_empty(),
        "systemd-analyze verify: {}\n{err}",
        out.status
    );
}
