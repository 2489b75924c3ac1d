//! `pathpilot stat`: the product's iostat, from the eBPF counters.
use std::{
    collections::HashMap,
    io::Write,
    time::{Duration, Instant},
};

use anyhow::{Context, Result};

use super::{parse_duration, signals};
use crate::{
    blockdev::{BlockDev, DevNum, display_name},
    observer::{Access, Bios, DeviceInterval, MapInterval, Observer, Scope, path_to_map},
};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Devices to observe: a path (/dev/sdb), a kernel name (sdb) or MAJ:MIN.
    /// None: every block device that has traffic.
    pub devices: Vec<String>,
    /// Length of one interval (500ms, 1s, 2m; a bare number is seconds).
    #[arg(short, long, default_value = "1s", value_parser = parse_duration)]
    pub interval: Duration,
    /// Stop after this many intervals (default: until Ctrl-C).
    #[arg(short, long)]
    pub count: Option<u64>,
    /// One JSON object per device per interval (fields in docs/commands.md).
    #[arg(long)]
    pub json: bool,
    /// Also a probe on every bio (block_bio_queue): each cgroup's bytes,
    /// bios counted one by one and their order (sequential_bios,
    /// random_bios), for about 30% more eBPF time per I/O. Without it
    /// (the default) bios are counted from the requests, merges and
    /// splits, and those two are 0.
    #[arg(long)]
    pub bio_probe: bool,
    /// The default since the bio probe became opt-in; still accepted.
    #[arg(long, hide = true, conflicts_with = "bio_probe")]
    pub no_bio_probe: bool,
}

pub fn run(args: Args) -> Result<()> {
    // Resolve every device before loading anything: a typo is the common
    // error and must not cost an eBPF load.
    let devices: Vec<BlockDev> = args
        .devices
        .iter()
        .map(|d| BlockDev::resolve(d))
        .collect::<Result<_, _>>()?;
    let scope = if devices.is_empty() {
        Scope::All
    } else {
        Scope::WatchList
    };
    signals::install();
    let bios = Bios::probed(args.bio_probe);
    let mut obs =
        Observer::load_with(scope, Access::Auto, bios).context("cannot start the observer")?;
    for d in &devices {
        obs.watch(d.dev)?;
    }
    let what = if devices.is_empty() {
        "all block devices".to_string()
    } else {
        devices
            .iter()
            .map(|d| format!("{} ({})", d.name, d.dev))
            .collect::<Vec<_>>()
            .join(", ")
    };
    eprintln!(
        "pathpilot: observing {what} every {:?}; Ctrl-C stops",
        args.interval
    );
    let mut names: HashMap<DevNum, String> =
        devices.iter().map(|d| (d.dev, d.name.clone())).collect();
    let mut prev = obs.snapshot()?;
    let mut deadline = Instant::now() + args.interval;
    let mut out = std::io::stdout().lock();
    let mut printed = 0u64;
    let mut header_due = !args.json;
    while args.count.is_none_or(|c| printed < c) {
        if !signals::sleep_until(deadline) {
            break;
        }
        deadline += args.interval;
        let cur = obs.snapshot()?;
        let maps = path_to_map();
        let mut rows: Vec<DeviceInterval> = Vec::new();
        let list: Vec<DevNum> = if devices.is_empty() {
            cur.devices.keys().copied().collect()
        } else {
            devices.iter().map(|d| d.dev).collect()
        };
        for dev in list {
            let name = names
                .entry(dev)
                .or_insert_with(|| display_name(dev))
                .clone();
            let map = maps.get(&dev).map(|m| display_name(*m));
            let row = DeviceInterval::between_or_idle(dev, &name, map, &prev, &cur);
            if !devices.is_empty() || row.active() {
                rows.push(row);
            }
        }
        prev = cur;
        printed += 1;
        let res = if args.json {
            rows.iter().try_for_each(|r| {
                writeln!(out, "{}", serde_json::to_string(r).expect("serialisable"))
            })
        } else {
            write_text(&mut out, &rows, &maps, &mut header_due)
        };
        // A closed pipe (`| head`) ends the command quietly.
        if res.and_then(|()| out.flush()).is_err() {
            break;
        }
    }
    Ok(())
}

const HEADER: &str = "time      device           r/s      w/s   rMiB/s   wMiB/s  avgKiB merge%  seq%    p50us    p99us inflt  max util%  err";

fn opt(v: Option<f64>, w: usize, p: usize) -> String {
    v.map(|x| format!("{x:>w$.p$}"))
        .unwrap_or_else(|| format!("{:>w$}", "-"))
}

fn write_text(
    out: &mut impl Write,
    rows: &[DeviceInterval],
    maps: &HashMap<DevNum, DevNum>,
    header_due: &mut bool,
) -> std::io::Result<()> {
    if *header_due {
        writeln!(out, "{HEADER}")?;
        *header_due = false;
    }
    let now = clock();
    for r in rows {
        let data = r.read_ios + r.write_ios + r.discard_ios;
        let seq = if r.sequential_ios + r.random_ios > 0 {
            Some(r.sequential_ios as f64 / (r.sequential_ios + r.random_ios) as f64 * 100.0)
        } else {
            None
        };
        writeln!(
            out,
            "{now}  {:<12} {:>8.1} {:>8.1} {:>8.2} {:>8.2} {:>7.1} {:>6.1} {} {} {} {:>5} {:>4} {} {:>4}",
            truncate(&r.device, 12),
            r.read_ios as f64 / r.interval_s,
            r.write_ios as f64 / r.interval_s,
            r.read_mib_s,
            r.write_mib_s,
            if data > 0 {
                r.avg_request_bytes / 1024.0
            } else {
                0.0
            },
            r.merge_pct,
            opt(seq, 5, 1),
            opt(r.lat_p50_us, 8, 1),
            opt(r.lat_p99_us, 8, 1),
            r.inflight,
            r.inflight_max,
            opt(r.util_pct, 5, 1),
            r.errors,
        )?;
    }
    // One summary line per dm map whose paths are shown.
    let mut by_map: HashMap<DevNum, Vec<&DeviceInterval>> = HashMap::new();
    for r in rows {
        if let Some(m) = r.dev.parse().ok().and_then(|d: DevNum| maps.get(&d)) {
            by_map.entry(*m).or_default().push(r);
        }
    }
    let mut keys: Vec<_> = by_map.keys().copied().collect();
    keys.sort();
    for m in keys {
        let s = MapInterval::sum(&display_name(m), m, &by_map[&m]);
        let shares: Vec<String> = s
            .paths
            .iter()
            .zip(&s.path_share_pct)
            .map(|(p, pct)| format!("{p} {pct:.0}%"))
            .collect();
        writeln!(
            out,
            "{now}  = map {}: {:.1} IOPS, {:.2} MiB/s over {} paths ({})",
            s.map,
            s.iops,
            s.mib_s,
            s.paths.len(),
            shares.join(", ")
        )?;
    }
    Ok(())
}

fn truncate(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// Wall-clock HH:MM:SS in local time.
fn clock() -> String {
    let t = unsafe { libc::time(std::ptr::null_mut()) };
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    unsafe { libc::localtime_r(&t, &mut tm) };
    format!("{:02}:{:02}:{:02}", tm.tm_hour, tm.tm_min, tm.tm_sec)
}
