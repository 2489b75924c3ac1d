//! Empty programs on the tracepoints pathpilot's observer is on: what any
//! program there costs, whatever it does. Each event a program is attached
//! to is dispatched to it (the tracepoint's call, the kernel's guard against
//! recursion, RCU, and with `kernel.bpf_stats_enabled` the clock read around
//! the run that the accounting is made of); a program that returns at once
//! costs that and nothing more. The benches run these beside pathpilot, so
//! that its cost per I/O reads against the floor no program on the same
//! events goes under, measured alike in the same run.
//!
//! The programs are raw tracepoint programs (`mov r0, 0; exit`), loaded and
//! attached through the bpf syscall by this process, which holds them until
//! it is interrupted. The kernel runs a raw tracepoint program exactly as a
//! BTF-enabled one (the same `bpf_trace_run`); only the attach differs.
//! Each is named as aya names pathpilot's program on the same event (the
//! tracepoint's name, cut to 15 characters), so per-program figures line up.
use std::{
    collections::BTreeMap,
    ffi::CString,
    os::fd::AsRawFd,
    os::fd::{FromRawFd, OwnedFd},
    time::Duration,
};

use anyhow::{Context, Result, bail};
use pathpilot_testbed::Testbed;

use super::ProgramReading;

#[derive(clap::Args)]
pub struct Args {
    /// Leave out block_bio_queue, as pathpilot does unless asked for its
    /// per-bio probe.
    #[arg(long)]
    no_bio_probe: bool,
}

/// The events pathpilot's observer is on, as it attaches them.
pub fn tracepoints(bio: bool) -> Vec<&'static str> {
    pathpilot_common::tracepoints(bio).collect()
}

/// The name the kernel keeps for a program (`BPF_OBJ_NAME_LEN` less its
/// terminating nul), as aya cuts a program's function name.
pub fn program_name(tracepoint: &str) -> &str {
    tracepoint
        .char_indices()
        .nth(15)
        .map_or(tracepoint, |(i, _)| &tracepoint[..i])
}

const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
const BPF_RAW_TRACEPOINT_OPEN: libc::c_long = 17;
const BPF_PROG_TYPE_RAW_TRACEPOINT: u32 = 17;

fn bpf(cmd: libc::c_long, attr: &mut [u8; 128]) -> Result<i32> {
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), attr.len()) };
    if r < 0 {
        Err(std::io::Error::last_os_error().into())
    } else {
        Ok(r as i32)
    }
}

fn put(attr: &mut [u8; 128], off: usize, bytes: &[u8]) {
    attr[off..off + bytes.len()].copy_from_slice(bytes);
}

/// One empty program on `tracepoint`, attached: its fd, its link's fd and
/// its id.
fn attach(tracepoint: &str) -> Result<(OwnedFd, OwnedFd, u32)> {
    // mov64 r0, 0; exit
    let insns: [u64; 2] = [0x0000_0000_0000_00b7, 0x0000_0000_0000_0095];
    let license = c"GPL";
    let mut a = [0u8; 128];
    put(&mut a, 0, &BPF_PROG_TYPE_RAW_TRACEPOINT.to_ne_bytes());
    put(&mut a, 4, &(insns.len() as u32).to_ne_bytes());
    put(&mut a, 8, &(insns.as_ptr() as u64).to_ne_bytes());
    put(&mut a, 16, &(license.as_ptr() as u64).to_ne_bytes());
    put(&mut a, 48, program_name(tracepoint).as_bytes());
    let prog = bpf(BPF_PROG_LOAD, &mut a).with_context(|| format!("loading {tracepoint}"))?;
    let prog = unsafe { OwnedFd::from_raw_fd(prog) };
    let prog_fd = (prog.as_raw_fd() as u32).to_ne_bytes();
    let name = CString::new(tracepoint)?;
    let mut a = [0u8; 128];
    put(&mut a, 0, &(name.as_ptr() as u64).to_ne_bytes());
    put(&mut a, 8, &prog_fd);
    let link =
        bpf(BPF_RAW_TRACEPOINT_OPEN, &mut a).with_context(|| format!("attaching {tracepoint}"))?;
    let link = unsafe { OwnedFd::from_raw_fd(link) };
    // bpf_prog_info begins (type, id).
    let mut info = [0u32; 2];
    let mut a = [0u8; 128];
    put(&mut a, 0, &prog_fd);
    put(
        &mut a,
        4,
        &(std::mem::size_of_val(&info) as u32).to_ne_bytes(),
    );
    put(&mut a, 8, &(info.as_mut_ptr() as u64).to_ne_bytes());
    bpf(BPF_OBJ_GET_INFO_BY_FD, &mut a).with_context(|| format!("the id of {tracepoint}"))?;
    Ok((prog, link, info[1]))
}

/// `cargo xtask bench floor-probes`: attaches the empty programs, says
/// which (`program ID NAME`, then `observing`, on stderr, as `pathpilot
/// stat` says it), and holds them until interrupted (the kernel detaches
/// them when the process goes).
pub fn run(a: Args) -> Result<()> {
    if unsafe { libc::geteuid() } != 0 {
        bail!("floor-probes loads eBPF programs: run it as root");
    }
    // Interrupted or terminated, it leaves at once (the kernel detaches
    // the programs as their fds close), even where it was started in the
    // background of a shell, which ignores SIGINT for it.
    extern "C" fn leave(_: libc::c_int) {
        unsafe { libc::_exit(0) };
    }
    for sig in [libc::SIGINT, libc::SIGTERM] {
        unsafe { libc::signal(sig, leave as *const () as libc::sighandler_t) };
    }
    let tps = tracepoints(!a.no_bio_probe);
    let mut held = vec![];
    for tp in &tps {
        let (prog, link, id) = attach(tp)?;
        eprintln!("program {id} {}", program_name(tp));
        held.push((prog, link));
    }
    eprintln!(
        "observing: {} empty programs on {}",
        held.len(),
        tps.join(", ")
    );
    loop {
        unsafe { libc::pause() };
    }
}

/// Where the guest keeps its copy of this binary (copied from a share, so
/// that nothing is paged in over 9p while it is measured).
const GUEST_BIN: &str = "/tmp/xtask-floor";
const GUEST_LOG: &str = "/tmp/floor.log";

/// Copies this binary from the guest's share (`/share/xtask`, see
/// [`share_self`]) to where [`start_in_guest`] runs it.
pub fn install_in_guest(tb: &Testbed) -> Result<()> {
    tb.sh(&format!("cp /share/xtask {GUEST_BIN}"))?;
    Ok(())
}

/// Puts this binary into `dir` (a share for the guest) as `xtask`.
pub fn share_self(dir: &std::path::Path) -> Result<()> {
    let me = std::env::current_exe().context("this binary's path")?;
    std::fs::copy(&me, dir.join("xtask")).with_context(|| format!("copying {}", me.display()))?;
    Ok(())
}

/// Starts the floor in the guest (the bio probe's event too, as the
/// daemon's default): its pid, once its programs are attached.
pub fn start_in_guest(tb: &Testbed) -> Result<String> {
    let pid = tb.sh(&format!(
        "({GUEST_BIN} bench floor-probes > {GUEST_LOG} 2>&1 & echo $!)"
    ))?;
    let pid = pid.trim().to_string();
    if tb.until_success(
        &format!("grep -q observing {GUEST_LOG}"),
        Duration::from_secs(30),
        Duration::from_millis(200),
    )? {
        return Ok(pid);
    }
    bail!(
        "the empty programs were not attached:\n{}",
        tb.sh(&format!("cat {GUEST_LOG}"))?
    )
}

/// The floor's programs as the kernel accounts them, from the fds of the
/// process `pid` in the guest (`/proc/PID/fdinfo`), named from its log.
pub fn readings_in_guest(tb: &Testbed, pid: &str) -> Result<BTreeMap<u32, ProgramReading>> {
    let names = tb.sh(&format!("cat {GUEST_LOG}"))?;
    let fdinfo = tb.sh(&format!("cat /proc/{pid}/fdinfo/*"))?;
    Ok(readings(&names, &fdinfo))
}

/// Each program's (name, run ns, runs) by id: names from the floor's own
/// `program ID NAME` lines, figures from fdinfo (a program's fd shows its
/// `prog_id`, `run_time_ns` and `run_cnt`; its link's fd only the id).
fn readings(log: &str, fdinfo: &str) -> BTreeMap<u32, ProgramReading> {
    let names: BTreeMap<u32, &str> = log
        .lines()
        .filter_map(|l| {
            let mut f = l.strip_prefix("program ")?.split_whitespace();
            Some((f.next()?.parse().ok()?, f.next()?))
        })
        .collect();
    let mut out = BTreeMap::new();
    let (mut id, mut ns) = (None, None);
    for l in fdinfo.lines() {
        let Some((k, v)) = l.split_once(':') else {
            continue;
        };
        let v = v.trim();
        match k {
            "prog_id" => id = v.parse::<u32>().ok(),
            "run_time_ns" => ns = v.parse::<u64>().ok(),
            "run_cnt" => {
                if let (Some(i), Some(t), Some(n)) = (id, ns, v.parse::<u64>().ok())
                    && let Some(name) = names.get(&i)
                {
                    out.insert(i, (name.to_string(), t, n));
                }
                (id, ns) = (None, None);
            }
            _ => {}
        }
    }
    out
}

/// Runs per I/O under which a program is not on the I/O's path.
const OFF_PATH: f64 = 0.01;

/// Per run, what a tool's programs would cost as empty programs on the
/// same events: each of its programs' runs per I/O times the floor's ns
/// per run of the program of the same name (as the kernel keeps it: a
/// tool's may be shown whole, from its BTF). `None` when one of its
/// programs on the I/O's path has no counterpart in the floor. A program
/// that ran for fewer than one I/O in a hundred is not on that path (the
/// issue code's `block_rq_insert`, run by other disks' I/O on the host)
/// and is left out: its floor is under a nanosecond per I/O.
pub fn matched(
    tool: &BTreeMap<String, (f64, f64)>,
    floor: &BTreeMap<String, (f64, f64)>,
) -> Option<f64> {
    tool.iter()
        .filter(|(_, (_, runs_per_io))| *runs_per_io >= OFF_PATH)
        .map(|(name, (_, runs_per_io))| {
            floor
                .get(program_name(name))
                .map(|(ns, _)| ns * runs_per_io)
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_is_on_the_observers_events_named_as_aya_names_them() {
        let all = tracepoints(true);
        assert_eq!(all.len(), pathpilot_common::BTF_TRACEPOINTS.len() + 1);
        assert!(all.contains(&"block_bio_queue"));
        assert!(!tracepoints(false).contains(&"block_bio_queue"));
        assert_eq!(program_name("block_rq_complete"), "block_rq_comple");
        assert_eq!(program_name("block_rq_issue"), "block_rq_issue");
    }

    #[test]
    fn guest_readings_pair_fdinfo_with_the_floors_names() {
        let log = "program 41 block_rq_issue\nprogram 43 block_rq_comple\nobserving: 2\n";
        let fdinfo = "pos:\t0\nflags:\t02000002\nlink_type:\traw_tracepoint\nlink_id:\t9\n\
                      prog_id:\t41\ntp_name:\tblock_rq_issue\n\
                      pos:\t0\nprog_type:\t17\nprog_jited:\t1\nprog_id:\t41\n\
                      run_time_ns:\t5000\nrun_cnt:\t100\nrecursion_misses:\t0\n\
                      prog_id:\t43\nrun_time_ns:\t900\nrun_cnt:\t30\n\
                      prog_id:\t7\nrun_time_ns:\t1\nrun_cnt:\t1\n";
        let r = readings(log, fdinfo);
        assert_eq!(r.len(), 2, "{r:?}");
        assert_eq!(r[&41], ("block_rq_issue".to_string(), 5000, 100));
        assert_eq!(r[&43], ("block_rq_comple".to_string(), 900, 30));
    }

    #[test]
    fn a_tools_floor_is_its_runs_at_the_floors_cost_per_run() {
        let floor: BTreeMap<String, (f64, f64)> = [
            ("block_rq_issue".to_string(), (35.0, 1.0)),
            ("block_rq_comple".to_string(), (40.0, 1.0)),
            ("block_bio_queue".to_string(), (42.0, 1.0)),
        ]
        .into();
        let tool: BTreeMap<String, (f64, f64)> = [
            ("block_rq_issue".to_string(), (72.0, 2.0)),
            ("block_rq_complete".to_string(), (126.0, 3.0)),
        ]
        .into();
        assert_eq!(matched(&tool, &floor), Some(35.0 * 2.0 + 40.0 * 3.0));
        let other: BTreeMap<String, (f64, f64)> = [("kprobe".to_string(), (1.0, 1.0))].into();
        assert_eq!(matched(&other, &floor), None);
        // A program of its own off the I/O's path (the issue code's
        // block_rq_insert, run by another disk) adds nothing.
        let idle: BTreeMap<String, (f64, f64)> = [
            ("block_rq_issue".to_string(), (72.0, 1.0)),
            ("block_rq_insert".to_string(), (80.0, 0.002)),
        ]
        .into();
        assert_eq!(matched(&idle, &floor), Some(35.0));
    }
}
