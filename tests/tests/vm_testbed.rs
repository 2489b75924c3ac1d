//! Tests of the VM testbed itself: topology, both link models,
//! cable pull, and what a boot costs. Each test boots its own VM; the
//! testbed's machine-wide lock runs them one at a time.
//!
//! The throughput checks have wide margins on purpose: they prove the
//! testbed models what it claims (sum of caps, wire serialisation), they
//! are not benchmarks.
use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use pathpilot_testbed::Testbed;
use pathpilot_tests::boot_or_skip;
use pathpilot_tests::guest::TestbedExt;

/// fio run length: long enough to average out the throttle's initial
/// burst, short enough to keep the suite in CI's budget.
const FIO_SECS: u32 = 3;

#[test]
fn four_paths_one_wwid_map_reads_same_bytes() -> Result<()> {
    let tb = boot_or_skip!(Testbed::builder().paths(4));
    let disks = tb.wait_disks(4, Duration::from_secs(10))?;
    let mut wwids: Vec<_> = disks.iter().map(|d| d.wwid.clone()).collect();
    wwids.dedup();
    ensure!(
        wwids.len() == 1 && !wwids[0].is_empty(),
        "paths must share one WWID: {disks:?}"
    );
    eprintln!("disks: {disks:?}");

    let devs: Vec<&str> = disks.iter().map(|d| d.dev.as_str()).collect();
    tb.create_map("mp", "round-robin", &devs)?;
    let paths = tb.map_paths("mp")?;
    ensure!(
        paths.len() == 4 && paths.iter().all(|p| p.1),
        "all 4 paths active: {paths:?}"
    );

    // 64 MiB: every path serves part of it (round-robin, 1 MiB requests).
    let sum = |dev: &str| {
        tb.sh(&format!(
            "dd if={dev} bs=1M count=64 iflag=direct 2>/dev/null | md5sum"
        ))
    };
    let via_map = sum("/dev/mapper/mp")?;
    let via_path = sum(&format!("/dev/{}", disks[0].name))?;
    let host = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "head -c 64M {} | md5sum",
            tb.images().lun.display()
        ))
        .output()?;
    let host = String::from_utf8_lossy(&host.stdout).into_owned();
    let word = |s: &str| s.split_whitespace().next().unwrap_or_default().to_string();
    eprintln!(
        "md5: map {} path {} host {}",
        word(&via_map),
        word(&via_path),
        word(&host)
    );
    ensure!(word(&via_map) == word(&via_path), "map and path differ");
    ensure!(
        word(&via_map) == word(&host),
        "the guest reads other bytes than the LUN image holds"
    );

    // multipath-tools runs without its daemon (informational: its output
    // format is not ours to assert).
    let ll = tb.run("multipath -ll 2>&1")?;
    eprintln!("multipath -ll (exit {}):\n{}", ll.code, ll.stdout_str());
    tb.sh("dmsetup remove mp")?;
    Ok(())
}

#[test]
fn throttle_map_gets_sum_of_caps() -> Result<()> {
    let tb = boot_or_skip!(Testbed::builder().paths(4).cap_mib(20.0));
    let disks = tb.wait_disks(4, Duration::from_secs(10))?;
    let devs: Vec<&str> = disks.iter().map(|d| d.dev.as_str()).collect();
    tb.create_map("mp", "round-robin", &devs)?;
    let one = tb.fio_read_mib(&format!("/dev/{}", disks[0].name), 4, FIO_SECS, 0)?;
    let map = tb.fio_read_mib("/dev/mapper/mp", 4, FIO_SECS, 256)?;
    eprintln!(
        "MEASURED throttle 4 x 20 MiB/s, 1 MiB O_DIRECT QD4: one path {one:.1} MiB/s, map {map:.1} MiB/s ({:.2}x)",
        map / one
    );
    ensure!(
        map >= 2.5 * one,
        "map {map:.1} MiB/s < 2.5 x one path {one:.1} MiB/s"
    );

    // Caps change live (QMP qom-set on the path's throttle group).
    tb.set_caps(0, 5.0, 0)?;
    let first = tb.disks()?[0].name.clone();
    let slow = tb.fio_read_mib(&format!("/dev/{first}"), 4, FIO_SECS, 0)?;
    eprintln!("MEASURED path 0 after set_caps(5 MiB/s): {slow:.1} MiB/s");
    ensure!(
        (3.5..7.5).contains(&slow),
        "path 0 capped live at 5 MiB/s reads {slow:.1} MiB/s"
    );
    Ok(())
}

#[test]
fn wire_serialises_like_a_link() -> Result<()> {
    let tb = boot_or_skip!(Testbed::builder().wire().paths(2).cap_mib(20.0));
    let disks = tb.wait_disks(2, Duration::from_secs(10))?;
    let devs: Vec<&str> = disks.iter().map(|d| d.dev.as_str()).collect();
    tb.create_map("mp", "round-robin", &devs)?;
    let path = format!("/dev/{}", disks[0].name);
    let one1 = tb.fio_read_mib(&path, 1, FIO_SECS, 0)?;
    let one8 = tb.fio_read_mib(&path, 8, FIO_SECS, 0)?;
    let map1 = tb.fio_read_mib("/dev/mapper/mp", 1, FIO_SECS, 256)?;
    let map8 = tb.fio_read_mib("/dev/mapper/mp", 8, FIO_SECS, 512)?;
    eprintln!(
        "MEASURED wire 2 x 20 MiB/s, 1 MiB O_DIRECT: one path QD1 {one1:.1} QD8 {one8:.1}; \
         rr map QD1 {map1:.1} ({:.2}x) QD8 {map8:.1} ({:.2}x) MiB/s",
        map1 / one1,
        map8 / one8
    );
    ensure!(
        map1 <= 1.3 * one1,
        "QD1 through the map {map1:.1} > 1.3 x one path {one1:.1}: not a wire"
    );
    ensure!(
        map8 >= 1.6 * one8,
        "QD8 through the map {map8:.1} < 1.6 x one path {one8:.1}"
    );
    Ok(())
}

#[test]
fn pull_path_under_load_and_restore() -> Result<()> {
    let tb = boot_or_skip!(Testbed::builder().paths(4).cap_mib(20.0));
    let disks = tb.wait_disks(4, Duration::from_secs(10))?;
    let devs: Vec<&str> = disks.iter().map(|d| d.dev.as_str()).collect();
    tb.create_map("mp", "round-robin", &devs)?;
    let reader = tb.spawn(
        "fio --name=bg --filename=/dev/mapper/mp --rw=read --bs=1M --direct=1 --ioengine=libaio \
         --iodepth=4 --size=512M --runtime=8 --time_based --output-format=terse --terse-version=3",
    )?;
    std::thread::sleep(Duration::from_millis(1500));

    let pulled = &disks[1];
    let t = tb.pull_path(1)?;
    eprintln!("pulled path 1 ({} {}) in {t:?}", pulled.name, pulled.dev);
    let t = Instant::now();
    loop {
        let st = tb.map_paths("mp")?;
        if st.iter().any(|(d, active)| d == &pulled.dev && !active) {
            eprintln!("dm failed {} after {:?}: {st:?}", pulled.dev, t.elapsed());
            break;
        }
        ensure!(
            t.elapsed() < Duration::from_secs(10),
            "dm never failed the pulled path: {st:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Reads continue on the remaining paths.
    let dm = tb.dm_name("mp")?;
    let sectors = || -> Result<u64> {
        let s = tb.sh(&format!("cat /sys/block/{dm}/stat"))?;
        Ok(s.split_whitespace().nth(2).unwrap_or("0").parse()?)
    };
    let s0 = sectors()?;
    std::thread::sleep(Duration::from_secs(1));
    let s1 = sectors()?;
    eprintln!(
        "map read {:.1} MiB in the second after the pull",
        (s1 - s0) as f64 / 2048.0
    );
    ensure!(s1 > s0 + 2048 * 10, "reads stalled after the pull");

    tb.restore_path(1)?;
    let now = tb.wait_disks(4, Duration::from_secs(15))?;
    let new = now
        .iter()
        .find(|d| !disks.iter().any(|o| o.name == d.name))
        .ok_or_else(|| anyhow::anyhow!("no new disk after restore: {now:?}"))?;
    eprintln!(
        "restored as {} {} (was {} {})",
        new.name, new.dev, pulled.name, pulled.dev
    );
    ensure!(new.wwid == pulled.wwid, "restored path has another WWID");
    // A new dev_t: the map must be reloaded to use it.
    let devs: Vec<&str> = now.iter().map(|d| d.dev.as_str()).collect();
    tb.reload_map("mp", "round-robin", &devs)?;
    let st = tb.map_paths("mp")?;
    ensure!(
        st.len() == 4 && st.iter().all(|p| p.1),
        "after reload: {st:?}"
    );
    // Path state is driven by dm messages (what the daemon will do).
    tb.sh(&format!("dmsetup message mp 0 fail_path {}", new.dev))?;
    ensure!(
        tb.map_paths("mp")?.iter().any(|(d, a)| d == &new.dev && !a),
        "fail_path had no effect"
    );
    tb.sh(&format!("dmsetup message mp 0 reinstate_path {}", new.dev))?;
    let st = tb.map_paths("mp")?;
    ensure!(st.iter().all(|p| p.1), "reinstate_path: {st:?}");

    let out = tb.wait_job(&reader, Duration::from_secs(30))?;
    ensure!(
        out.success(),
        "the reader failed across the pull: {}{}",
        out.stdout_str(),
        out.stderr_str()
    );
    let terse = out.stdout_str();
    let f: Vec<&str> = terse
        .lines()
        .find(|l| l.starts_with("3;"))
        .unwrap_or_default()
        .split(';')
        .collect();
    eprintln!(
        "reader across pull/restore: {} MiB/s, errors field {}",
        f.get(6).and_then(|k| k.parse::<f64>().ok()).unwrap_or(0.0) / 1024.0,
        f.get(4).unwrap_or(&"?")
    );
    ensure!(f.get(4) == Some(&"0"), "the reader saw I/O errors: {terse}");
    tb.sh("dmsetup remove mp")?;
    Ok(())
}

#[test]
fn empty_command_boot_run_poweroff() -> Result<()> {
    let t = Instant::now();
    let tb = boot_or_skip!(Testbed::builder().paths(2));
    let boot = tb.boot_time();
    let o = tb.run("true")?;
    let cmd = o.elapsed;
    let off = tb.power_off()?;
    let vm = boot + cmd + off;
    eprintln!(
        "MEASURED empty command: boot {:.2} s + command {:.3} s + power-off {:.2} s = {:.2} s (wall incl. image check and lock wait {:.2} s)",
        boot.as_secs_f64(),
        cmd.as_secs_f64(),
        off.as_secs_f64(),
        vm.as_secs_f64(),
        t.elapsed().as_secs_f64()
    );
    ensure!(
        vm < Duration::from_secs(30),
        "boot + run + power-off took {vm:?} (target < 10 s)"
    );
    Ok(())
}

#[test]
fn command_channel_is_binary_safe_and_cheap() -> Result<()> {
    let tb = boot_or_skip!(Testbed::builder().paths(1));
    let o = tb.run("printf 'a\\0b\\n@@Z 1\\n'; printf 'err\\377' >&2; exit 7")?;
    ensure!(o.code == 7, "exit code {}", o.code);
    ensure!(o.stdout == b"a\0b\n@@Z 1\n", "stdout {:?}", o.stdout);
    ensure!(o.stderr == b"err\xff", "stderr {:?}", o.stderr);
    let big = tb.sh("head -c 3000000 /dev/zero | tr '\\0' x")?;
    ensure!(
        big.len() == 3_000_000,
        "3 MB output came back as {}",
        big.len()
    );
    let t = Instant::now();
    for _ in 0..10 {
        tb.sh("true")?;
    }
    eprintln!(
        "MEASURED per-command round trip: {:.0} ms",
        t.elapsed().as_secs_f64() * 100.0
    );
    let e = tb
        .run_timeout("sleep 30", Duration::from_secs(2))
        .unwrap_err();
    ensure!(format!("{e:#}").contains("timed out"), "{e:#}");
    tb.sh("true")
        .map_err(|e| e.context("the VM must stay usable after a command timeout"))?;
    Ok(())
}
