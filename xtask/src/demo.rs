//! `cargo xtask demo`: the README's first command. Until the VM demo exists
//! it shows `pathpilot stat` on the host: a loop device under a changing fio
//! load (sequential 1 MiB reads, then random 4 KiB writes).
use std::{
    process::{Child, Command, Stdio},
    time::Duration,
};

use anyhow::{Context, Result};
use xtask::util::{output, run, workspace_root};

#[derive(clap::Args)]
pub struct Args {
    /// Seconds of each workload phase.
    #[arg(long, default_value_t = 5)]
    pub phase_secs: u64,
}

struct Cleanup {
    loopdev: String,
    image: std::path::PathBuf,
    fio: Option<Child>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if let Some(mut f) = self.fio.take() {
            let _ = f.kill();
            let _ = f.wait();
        }
        let _ = Command::new("losetup").args(["-d", &self.loopdev]).status();
        let _ = std::fs::remove_file(&self.image);
    }
}

pub fn run_demo(args: Args) -> Result<()> {
    crate::setup::run(crate::setup::Args { no_apt: false })?;
    println!("demo: building pathpilot (release)");
    run(Command::new(env!("CARGO"))
        .current_dir(workspace_root())
        .args(["build", "--release", "-p", "pathpilot"]))?;
    let image = std::env::temp_dir().join(format!("pathpilot-demo-{}.img", std::process::id()));
    std::fs::File::create(&image)?.set_len(512 << 20)?;
    let loopdev = output(
        Command::new("losetup")
            .args(["--find", "--show"])
            .arg(&image),
    )
    .context("creating a loop device (needs root)")?
    .trim()
    .to_string();
    let mut guard = Cleanup {
        loopdev: loopdev.clone(),
        image,
        fio: None,
    };
    let s = args.phase_secs;
    println!(
        "demo: {loopdev}: {s} s of 1 MiB sequential reads at QD1, then {s} s of 4 KiB random writes at QD8"
    );
    guard.fio = Some(
        Command::new("fio")
            .args([
                "--filename",
                &loopdev,
                "--direct=1",
                "--ioengine=libaio",
                "--time_based",
                "--output=/dev/null",
                "--name=seqread",
                "--rw=read",
                "--bs=1m",
                "--iodepth=1",
                &format!("--runtime={s}"),
                "--name=randwrite",
                "--stonewall",
                "--rw=randwrite",
                "--bs=4k",
                "--iodepth=8",
                &format!("--runtime={s}"),
            ])
            .stdout(Stdio::null())
            .spawn()
            .context("starting fio")?,
    );
    std::thread::sleep(Duration::from_millis(200));
    run(
        Command::new(workspace_root().join("target/release/pathpilot"))
            .args(["stat", &loopdev, "--interval", "1s", "--count"])
            .arg((2 * s).to_string()),
    )?;
    Ok(())
}
