//! A window's figures of a map and its paths: each window's rates, the
//! totals since the daemon started watching, and the workload the tuner
//! reads.
use std::collections::{BTreeMap, HashMap};

use super::map_entry::MapEntry;
use crate::{
    blockdev::DevNum,
    ctl::status::{Rates, SizeLatency, Totals},
    observer::{
        DeviceInterval, Snapshot,
        interval::{SIZE_CLASS_NAMES, byte_shares, cgroup_bytes},
    },
    tuner::{Class, Window},
};

/// A map's figures: of its last window, and its totals.
#[derive(Debug, Default)]
pub(super) struct MapFigures {
    pub(super) rates: Rates,
    /// Each path's rates and its share of the map's bytes, percent.
    pub(super) path_rates: HashMap<DevNum, (Rates, f64)>,
    pub(super) totals: Totals,
    /// Bytes submitted to the map per cgroup id.
    pub(super) cgroups: Vec<(u64, u64)>,
    /// The workload class.
    pub(super) class: Option<String>,
}

impl MapEntry {
    /// Takes the window's figures, between snapshots `prev` and `cur`: the
    /// map's and its paths' rates, totals and shares, its cgroups and its
    /// workload class. Returns its paths' intervals, in path order, and
    /// the window of the paths the tuner tunes.
    pub(super) fn measure(
        &mut self,
        prev: &Snapshot,
        cur: &Snapshot,
    ) -> (Vec<DeviceInterval>, Window) {
        let map = DeviceInterval::between_or_idle(self.dev, &self.kernel_name, None, prev, cur);
        let pis: Vec<DeviceInterval> = self
            .paths
            .iter()
            .map(|p| DeviceInterval::between_or_idle(p.dev, &p.name, None, prev, cur))
            .collect();
        let f = &mut self.figures;
        totals_add(&mut f.totals, &map);
        f.rates = rates_of(&map);
        f.path_rates.clear();
        for ((p, i), share) in self.paths.iter_mut().zip(&pis).zip(byte_shares(&pis)) {
            totals_add(&mut p.totals, i);
            let share = (share * 10.0).round() / 10.0;
            f.path_rates.insert(p.dev, (rates_of(i), share));
        }
        f.cgroups = cgroup_bytes(prev, cur, &[self.dev]);
        // The tuner sees the paths it tunes.
        let tuned = self.tuned_paths();
        let tuned_pis = self
            .paths
            .iter()
            .zip(&pis)
            .filter(|(p, _)| tuned.iter().any(|(_, d)| *d == p.dev))
            .map(|(_, i)| i);
        let w = Window::from_intervals(&map, map.bio_bytes, tuned_pis);
        self.figures.class = Class::of(&w).map(|c| c.key());
        (pis, w)
    }
}

fn totals_add(t: &mut Totals, i: &DeviceInterval) {
    t.read_ios += i.read_ios;
    t.write_ios += i.write_ios;
    t.read_bytes += i.read_bytes;
    t.write_bytes += i.write_bytes;
    t.errors += i.errors;
    t.merges += i.merges;
    // In place, kept sorted by bucket: no map is built and taken apart per
    // histogram per device per window, and a bucket once seen stays.
    let add = |acc: &mut Vec<(u64, u64)>, h: &BTreeMap<u64, u64>| {
        for (k, v) in h {
            match acc.binary_search_by_key(k, |(b, _)| *b) {
                Ok(i) => acc[i].1 += v,
                Err(i) => acc.insert(i, (*k, *v)),
            }
        }
    };
    add(&mut t.size_hist, &i.size_hist);
    add(&mut t.lat_hist, &i.lat_hist);
    // Classes in their order of size, each once.
    let rank = |n: &str| SIZE_CLASS_NAMES.iter().position(|x| *x == n);
    for c in &i.lat_by_size {
        let at = match t
            .lat_by_size_hist
            .binary_search_by_key(&rank(c.class), |(n, _)| rank(n))
        {
            Ok(at) => at,
            Err(at) => {
                t.lat_by_size_hist.insert(at, (c.class.to_string(), vec![]));
                at
            }
        };
        add(&mut t.lat_by_size_hist[at].1, &c.hist);
    }
    t.lat_sum_ns += i
        .lat_mean_us
        .map(|m| (m * 1000.0 * i.lat_samples as f64) as u64)
        .unwrap_or(0);
}

fn rates_of(i: &DeviceInterval) -> Rates {
    let n = i.sequential_ios + i.random_ios;
    Rates {
        interval_s: i.interval_s,
        iops: i.iops,
        read_mib_s: i.read_mib_s,
        write_mib_s: i.write_mib_s,
        avg_request_kib: (i.avg_request_bytes / 1024.0 * 10.0).round() / 10.0,
        merge_pct: i.merge_pct,
        lat_p50_us: i.lat_p50_us,
        lat_p99_us: i.lat_p99_us,
        inflight: i.inflight,
        inflight_max: i.inflight_max,
        util_pct: i.util_pct,
        seq_pct: (n > 0).then(|| (i.sequential_ios as f64 / n as f64 * 1000.0).round() / 10.0),
        lat_by_size: i
            .lat_by_size
            .iter()
            .map(|c| SizeLatency {
                class: c.class.to_string(),
                samples: c.samples,
                p50_us: c.p50_us,
                p99_us: c.p99_us,
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observer::SizeClassLatency;

    #[test]
    fn totals_add_histograms_bucket_by_bucket_in_order() {
        let mut t = Totals::default();
        let mut i = DeviceInterval {
            read_ios: 3,
            size_hist: BTreeMap::from([(4096, 2), (65536, 1)]),
            lat_hist: BTreeMap::from([(1024, 3)]),
            ..Default::default()
        };
        totals_add(&mut t, &i);
        // New buckets on either side and between, one seen before.
        i.size_hist = BTreeMap::from([(512, 1), (4096, 5), (16384, 2), (1 << 20, 1)]);
        totals_add(&mut t, &i);
        assert_eq!(
            t.size_hist,
            vec![(512, 1), (4096, 7), (16384, 2), (65536, 1), (1 << 20, 1)]
        );
        assert_eq!(t.lat_hist, vec![(1024, 6)]);
        assert_eq!(t.read_ios, 6);
        // By size class: in their order of size, whichever came first.
        let class = |class, hist: &[(u64, u64)]| SizeClassLatency {
            class,
            samples: hist.iter().map(|(_, c)| c).sum(),
            p50_us: None,
            p99_us: None,
            hist: hist.iter().copied().collect(),
        };
        i.lat_by_size = vec![class("64k-256k", &[(1 << 20, 2)])];
        totals_add(&mut t, &i);
        i.lat_by_size = vec![
            class("<16k", &[(1 << 14, 1)]),
            class("64k-256k", &[(1 << 20, 1), (1 << 21, 4)]),
        ];
        totals_add(&mut t, &i);
        assert_eq!(
            t.lat_by_size_hist,
            vec![
                ("<16k".to_string(), vec![(1 << 14, 1)]),
                ("64k-256k".to_string(), vec![(1 << 20, 3), (1 << 21, 4)]),
            ]
        );
    }
}
