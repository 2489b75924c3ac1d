//! Host commands: run one and check its exit, or read its output; tie a
//! child's life to the thread that spawned it.
use std::process::Command;

use anyhow::{Context, Result, bail};

/// Runs a command, inheriting stdio; fails with the command line on a
/// non-zero exit.
pub fn run(cmd: &mut Command) -> Result<()> {
    let shown = format!("{cmd:?}");
    let st = cmd
        .status()
        .with_context(|| format!("cannot start {shown}"))?;
    if !st.success() {
        bail!("{shown} failed: {st}");
    }
    Ok(())
}

/// Runs a command and returns its stdout; fails with stderr on non-zero exit.
pub fn output(cmd: &mut Command) -> Result<String> {
    let shown = format!("{cmd:?}");
    let out = cmd
        .output()
        .with_context(|| format!("cannot start {shown}"))?;
    if !out.status.success() {
        bail!(
            "{shown} failed: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Has the kernel SIGKILL the child when the thread that spawned it exits,
/// so a test process killed before Drop runs (timeout, SIGKILL) leaves no
/// QEMU behind. Hence a [`crate::Testbed`] must live on the thread that
/// booted it.
pub fn die_with_parent(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: prctl is async-signal-safe; nothing else runs between fork
    // and exec.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}
