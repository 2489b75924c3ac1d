//! The changes the tuner tries for a workload, from the current settings,
//! most promising first, by knob family: weights by measured capacity and
//! splitting large requests; merging small sequential ones (scheduler,
//! queue depth, active paths); the path selector; and back to where the
//! map started. Each changes one knob (weights may bring the selector, and
//! a split, with them).
use super::{Class, Knob, Per, Settings, Size, Tuner, Window, trial_value};
use crate::mpath::Selector;

/// A candidate: the knob it is for, the settings it tries, and why.
type Candidate = (Knob, Settings, String);

/// Candidates gathered from the current settings; a change that changes
/// nothing is not one.
struct Gather<'a> {
    cur: &'a Settings,
    out: Vec<Candidate>,
}

impl Gather<'_> {
    fn push(&mut self, k: Knob, f: impl FnOnce(&mut Settings), why: String) {
        let mut s = self.cur.clone();
        f(&mut s);
        if s != *self.cur {
            self.out.push((k, s, why));
        }
    }
}

/// What the tuner can tell of the paths' capacities in a window.
struct Capacity {
    /// Per path, MiB/s, where measured (or learnt earlier).
    caps: Option<Vec<f64>>,
    /// The capacities are the ones learnt earlier, not this window's.
    learned: bool,
    /// The map's service-time weights already differ clearly.
    weighted: bool,
    /// The paths clearly differ, by the weights or the capacities.
    uneven: bool,
}

/// service-time weighted by measured capacity, and why.
struct Weighing {
    weights: Vec<u32>,
    why: String,
}

impl Weighing {
    fn apply(&self, s: &mut Settings) {
        s.selector = Selector::ServiceTime;
        s.weights = self.weights.clone();
    }
}

impl Tuner {
    /// Candidate changes for this class from the current settings, most
    /// promising first; each changes one knob.
    pub(super) fn candidates(&self, class: Class, w: &Window) -> Vec<Candidate> {
        let cur = &self.current;
        let n = cur.active_paths.max(1);
        let cap = self.capacity(class, w);
        // With one active path there is nothing to select between.
        let selectors: &[Selector] = if n > 1 {
            &self.available_selectors
        } else {
            &[]
        };
        let weigh = weighing(cur, &cap, selectors);
        let mut g = Gather { cur, out: vec![] };
        if class.size == Size::Large {
            self.split_large(&mut g, w, n, &cap, weigh.as_ref());
        }
        if class.size == Size::Small && class.sequential {
            merge_small(&mut g, w, n);
        }
        // Weighted by capacity before any plain selector: on paths this
        // unequal it is where the search ends, and a plain load-aware
        // selector first costs a trial that a short phase cannot spare.
        // (An unweighted large reader had its weights first, above.)
        if (class.size != Size::Large || cap.weighted)
            && let Some(wt) = &weigh
        {
            g.push(Knob::Weights, |s| wt.apply(s), wt.why.clone());
        }
        selector_candidates(&mut g, class, selectors, &cap);
        self.back_to_initial(&mut g);
        self.untried(class, g.out)
    }

    /// The paths' capacities as this window shows them, or as learnt.
    fn capacity(&self, class: Class, w: &Window) -> Capacity {
        let cur = &self.current;
        let total_paths = w.paths.len().max(cur.active_paths);
        // Capacity per path. Round-robin splits requests evenly, so what a
        // path delivers says nothing of its capacity there, and neither
        // does it for large requests at low depth, which follow the
        // selector's rotation, nor at queue_depth 1, where requests bounce
        // off a busy path and land where a slot is free, so that equal
        // paths deliver unequally: busy time instead (exact for large
        // requests, tens of ms each, and for one request at a time;
        // io_ticks counts in jiffies). Elsewhere the load of a load-aware
        // selector already follows capacity.
        let measure = |per: Per| {
            if cur.selector == Selector::RoundRobin
                || class.size == Size::Large
                || cur.queue_depth == 1
            {
                w.capacities(per)
            } else {
                w.delivered(per)
            }
            .filter(|c| c.len() == total_paths)
        };
        // Small requests may be bound by IOPS or by bandwidth, and a path's
        // MiB/s is also the size its requests merged to (equal paths whose
        // requests merge differently read unequal MiB/s at the same IOPS):
        // they differ only when counted in requests too.
        let measured = match measure(Per::Byte) {
            Some(c)
                if class.size == Size::Small
                    && clearly_unequal(&c)
                    && !measure(Per::Request).is_some_and(|r| clearly_unequal(&r)) =>
            {
                None
            }
            c => c,
        };
        // A large-request workload whose own figures look even falls back
        // on the capacity seen earlier (kept only when clearly unequal).
        let (caps, learned) = match measured {
            Some(c) if clearly_unequal(&c) => (Some(c), false),
            c => match &self.path_caps {
                Some(k) if class.size == Size::Large && k.len() == total_paths => {
                    (Some(k.clone()), true)
                }
                _ => (c, false),
            },
        };
        // Weights the search kept say so too, when this window cannot (a
        // path weighted low may deliver nothing in it).
        let weighted = cur.selector == Selector::ServiceTime
            && clearly_unequal(&cur.weights.iter().map(|w| *w as f64).collect::<Vec<_>>());
        let uneven = weighted || caps.as_deref().is_some_and(clearly_unequal);
        Capacity {
            caps,
            learned,
            weighted,
            uneven,
        }
    }

    /// Large requests: split so that their pieces travel down several
    /// paths at once, with the weights by capacity first on uneven paths.
    fn split_large(
        &self,
        g: &mut Gather,
        w: &Window,
        n: usize,
        cap: &Capacity,
        weigh: Option<&Weighing>,
    ) {
        let cur = g.cur;
        // On even paths, one piece per active path; on uneven ones two, so
        // that service-time's weights can share them out by capacity (with
        // one piece a path, each request waits for the slowest).
        let pieces = if cap.uneven { 2 * n } else { n };
        let first = split_kib(w.avg_bio_kib, pieces);
        let splits: Vec<u32> = std::iter::once(first)
            .chain(SPLIT_KIB.into_iter().filter(|kb| *kb != first))
            .filter(|kb| *kb < cur.max_sectors_kb)
            .collect();
        let split_why = format!(
            "{:.0} KiB requests over {n} paths: split them so the pieces go down several paths at once",
            w.avg_bio_kib
        );
        // Unweighted, first send each request where it finishes soonest
        // (with one large request in flight, the fastest path) and its
        // pieces by the same weights, in one trial: the two one after the
        // other take most of a short phase, and a split without weights
        // gains nothing on uneven paths (the slowest path holds every
        // request up). Weights alone follow, should the pair lose. Weights
        // a map already has leave splitting as what there is to gain:
        // re-weighing comes after it, with the other classes', and moves
        // little once the weights follow the capacities.
        if !cap.weighted
            && let Some(wt) = weigh
        {
            if let Some(kb) = splits.first()
                && !self.dead.contains(&Knob::MaxSectorsKb)
            {
                g.push(
                    Knob::Weights,
                    |s| {
                        wt.apply(s);
                        s.max_sectors_kb = *kb;
                    },
                    format!(
                        "{}, and {split_why} (max_sectors_kb {} -> {kb})",
                        wt.why, cur.max_sectors_kb
                    ),
                );
            }
            g.push(Knob::Weights, |s| wt.apply(s), wt.why.clone());
        }
        for kb in &splits {
            g.push(
                Knob::MaxSectorsKb,
                |s| s.max_sectors_kb = *kb,
                split_why.clone(),
            );
        }
    }

    /// Back to where the map started, for knobs moved earlier.
    fn back_to_initial(&self, g: &mut Gather) {
        for k in [Knob::MaxSectorsKb, Knob::QueueDepth, Knob::ActivePaths] {
            if g.cur.show(k) != self.initial.show(k) {
                g.push(
                    k,
                    |s| *s = s.with(k, &self.initial),
                    format!("back to the initial {}", k.name()),
                );
            }
        }
    }

    /// The candidates the tuner may try now: none that moves a knob off
    /// limits (a candidate may move more than its knob: weights bring
    /// service-time with them), none of a dead knob, none tried for this
    /// class within the retry period.
    fn untried(&self, class: Class, mut out: Vec<Candidate>) -> Vec<Candidate> {
        let cur = &self.current;
        let key = class.key();
        out.retain(|(_, s, _)| !cur.diff(s).into_iter().any(|k| self.off_limits(k)));
        out.retain(|(k, s, _)| {
            !self.dead.contains(k)
                && self
                    .tried
                    .get(&(key.clone(), *k, trial_value(*k, cur, s)))
                    .is_none_or(|at| self.last_t - at >= self.cfg.retry_after_s)
        });
        out
    }
}

/// service-time weighted by measured capacity (the dm analogue of NVMe's
/// adaptive policy), where the paths are uneven and the weights new
/// enough to try. From another selector this moves both.
fn weighing(cur: &Settings, cap: &Capacity, selectors: &[Selector]) -> Option<Weighing> {
    let caps = cap.caps.as_ref()?;
    if !cap.uneven || !selectors.contains(&Selector::ServiceTime) {
        return None;
    }
    let weights = weights_from(caps);
    if cur.selector == Selector::ServiceTime && !differs_enough(&weights, &cur.weights) {
        return None;
    }
    let caps_s: Vec<String> = caps.iter().map(|c| format!("{c:.0}")).collect();
    let why = format!(
        "{} path capacity {} MiB/s: service-time weighted by it",
        if cap.learned {
            "earlier measured"
        } else {
            "measured"
        },
        caps_s.join("/")
    );
    Some(Weighing { weights, why })
}

/// Small sequential requests: they merge only at the dm queue, and only
/// while they wait there.
fn merge_small(g: &mut Gather, w: &Window, n: usize) {
    let cur = g.cur;
    if cur.scheduler == "none" {
        g.push(
            Knob::Scheduler,
            |s| s.scheduler = "mq-deadline".into(),
            "small sequential requests can only merge at the dm queue, which needs a scheduler"
                .into(),
        );
    }
    // Fewer slots on the paths keep requests waiting at the dm queue,
    // where they merge (a request-based dm device merges only what waits
    // in its own queue). Merging starts only once paths x queue_depth <
    // I/Os in flight, so shallow cuts rarely change anything: the deepest
    // cut first, then 2; 8 and 32 remain for an array that loses at low
    // depth.
    let merging = format!(
        "{:.1} KiB sequential requests, {:.0}% merged",
        w.avg_request_kib, w.merge_pct
    );
    for qd in [1u32, 2, 8, 32] {
        if qd < cur.queue_depth {
            g.push(
                Knob::QueueDepth,
                |s| s.queue_depth = qd,
                format!("{merging}: fewer path slots keep them queued where they merge"),
            );
        }
    }
    for k in [n / 2, 1] {
        if k >= 1 && k < n {
            g.push(
                Knob::ActivePaths,
                |s| s.active_paths = k,
                "small sequential I/O: fewer active paths, fewer slots, more merging (seed 001)"
                    .into(),
            );
        }
    }
    // At 1, 2 is still worth a trial for an array that pipelines two
    // requests a path; after the paths, which merge's shared budget needs
    // first.
    if cur.queue_depth == 1 {
        g.push(
            Knob::QueueDepth,
            |s| s.queue_depth = 2,
            format!(
                "{merging} at queue_depth 1: one slot more, for an array that overlaps two requests a path"
            ),
        );
    }
}

/// Another path selector.
fn selector_candidates(g: &mut Gather, class: Class, selectors: &[Selector], cap: &Capacity) {
    let cur = g.cur;
    for sel in selectors {
        // Round-robin runs every path at the slowest one's pace: not a
        // candidate when paths differ. Nor, where service-time can be
        // weighted, is queue-length for large requests: the pieces of one
        // leave together, so it counts them out evenly too, and with many
        // in flight it can only approach what the weights give.
        let even_shares = *sel == Selector::RoundRobin
            || (class.size == Size::Large
                && *sel == Selector::QueueLength
                && selectors.contains(&Selector::ServiceTime));
        if *sel == cur.selector || (cap.uneven && even_shares) {
            continue;
        }
        let why = match &cap.caps {
            Some(c) if clearly_unequal(c) => format!(
                "paths differ {:.1}x in measured capacity: a load-aware selector",
                spread(c)
            ),
            _ => format!("try {} instead of {}", sel.name(), cur.selector.name()),
        };
        g.push(
            Knob::Selector,
            |s| {
                s.selector = sel.clone();
                s.weights.clear();
            },
            why,
        );
    }
}

/// Paths (or their weights) that differ this much, fastest over slowest,
/// are unequal: worth weighting, and round-robin holds them back.
const UNEVEN: f64 = 1.5;

pub(super) fn clearly_unequal(c: &[f64]) -> bool {
    spread(c) > UNEVEN
}

/// Ratio of the largest to the smallest capacity.
fn spread(c: &[f64]) -> f64 {
    let max = c.iter().cloned().fold(0.0, f64::max);
    let min = c.iter().cloned().fold(f64::INFINITY, f64::min);
    if min > 0.0 { max / min } else { 1.0 }
}

/// The max_sectors_kb values the tuner splits large requests with.
const SPLIT_KIB: [u32; 3] = [512, 256, 128];

/// The split that cuts a request of `kib` into at least `pieces`: the
/// largest of [`SPLIT_KIB`] no bigger than `kib / pieces`, or the smallest.
pub(super) fn split_kib(kib: f64, pieces: usize) -> u32 {
    let each = kib / pieces.max(1) as f64;
    SPLIT_KIB
        .into_iter()
        .find(|kb| *kb as f64 <= each)
        .unwrap_or(SPLIT_KIB[SPLIT_KIB.len() - 1])
}

/// service-time weights (1..100) proportional to capacity.
pub fn weights_from(caps: &[f64]) -> Vec<u32> {
    let max = caps.iter().cloned().fold(0.0, f64::max);
    caps.iter()
        .map(|c| {
            if max > 0.0 {
                ((c / max) * 100.0).round().clamp(1.0, 100.0) as u32
            } else {
                1
            }
        })
        .collect()
}

/// Weights worth a trial: some path's share of the traffic moves by more
/// than `SHARE_STEP`. The move is of the share of the whole, not of the
/// path's own weight: a slow path's capacity estimate moves by a large part
/// of itself with noise alone, and a trial on noise costs a short phase
/// time it cannot spare.
pub(super) fn differs_enough(a: &[u32], b: &[u32]) -> bool {
    if b.is_empty() || a.len() != b.len() {
        return true;
    }
    let (sa, sb) = (a.iter().sum::<u32>() as f64, b.iter().sum::<u32>() as f64);
    a.iter()
        .zip(b)
        .any(|(x, y)| ((*x as f64 / sa) - (*y as f64 / sb)).abs() > SHARE_STEP)
}

/// The smallest move of a path's share of the traffic (a fraction of the
/// whole) that new weights must make to be tried.
const SHARE_STEP: f64 = 0.05;
