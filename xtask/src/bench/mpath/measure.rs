//! One measured point: a fio run on the map or a raw path, with the block
//! counters of the device (and of its paths) read before and after.
use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde_json::Value;

use super::report::Point;
use super::rig::Rig;

impl Rig<'_> {
    /// One fio run of `fio_args` on `dev` with stat snapshots around it.
    pub fn measure(&self, dev: &str, fio_args: &str) -> Result<Point> {
        self.measure_secs(dev, fio_args, self.o.secs)
    }

    pub fn measure_secs(&self, dev: &str, fio_args: &str, secs: u32) -> Result<Point> {
        let paths: Vec<String> = if dev.starts_with("dm-") {
            self.disks.clone()
        } else {
            vec![]
        };
        let snap = format!(
            "snap() {{ echo \"$1 {dev} $(cat /sys/block/{dev}/stat)\"; for p in {}; do echo \"$1 $p $(cat /sys/block/$p/stat) $(cat /sys/block/$p/device/iorequest_cnt)\"; done; }}",
            paths.join(" ")
        );
        let script = format!(
            "{snap}\nsnap SB\n\
             fio --name=b --filename=/dev/{dev} --direct=1 --ioengine=libaio --time_based \
             --ramp_time={ramp} --runtime={secs} --randrepeat=0 --group_reporting {fio_args} \
             --output-format=json --output=/tmp/fio.json >/tmp/fio.err 2>&1\nrc=$?\nsnap SA\n\
             if [ $rc != 0 ]; then cat /tmp/fio.err /tmp/fio.json; exit $rc; fi\ncat /tmp/fio.json",
            ramp = self.o.ramp,
        );
        let out = self
            .tb
            .run_timeout(&script, Duration::from_secs(secs as u64 + 120))?;
        if !out.success() {
            bail!("fio failed on {dev} ({fio_args}): {}", out.stdout_str());
        }
        let text = out.stdout_str();
        let json_part = &text[text.find('{').unwrap_or(0)..];
        let f = parse_fio_json(json_part)?;
        let mut p = Point {
            mib_s: f.mib_s,
            iops: f.iops,
            lat_p99_ms: f.p99_ms,
            lat_p50_ms: Some(f.p50_ms).filter(|x| x.is_finite()),
            lat_p999_ms: Some(f.p999_ms).filter(|x| x.is_finite()),
            ..Point::default()
        };
        stat_figures(&text, dev, &paths, (secs + self.o.ramp) as f64, &mut p);
        Ok(p)
    }
}

/// fio's figures of one run; the latencies of its busier direction.
#[derive(Debug, PartialEq)]
pub struct Fio {
    pub mib_s: f64,
    pub iops: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
    /// The job's error, and short I/Os in either direction.
    pub errors: u64,
}

pub fn parse_fio_json(out: &str) -> Result<Fio> {
    let start = out.find('{').context("no fio JSON")?;
    let v: Value = serde_json::from_str(&out[start..])
        .with_context(|| format!("fio JSON: {}", &out[..out.len().min(400)]))?;
    let j = &v["jobs"][0];
    let (mut kib, mut iops) = (0.0, 0.0);
    let mut errors = j["error"].as_u64().unwrap_or(0);
    let mut busier = &Value::Null;
    let mut best_ios = -1.0;
    for d in ["read", "write"] {
        let x = &j[d];
        kib += x["bw"].as_f64().unwrap_or(0.0);
        let io = x["iops"].as_f64().unwrap_or(0.0);
        iops += io;
        errors += x["short_ios"].as_u64().unwrap_or(0);
        if io > best_ios {
            best_ios = io;
            busier = x;
        }
    }
    let ms = |x: &Value| x.as_f64().unwrap_or(f64::NAN) / 1e6;
    let pct = |k: &str| ms(&busier["clat_ns"]["percentile"][k]);
    Ok(Fio {
        mib_s: kib / 1024.0,
        iops,
        p50_ms: pct("50.000000"),
        p99_ms: pct("99.000000"),
        p999_ms: pct("99.900000"),
        max_ms: ms(&busier["clat_ns"]["max"]),
        errors,
    })
}

/// `/sys/block/X/stat` fields (and iorequest_cnt) by device, before and after.
fn parse_snaps(out: &str) -> BTreeMap<(String, String), Vec<u64>> {
    let mut m = BTreeMap::new();
    for l in out.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() < 6 || (f[0] != "SB" && f[0] != "SA") {
            continue;
        }
        let vals: Vec<u64> = f[2..]
            .iter()
            .map(|x| {
                x.strip_prefix("0x")
                    .map(|h| u64::from_str_radix(h, 16).unwrap_or(0))
                    .unwrap_or_else(|| x.parse().unwrap_or(0))
            })
            .collect();
        m.insert((f[0].to_string(), f[1].to_string()), vals);
    }
    m
}

/// Figures of device `dev` (and `paths`) from the snapshot lines.
fn stat_figures(out: &str, dev: &str, paths: &[String], secs: f64, p: &mut Point) {
    let s = parse_snaps(out);
    let delta = |d: &str, i: usize| -> u64 {
        let b = s.get(&("SB".into(), d.into())).and_then(|v| v.get(i));
        let a = s.get(&("SA".into(), d.into())).and_then(|v| v.get(i));
        match (b, a) {
            (Some(b), Some(a)) => a.saturating_sub(*b),
            _ => 0,
        }
    };
    let ios = delta(dev, 0) + delta(dev, 4);
    let merges = delta(dev, 1) + delta(dev, 5);
    let sectors = delta(dev, 2) + delta(dev, 6);
    p.avg_request_kib = if ios > 0 {
        sectors as f64 * 512.0 / ios as f64 / 1024.0
    } else {
        f64::NAN
    };
    p.merge_pct = if ios + merges > 0 {
        merges as f64 * 100.0 / (ios + merges) as f64
    } else {
        f64::NAN
    };
    if !paths.is_empty() {
        // iorequest_cnt is the 12th value after the 11+ stat fields: the last.
        let (mut cmds, mut psect, mut pios) = (0u64, 0u64, 0u64);
        for d in paths {
            let n = s.get(&("SA".into(), d.clone())).map_or(0, |v| v.len());
            if n == 0 {
                continue;
            }
            cmds += delta(d, n - 1);
            psect += delta(d, 2) + delta(d, 6);
            pios += delta(d, 0) + delta(d, 4);
        }
        if cmds > 0 {
            p.path_avg_request_kib = Some(psect as f64 * 512.0 / cmds as f64 / 1024.0);
            p.bounces_s = Some(pios.saturating_sub(cmds) as f64 / secs.max(1e-9));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fio_and_stat_parsing() {
        let fio = r#"{"jobs":[{"error":0,"read":{"bw":20480,"iops":20.0,"short_ios":1,"clat_ns":{"max":90000000,"percentile":{"50.000000":2000000,"99.000000":50000000,"99.900000":80000000}}},"write":{"bw":0,"iops":0.0}}]}"#;
        let f = parse_fio_json(fio).unwrap();
        assert_eq!(
            f,
            Fio {
                mib_s: 20.0,
                iops: 20.0,
                p50_ms: 2.0,
                p99_ms: 50.0,
                p999_ms: 80.0,
                max_ms: 90.0,
                errors: 1
            }
        );
        let snaps = "SB dm-0 10 0 80 0 0 0 0 0 0 0 0\nSB sda 5 0 40 0 0 0 0 0 0 0 0 0x5\n\
                     SA dm-0 20 10 240 0 0 0 0 0 0 0 0\nSA sda 17 0 120 0 0 0 0 0 0 0 0 0x9\n";
        let mut p = Point::default();
        stat_figures(snaps, "dm-0", &["sda".into()], 2.0, &mut p);
        // 10 requests of 160 sectors: 8 KiB each; 10 merged of 20 bios.
        assert_eq!(p.avg_request_kib, 8.0);
        assert_eq!(p.merge_pct, 50.0);
        // 80 sectors over 4 SCSI commands; 8 bounced issues in 2 s.
        assert_eq!(p.path_avg_request_kib, Some(10.0));
        assert_eq!(p.bounces_s, Some(4.0));
    }
}
