//! What the tuner sees of a map over one window, and the workload class it
//! keys its memory on.
use serde::Serialize;

use crate::observer::DeviceInterval;

/// One path's figures over a window.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PathFigures {
    pub mib_s: f64,
    /// Requests completed per second.
    pub iops: f64,
    /// Share of the window the path had I/O in flight (0..1), if known.
    pub util: Option<f64>,
}

/// A map's figures over one window: the objective (MiB/s through the map)
/// and what classifies the workload.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Window {
    pub mib_s: f64,
    pub iops: f64,
    /// Share of the bytes that were reads (0..1).
    pub read_share: f64,
    /// Mean size of the bios submitted to the map, before any split: a
    /// property of the workload, unlike request sizes, which the tuner's own
    /// max_sectors_kb changes.
    pub avg_bio_kib: f64,
    pub seq_share: f64,
    pub merge_pct: f64,
    pub avg_request_kib: f64,
    pub lat_p99_ms: Option<f64>,
    /// In the map's path order.
    pub paths: Vec<PathFigures>,
}

impl Window {
    /// From the map's dm device figures, the bytes submitted to it as bios
    /// (per-cgroup accounting sums to that), and its paths' figures.
    pub fn from_intervals<'a>(
        map: &DeviceInterval,
        bio_bytes: u64,
        paths: impl IntoIterator<Item = &'a DeviceInterval>,
    ) -> Self {
        let bytes = (map.read_bytes + map.write_bytes) as f64;
        // Bio order is the workload's; request order changes with the very
        // knobs being tuned (merged requests leave out of order).
        let (seq, all) = match map.sequential_bios + map.random_bios {
            0 => (map.sequential_ios, map.sequential_ios + map.random_ios),
            n => (map.sequential_bios, n),
        };
        Window {
            mib_s: objective(map.read_mib_s + map.write_mib_s, bio_bytes, map.interval_s),
            iops: map.iops,
            read_share: if bytes > 0.0 {
                map.read_bytes as f64 / bytes
            } else {
                0.0
            },
            avg_bio_kib: if map.bios > 0 {
                bio_bytes as f64 / map.bios as f64 / 1024.0
            } else {
                0.0
            },
            seq_share: if all > 0 {
                seq as f64 / all as f64
            } else {
                0.0
            },
            merge_pct: map.merge_pct,
            avg_request_kib: map.avg_request_bytes / 1024.0,
            lat_p99_ms: map.lat_p99_us.map(|u| u / 1000.0),
            paths: paths
                .into_iter()
                .map(|p| PathFigures {
                    mib_s: p.read_mib_s + p.write_mib_s,
                    iops: p.iops,
                    util: p.util_pct.map(|u| u / 100.0),
                })
                .collect(),
        }
    }

    /// Per-path capacity estimates, counted `per` byte or request:
    /// throughput divided by the share of time the path was busy (a path
    /// that moved 10 MiB/s while busy half the time can do about 20).
    /// `None` unless every path was busy enough to measure.
    pub fn capacities(&self, per: Per) -> Option<Vec<f64>> {
        self.paths
            .iter()
            .map(|p| match (p.util, per.rate(p)) {
                (Some(u), r) if u >= 0.05 && r > 0.0 => Some(r / u.min(1.0)),
                _ => None,
            })
            .collect()
    }

    /// What each path delivers now, counted `per` byte or request: under
    /// a load-aware selector at depth, the load already follows capacity,
    /// so this is the better estimate there (busy time overrates a fast
    /// path that is not full).
    pub fn delivered(&self, per: Per) -> Option<Vec<f64>> {
        let v: Vec<f64> = self.paths.iter().map(|p| per.rate(p)).collect();
        (!v.is_empty() && v.iter().all(|m| *m > 0.0)).then_some(v)
    }
}

/// What a path's rate is counted in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Per {
    /// MiB/s: what bandwidth-bound paths are limited in.
    Byte,
    /// IOPS: what IOPS-bound paths are limited in, where a path's MiB/s
    /// is also the size its requests merged to.
    Request,
}

impl Per {
    fn rate(self, p: &PathFigures) -> f64 {
        match self {
            Per::Byte => p.mib_s,
            Per::Request => p.iops,
        }
    }
}

/// The tuner's objective, MiB/s: what the workload got: the bytes it
/// submitted as bios, but no more than the map issued, so a backlog that
/// has not been issued yet does not count. (The issue probe counts a
/// request dm dispatches again after a bounce off a busy path once:
/// counting each dispatch would make a selector that bounces often, as
/// service-time does at a low queue_depth, look better than it is. Bios
/// stay the measure: they are what the workload asked for.)
pub fn objective(issued_mib_s: f64, bio_bytes: u64, interval_s: f64) -> f64 {
    if bio_bytes == 0 || interval_s <= 0.0 {
        return issued_mib_s;
    }
    (bio_bytes as f64 / interval_s / 1048576.0).min(issued_mib_s)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Dir {
    Read,
    Write,
    Mixed,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Size {
    /// Below 32 KiB: IOPS-bound, merging matters.
    Small,
    Medium,
    /// 256 KiB and above: bandwidth-bound, splitting across paths matters.
    Large,
}

/// The workload class: what the best settings depend on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Class {
    pub dir: Dir,
    pub size: Size,
    pub sequential: bool,
}

impl Class {
    /// `None` for a window too idle to judge.
    pub fn of(w: &Window) -> Option<Class> {
        if w.iops < 5.0 || w.mib_s < 0.05 {
            return None;
        }
        let dir = match w.read_share {
            r if r >= 0.8 => Dir::Read,
            r if r <= 0.2 => Dir::Write,
            _ => Dir::Mixed,
        };
        let size = match w.avg_bio_kib {
            k if k < 32.0 => Size::Small,
            k if k < 256.0 => Size::Medium,
            _ => Size::Large,
        };
        Some(Class {
            dir,
            size,
            // Merged bios were contiguous with a queued request: a merge
            // share is sequentiality the tuner's own queue_depth cannot
            // hide (merged requests reach the paths out of order, which
            // lowers the request-level share).
            sequential: w.seq_share >= 0.6 || w.merge_pct >= 25.0,
        })
    }

    pub fn key(&self) -> String {
        format!(
            "{}-{}-{}",
            match self.dir {
                Dir::Read => "read",
                Dir::Write => "write",
                Dir::Mixed => "mixed",
            },
            match self.size {
                Size::Small => "small",
                Size::Medium => "medium",
                Size::Large => "large",
            },
            if self.sequential { "seq" } else { "random" }
        )
    }
}

#[cfg(test)]
pub(crate) fn window(mib_s: f64, kib: f64, seq: f64, read: f64) -> Window {
    Window {
        mib_s,
        iops: mib_s * 1024.0 / kib,
        read_share: read,
        avg_bio_kib: kib,
        seq_share: seq,
        merge_pct: 0.0,
        avg_request_kib: kib,
        lat_p99_ms: Some(5.0),
        paths: vec![],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes() {
        assert_eq!(
            Class::of(&window(20.0, 1024.0, 0.99, 1.0)).unwrap().key(),
            "read-large-seq"
        );
        assert_eq!(
            Class::of(&window(2.0, 4.0, 0.9, 0.0)).unwrap().key(),
            "write-small-seq"
        );
        assert_eq!(
            Class::of(&window(50.0, 64.0, 0.01, 1.0)).unwrap().key(),
            "read-medium-random"
        );
        assert_eq!(
            Class::of(&window(50.0, 64.0, 0.01, 0.5)).unwrap().dir,
            Dir::Mixed
        );
        assert!(Class::of(&window(0.0, 4.0, 0.0, 1.0)).is_none(), "idle");
        // Merged requests reach the paths out of order: merging is the
        // evidence of sequential bios.
        let mut merged = window(4.0, 4.0, 0.3, 0.0);
        merged.merge_pct = 75.0;
        assert_eq!(Class::of(&merged).unwrap().key(), "write-small-seq");
        assert_eq!(
            Class::of(&window(4.0, 4.0, 0.3, 0.0)).unwrap().key(),
            "write-small-random"
        );
    }

    #[test]
    fn re_issued_requests_do_not_count_twice() {
        // 20 MiB of bios in 2 s, issued as 50 MiB/s with the bounces.
        assert_eq!(objective(50.0, 20 << 20, 2.0), 10.0);
        // Bios still queued at the end of the window: what was issued.
        assert_eq!(objective(8.0, 20 << 20, 2.0), 8.0);
        // No bio accounting: the issued bytes.
        assert_eq!(objective(8.0, 0, 2.0), 8.0);
    }

    #[test]
    fn capacities_need_every_path() {
        let mut w = window(40.0, 64.0, 0.0, 1.0);
        w.paths = vec![
            PathFigures {
                mib_s: 10.0,
                iops: 160.0,
                util: Some(1.0),
            },
            PathFigures {
                mib_s: 10.0,
                iops: 40.0,
                util: Some(0.25),
            },
        ];
        assert_eq!(w.capacities(Per::Byte), Some(vec![10.0, 40.0]));
        assert_eq!(w.capacities(Per::Request), Some(vec![160.0, 160.0]));
        assert_eq!(w.delivered(Per::Request), Some(vec![160.0, 40.0]));
        w.paths[1].util = None;
        assert_eq!(w.capacities(Per::Byte), None);
    }
}
