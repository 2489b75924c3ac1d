//! What the host must have before a testbed can boot.
use anyhow::{Result, bail};

use crate::config::Link;

/// What must exist on the host before a testbed can boot; the error names
/// the missing piece and the fix.
pub fn check_host(link: Link) -> Result<()> {
    let mut need = vec![
        "qemu-system-x86_64",
        "apt-get",
        "dpkg-deb",
        "depmod",
        "modprobe",
        "xz",
        "ldd",
    ];
    if link == Link::Wire {
        need.extend(["qemu-storage-daemon", "ip", "tc"]);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let missing: Vec<_> = need
        .into_iter()
        .filter(|b| !std::env::split_paths(&path).any(|d| d.join(b).is_file()))
        .collect();
    if !missing.is_empty() {
        bail!(
            "the VM testbed needs {} on the host: run `cargo xtask setup`",
            missing.join(", ")
        );
    }
    if !std::path::Path::new("/bin/busybox").exists() {
        bail!("the VM testbed needs busybox-static (/bin/busybox): run `cargo xtask setup`");
    }
    Ok(())
}
