//! The multipath target's table: what is loaded and what reads back.
//!
//! Syntax (`multipath_ctr`):
//! `<#feat> [feat..] <#hw> [hw [hw_args..]] <#pg> <init_pg>
//!  { <selector> <#sel_args> [..] <#paths> <#path_args> { <maj:min> [args..] } }`
//!
//! Facts of the read-back that callers must expect (`multipath_status`,
//! checked on 6.1 and current sources):
//! * features come back in a fixed order (`queue_if_no_path`,
//!   `pg_init_retries N`, `pg_init_delay_msecs N`,
//!   `retain_attached_hw_handler`, `queue_mode bio`); `queue_mode rq|mq`
//!   are the default and do not read back at all since 5.0;
//! * the hardware handler comes back as `1 <name>` without its arguments,
//!   and with `retain_attached_hw_handler` as the handler actually attached;
//! * `init_pg` comes back as the group currently in use (or about to be);
//! * repeat counts above 1 come back as 1 for round-robin, queue-length and
//!   service-time (since 4.6); historical-service-time prints `0` for every
//!   path and its group arguments as `2 <base_weight> <threshold>` whatever
//!   was loaded.
//!
//! So a read-back is compared as a model, with these rules in mind, never as
//! a string.

use std::fmt;
use std::str::FromStr;

use super::lex::{Cursor, canonical_u32};
use super::{DevNum, ModelError, ParseError};

/// Upper bound of service-time's `relative_throughput` (`ST_MAX_RELATIVE_THROUGHPUT`).
pub const MAX_RELATIVE_THROUGHPUT: u32 = 100;

/// The queueing model of the map (`queue_mode` feature).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QueueMode {
    Bio,
    /// Legacy request-based; an alias of `mq` since the legacy path was removed (5.0).
    Rq,
    Mq,
    /// Only 4.16..5.x kernels; later ones refuse it.
    Nvme,
}

impl QueueMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Bio => "bio",
            Self::Rq => "rq",
            Self::Mq => "mq",
            Self::Nvme => "nvme",
        }
    }

    fn from_token(s: &str) -> Option<Self> {
        Some(match s {
            "bio" => Self::Bio,
            "rq" => Self::Rq,
            "mq" => Self::Mq,
            "nvme" => Self::Nvme,
            _ => return None,
        })
    }
}

/// One multipath feature with its arguments.
///
/// The kernel matches names case-insensitively; only the lowercase spelling
/// it prints is typed here, anything else stays [`Feature::Other`] so that a
/// table renders back exactly as it was read.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Feature {
    QueueIfNoPath,
    RetainAttachedHwHandler,
    /// Kernel range 1..=50.
    PgInitRetries(u32),
    /// Kernel range 0..=60000.
    PgInitDelayMsecs(u32),
    QueueMode(QueueMode),
    /// A multipath-tools feature (handled by kpartx rules); kernels refuse it.
    NoPartitions,
    /// Anything else, verbatim: a name followed by its numeric arguments, or
    /// a known name whose argument is missing or malformed.
    Other(Vec<String>),
}

impl Feature {
    /// The feature's name as it appears in the table.
    pub fn name(&self) -> &str {
        match self {
            Self::QueueIfNoPath => "queue_if_no_path",
            Self::RetainAttachedHwHandler => "retain_attached_hw_handler",
            Self::PgInitRetries(_) => "pg_init_retries",
            Self::PgInitDelayMsecs(_) => "pg_init_delay_msecs",
            Self::QueueMode(_) => "queue_mode",
            Self::NoPartitions => "no_partitions",
            Self::Other(t) => t.first().map_or("", String::as_str),
        }
    }

    fn push_tokens(&self, out: &mut Vec<String>) {
        match self {
            Self::PgInitRetries(n) | Self::PgInitDelayMsecs(n) => {
                out.push(self.name().to_owned());
                out.push(n.to_string());
            }
            Self::QueueMode(m) => {
                out.push(self.name().to_owned());
                out.push(m.as_str().to_owned());
            }
            Self::Other(t) => out.extend(t.iter().cloned()),
            _ => out.push(self.name().to_owned()),
        }
    }

    /// Splits the `#feat` tokens into features the way `parse_features`
    /// consumes them: a valued feature takes the next token if the count
    /// covers it; an unknown name keeps the numeric tokens that follow it.
    fn group(tokens: &[String]) -> Vec<Feature> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < tokens.len() {
            let name = tokens[i].as_str();
            let value = tokens.get(i + 1).map(String::as_str);
            let valued = matches!(
                name,
                "pg_init_retries" | "pg_init_delay_msecs" | "queue_mode"
            );
            if valued && let Some(v) = value {
                let typed = match name {
                    "pg_init_retries" => canonical_u32(v).map(Feature::PgInitRetries),
                    "pg_init_delay_msecs" => canonical_u32(v).map(Feature::PgInitDelayMsecs),
                    _ => QueueMode::from_token(v).map(Feature::QueueMode),
                };
                out.push(typed.unwrap_or_else(|| Feature::Other(tokens[i..i + 2].to_vec())));
                i += 2;
                continue;
            }
            let simple = match name {
                "queue_if_no_path" => Some(Feature::QueueIfNoPath),
                "retain_attached_hw_handler" => Some(Feature::RetainAttachedHwHandler),
                "no_partitions" => Some(Feature::NoPartitions),
                _ => None,
            };
            if let Some(f) = simple {
                out.push(f);
                i += 1;
                continue;
            }
            let mut end = i + 1;
            while end < tokens.len() && canonical_u32(&tokens[end]).is_some() {
                end += 1;
            }
            out.push(Feature::Other(tokens[i..end].to_vec()));
            i = end;
        }
        out
    }
}

/// A SCSI device handler (`scsi_dh_<name>`) and the arguments passed to it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HwHandler {
    pub name: String,
    pub args: Vec<String>,
}

/// The path selector of a priority group.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Selector {
    RoundRobin,
    QueueLength,
    ServiceTime,
    HistoricalServiceTime,
    IoAffinity,
    Other(String),
}

impl Selector {
    pub fn name(&self) -> &str {
        match self {
            Self::RoundRobin => "round-robin",
            Self::QueueLength => "queue-length",
            Self::ServiceTime => "service-time",
            Self::HistoricalServiceTime => "historical-service-time",
            Self::IoAffinity => "io-affinity",
            Self::Other(n) => n,
        }
    }

    pub fn from_name(name: &str) -> Self {
        match name {
            "round-robin" => Self::RoundRobin,
            "queue-length" => Self::QueueLength,
            "service-time" => Self::ServiceTime,
            "historical-service-time" => Self::HistoricalServiceTime,
            "io-affinity" => Self::IoAffinity,
            other => Self::Other(other.to_owned()),
        }
    }

    /// Whether the selector takes a repeat count as first per-path argument.
    pub fn takes_repeat_count(&self) -> bool {
        matches!(
            self,
            Self::RoundRobin | Self::QueueLength | Self::ServiceTime | Self::HistoricalServiceTime
        )
    }

    /// The per-path arguments pathpilot writes for a new path: explicit, so a
    /// read-back shows the values, and for service-time with both fields so
    /// that a weight can be set later without changing the group's arity.
    /// `None` where no default exists (io-affinity needs a CPU mask).
    pub fn default_path_args(&self) -> Option<PathArgs> {
        match self {
            Self::RoundRobin | Self::QueueLength | Self::HistoricalServiceTime => {
                Some(PathArgs::RepeatCount(1))
            }
            Self::ServiceTime => Some(PathArgs::ServiceTime {
                repeat_count: 1,
                relative_throughput: 1,
            }),
            Self::IoAffinity => None,
            Self::Other(_) => Some(PathArgs::Empty),
        }
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// io-affinity's per-path CPU mask, as `cpumask_parse` reads it and `%*pb`
/// prints it: comma-separated groups of up to 8 hex digits, most significant
/// first. Kept as text because the kernel pads it to `nr_cpu_ids` bits on
/// read-back (`1` loads and reads back as `01` on an 8-CPU machine).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CpuMask(String);

impl CpuMask {
    pub fn new(s: &str) -> Option<Self> {
        let ok = !s.is_empty()
            && s.split(',')
                .all(|c| (1..=8).contains(&c.len()) && c.bytes().all(|b| b.is_ascii_hexdigit()));
        ok.then(|| Self(s.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The CPUs in the mask, ascending.
    pub fn cpus(&self) -> Vec<u32> {
        let mut cpus = Vec::new();
        for (chunk_no, chunk) in self.0.rsplit(',').enumerate() {
            let Ok(bits) = u32::from_str_radix(chunk, 16) else {
                continue;
            };
            for bit in 0..32 {
                if bits & (1 << bit) != 0 {
                    cpus.push(chunk_no as u32 * 32 + bit);
                }
            }
        }
        cpus
    }
}

/// A path's selector arguments, typed where the selector is known.
///
/// The typed forms hold only values that render back to the same text;
/// anything else is [`PathArgs::Raw`]. All paths of a group have the same
/// number of arguments (the table states it once per group).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PathArgs {
    /// No arguments: the selector's defaults.
    Empty,
    /// round-robin, queue-length, historical-service-time, or service-time
    /// with one argument.
    RepeatCount(u32),
    /// service-time with both arguments.
    ServiceTime {
        repeat_count: u32,
        relative_throughput: u32,
    },
    /// io-affinity.
    CpuMask(CpuMask),
    Raw(Vec<String>),
}

impl PathArgs {
    /// The arguments as the table carries them, space-separated (empty
    /// where there are none).
    pub fn text(&self) -> String {
        let mut t = vec![];
        self.push_tokens(&mut t);
        t.join(" ")
    }

    pub fn arity(&self) -> usize {
        match self {
            Self::Empty => 0,
            Self::RepeatCount(_) | Self::CpuMask(_) => 1,
            Self::ServiceTime { .. } => 2,
            Self::Raw(t) => t.len(),
        }
    }

    fn push_tokens(&self, out: &mut Vec<String>) {
        match self {
            Self::Empty => {}
            Self::RepeatCount(n) => out.push(n.to_string()),
            Self::ServiceTime {
                repeat_count,
                relative_throughput,
            } => {
                out.push(repeat_count.to_string());
                out.push(relative_throughput.to_string());
            }
            Self::CpuMask(m) => out.push(m.0.clone()),
            Self::Raw(t) => out.extend(t.iter().cloned()),
        }
    }

    fn from_tokens(selector: &Selector, tokens: Vec<String>) -> Self {
        let nums: Option<Vec<u32>> = tokens.iter().map(|t| canonical_u32(t)).collect();
        let typed = match (selector, tokens.len(), nums.as_deref()) {
            (_, 0, _) => Some(Self::Empty),
            (s, 1, Some(&[n])) if s.takes_repeat_count() => Some(Self::RepeatCount(n)),
            (Selector::ServiceTime, 2, Some(&[r, w])) => Some(Self::ServiceTime {
                repeat_count: r,
                relative_throughput: w,
            }),
            (Selector::IoAffinity, 1, _) => CpuMask::new(&tokens[0]).map(Self::CpuMask),
            _ => None,
        };
        typed.unwrap_or(Self::Raw(tokens))
    }

    /// The repeat count as the selector would take it (default 1), if these
    /// arguments carry one or leave it at its default.
    pub fn repeat_count(&self) -> Option<u32> {
        match self {
            Self::Empty => Some(1),
            Self::RepeatCount(n)
            | Self::ServiceTime {
                repeat_count: n, ..
            } => Some(*n),
            _ => None,
        }
    }

    /// service-time's weight (default 1 when not given).
    pub fn relative_throughput(&self) -> Option<u32> {
        match self {
            Self::Empty | Self::RepeatCount(_) => Some(1),
            Self::ServiceTime {
                relative_throughput,
                ..
            } => Some(*relative_throughput),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Path {
    pub dev: DevNum,
    pub args: PathArgs,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PriorityGroup {
    pub selector: Selector,
    /// Group-level selector arguments, verbatim (only historical-service-time
    /// takes any: `[<base_weight> [<threshold_multiplier>]]`).
    pub selector_args: Vec<String>,
    /// Never empty in a valid table (the kernel refuses a group without paths).
    pub paths: Vec<Path>,
}

impl PriorityGroup {
    /// The `#path_args` the table states for this group.
    pub fn path_arg_count(&self) -> usize {
        self.paths.first().map_or(0, |p| p.args.arity())
    }
}

/// A whole multipath table line: the target's sector range and its params.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MultipathTable {
    pub start: u64,
    pub length: u64,
    pub features: Vec<Feature>,
    pub hw_handler: Option<HwHandler>,
    /// 1-based; 0 only when there are no groups.
    pub initial_pg: u32,
    pub groups: Vec<PriorityGroup>,
}

impl MultipathTable {
    /// A one-group table over `paths` with `selector`, no features and no
    /// hardware handler, the way pathpilot creates maps.
    pub fn new(length: u64, paths: &[DevNum], selector: Selector) -> Result<Self, ModelError> {
        if paths.is_empty() {
            return Err(ModelError::NoPaths);
        }
        let args = selector
            .default_path_args()
            .ok_or_else(|| ModelError::NeedsPathArgs(selector.clone()))?;
        let mut seen = Vec::with_capacity(paths.len());
        for &dev in paths {
            if seen.contains(&dev) {
                return Err(ModelError::DuplicatePath(dev));
            }
            seen.push(dev);
        }
        Ok(Self {
            start: 0,
            length,
            features: Vec::new(),
            hw_handler: None,
            initial_pg: 1,
            groups: vec![PriorityGroup {
                selector,
                selector_args: Vec::new(),
                paths: paths
                    .iter()
                    .map(|&dev| Path {
                        dev,
                        args: args.clone(),
                    })
                    .collect(),
            }],
        })
    }

    /// Parses a full line as `dmsetup table` prints it:
    /// `<start> <length> multipath <params>`.
    pub fn parse_line(s: &str) -> Result<Self, ParseError> {
        let mut c = Cursor::new(s);
        let start = c.u64("the start sector")?;
        let length = c.u64("the length in sectors")?;
        let target = c.next("the target type")?;
        if target != "multipath" {
            return Err(ParseError {
                index: 2,
                token: Some(target.to_owned()),
                reason: format!("expected target type 'multipath', got '{target}'"),
            });
        }
        Self::parse_cursor(start, length, &mut c)
    }

    /// Parses the params part alone, as `DM_TABLE_STATUS` returns it next
    /// to the target's start and length.
    pub fn parse_params(start: u64, length: u64, params: &str) -> Result<Self, ParseError> {
        Self::parse_cursor(start, length, &mut Cursor::new(params))
    }

    fn parse_cursor(start: u64, length: u64, c: &mut Cursor<'_>) -> Result<Self, ParseError> {
        let nfeat = c.count("a number of feature arguments")?;
        let ftoks = c.take(nfeat, "feature arguments")?;
        let features = Feature::group(&ftoks);

        let nhw = c.count("a number of hardware handler arguments")?;
        let hw = c.take(nhw, "hardware handler arguments")?;
        let hw_handler = hw.split_first().map(|(name, args)| HwHandler {
            name: name.clone(),
            args: args.to_vec(),
        });

        let npg = c.count("a number of priority groups")?;
        let initial_pg = c.u32("the initial priority group number")?;
        let mut groups = Vec::new();
        for g in 1..=npg {
            if c.is_empty() {
                return Err(c.error(format!(
                    "the table declares {npg} path groups but ends after {}",
                    g - 1
                )));
            }
            let selector = Selector::from_name(c.next("a path selector name")?);
            let nsel = c.count(&format!(
                "the number of selector arguments of path group {g}"
            ))?;
            let selector_args = c.take(nsel, &format!("selector arguments of path group {g}"))?;
            let npaths_at = c.pos();
            let npaths = c.count(&format!("the number of paths of path group {g}"))?;
            if npaths == 0 {
                return Err(ParseError {
                    index: npaths_at,
                    token: Some("0".into()),
                    reason: format!(
                        "path group {g} declares no paths; the kernel needs at least one"
                    ),
                });
            }
            let nargs = c.count(&format!(
                "the number of per-path arguments of path group {g}"
            ))?;
            let mut paths = Vec::new();
            for p in 0..npaths {
                if c.remaining() < 1 + nargs {
                    return Err(c.error(format!(
                        "path group {g} declares {npaths} paths (with {nargs} arguments each) but the table ends after {p}"
                    )));
                }
                let dev = c.dev(&format!("path {} of path group {g}", p + 1))?;
                let toks = c.take(nargs, "path arguments")?;
                paths.push(Path {
                    dev,
                    args: PathArgs::from_tokens(&selector, toks),
                });
            }
            groups.push(PriorityGroup {
                selector,
                selector_args,
                paths,
            });
        }
        c.expect_end(&format!("the {npg} declared path groups"))?;
        Ok(Self {
            start,
            length,
            features,
            hw_handler,
            initial_pg,
            groups,
        })
    }

    fn param_tokens(&self) -> Vec<String> {
        let mut ftoks = Vec::new();
        for f in &self.features {
            f.push_tokens(&mut ftoks);
        }
        let mut out = vec![ftoks.len().to_string()];
        out.extend(ftoks);
        match &self.hw_handler {
            None => out.push("0".into()),
            Some(h) => {
                out.push((1 + h.args.len()).to_string());
                out.push(h.name.clone());
                out.extend(h.args.iter().cloned());
            }
        }
        out.push(self.groups.len().to_string());
        out.push(self.initial_pg.to_string());
        for g in &self.groups {
            out.push(g.selector.name().to_owned());
            out.push(g.selector_args.len().to_string());
            out.extend(g.selector_args.iter().cloned());
            out.push(g.paths.len().to_string());
            out.push(g.path_arg_count().to_string());
            for p in &g.paths {
                out.push(p.dev.to_string());
                p.args.push_tokens(&mut out);
            }
        }
        out
    }

    /// The params string for `DM_TABLE_LOAD` (single spaces, no trailing one).
    pub fn render_params(&self) -> String {
        self.param_tokens().join(" ")
    }

    /// The full line, as `dmsetup table` prints it (without the trailing space).
    pub fn render_line(&self) -> String {
        format!(
            "{} {} multipath {}",
            self.start,
            self.length,
            self.render_params()
        )
    }

    // ---- queries ----

    pub fn has_feature(&self, name: &str) -> bool {
        self.features.iter().any(|f| f.name() == name)
    }

    /// All paths, group by group, in table order.
    pub fn paths(&self) -> impl Iterator<Item = &Path> {
        self.groups.iter().flat_map(|g| g.paths.iter())
    }

    pub fn find_path(&self, dev: DevNum) -> Option<&Path> {
        self.paths().find(|p| p.dev == dev)
    }

    /// The 1-based number of the group holding `dev` (the number messages
    /// such as `switch_group` use).
    pub fn group_of(&self, dev: DevNum) -> Option<usize> {
        self.groups
            .iter()
            .position(|g| g.paths.iter().any(|p| p.dev == dev))
            .map(|i| i + 1)
    }

    // ---- changes ----

    /// Uses `selector` in every group, with its default per-path arguments;
    /// service-time keeps weights already set when switching between groups
    /// that carry them.
    pub fn set_selector(&mut self, selector: Selector) -> Result<(), ModelError> {
        let default = selector
            .default_path_args()
            .ok_or_else(|| ModelError::NeedsPathArgs(selector.clone()))?;
        for g in &mut self.groups {
            let keep_weights =
                g.selector == Selector::ServiceTime && selector == Selector::ServiceTime;
            g.selector = selector.clone();
            g.selector_args.clear();
            for p in &mut g.paths {
                if !keep_weights {
                    p.args = default.clone();
                }
            }
        }
        Ok(())
    }

    /// Sets service-time's `relative_throughput` of one path; the other
    /// paths of its group get explicit defaults so the group's arity stays
    /// uniform.
    pub fn set_relative_throughput(&mut self, dev: DevNum, weight: u32) -> Result<(), ModelError> {
        if weight > MAX_RELATIVE_THROUGHPUT {
            return Err(ModelError::WeightOutOfRange(weight));
        }
        let gno = self.group_of(dev).ok_or(ModelError::PathNotInMap(dev))?;
        let g = &mut self.groups[gno - 1];
        if g.selector != Selector::ServiceTime {
            return Err(ModelError::NotServiceTime {
                group: gno,
                selector: g.selector.name().to_owned(),
            });
        }
        // Check every path before changing any, so an error leaves the model as it was.
        let mut new_args = Vec::with_capacity(g.paths.len());
        for p in &g.paths {
            let (Some(rc), Some(w)) = (p.args.repeat_count(), p.args.relative_throughput()) else {
                return Err(ModelError::UninterpretableArgs(p.dev));
            };
            let w = if p.dev == dev { weight } else { w };
            new_args.push(PathArgs::ServiceTime {
                repeat_count: rc,
                relative_throughput: w,
            });
        }
        for (p, a) in g.paths.iter_mut().zip(new_args) {
            p.args = a;
        }
        Ok(())
    }

    /// Sets the repeat count of every path whose selector takes one; returns
    /// how many paths that is. Current kernels keep only 1 (see module docs).
    pub fn set_repeat_count(&mut self, n: u32) -> usize {
        let mut changed = 0;
        for g in &mut self.groups {
            if !g.selector.takes_repeat_count() {
                continue;
            }
            let uniform = g.paths.iter().all(|p| p.args.repeat_count().is_some());
            if !uniform {
                continue;
            }
            for p in &mut g.paths {
                p.args = match p.args {
                    PathArgs::ServiceTime {
                        relative_throughput,
                        ..
                    } => PathArgs::ServiceTime {
                        repeat_count: n,
                        relative_throughput,
                    },
                    _ => PathArgs::RepeatCount(n),
                };
                changed += 1;
            }
        }
        changed
    }

    /// Removes a path; a group left empty goes too, and `initial_pg` keeps
    /// pointing at the same group (or the first one if it was removed).
    pub fn remove_path(&mut self, dev: DevNum) -> Result<Path, ModelError> {
        let gno = self.group_of(dev).ok_or(ModelError::PathNotInMap(dev))?;
        if self.paths().count() == 1 {
            return Err(ModelError::LastPath(dev));
        }
        let g = &mut self.groups[gno - 1];
        let Some(pos) = g.paths.iter().position(|p| p.dev == dev) else {
            return Err(ModelError::PathNotInMap(dev));
        };
        let removed = g.paths.remove(pos);
        if g.paths.is_empty() {
            self.groups.remove(gno - 1);
            let init = self.initial_pg as usize;
            if init > gno {
                self.initial_pg -= 1;
            } else if init == gno {
                self.initial_pg = 1;
            }
        }
        Ok(removed)
    }

    /// Adds a path to group `group` (1-based), in device-number order:
    /// before the first path with a higher one. A table built from
    /// discovery lists its paths in that order, so one that joins later
    /// (a disk that answered late, a path taken back from a marginal
    /// group) lands where it would have been, and the table reads the same
    /// however its paths arrived. Its arguments must have the group's
    /// arity; [`Selector::default_path_args`] gives a fitting value.
    pub fn add_path(&mut self, group: usize, path: Path) -> Result<(), ModelError> {
        if self.find_path(path.dev).is_some() {
            return Err(ModelError::DuplicatePath(path.dev));
        }
        let g = group
            .checked_sub(1)
            .and_then(|i| self.groups.get_mut(i))
            .ok_or(ModelError::NoSuchGroup(group))?;
        let expected = g.path_arg_count();
        if !g.paths.is_empty() && path.args.arity() != expected {
            return Err(ModelError::ArgsMismatch {
                group,
                expected,
                got: path.args.arity(),
            });
        }
        let at = g
            .paths
            .iter()
            .position(|p| p.dev > path.dev)
            .unwrap_or(g.paths.len());
        g.paths.insert(at, path);
        Ok(())
    }
}

impl fmt::Display for MultipathTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render_line())
    }
}

impl FromStr for MultipathTable {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse_line(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RR4: &str = "0 2097152 multipath 0 0 1 1 round-robin 0 4 1 8:0 1 8:16 1 8:32 1 8:48 1";

    fn d(maj: u32, min: u32) -> DevNum {
        DevNum::new(maj, min)
    }

    #[test]
    fn parses_the_testbed_table() {
        let t = MultipathTable::parse_line(RR4).unwrap();
        assert_eq!(t.length, 2097152);
        assert_eq!(t.groups.len(), 1);
        assert_eq!(t.groups[0].selector, Selector::RoundRobin);
        assert_eq!(t.paths().count(), 4);
        assert!(t.paths().all(|p| p.args == PathArgs::RepeatCount(1)));
        assert_eq!(t.render_line(), RR4);
        // what the kernel hands back: a trailing space
        assert_eq!(MultipathTable::parse_line(&format!("{RR4} ")).unwrap(), t);
    }

    #[test]
    fn features_and_handler() {
        let s = "0 8 multipath 7 queue_if_no_path pg_init_retries 50 pg_init_delay_msecs 2500 queue_mode mq 2 rdac x 1 1 service-time 0 1 2 8:16 1 40";
        let t = MultipathTable::parse_line(s).unwrap();
        assert_eq!(
            t.features,
            vec![
                Feature::QueueIfNoPath,
                Feature::PgInitRetries(50),
                Feature::PgInitDelayMsecs(2500),
                Feature::QueueMode(QueueMode::Mq)
            ]
        );
        assert_eq!(
            t.hw_handler,
            Some(HwHandler {
                name: "rdac".into(),
                args: vec!["x".into()]
            })
        );
        assert!(t.has_feature("queue_if_no_path"));
        assert!(!t.has_feature("retain_attached_hw_handler"));
        assert_eq!(
            t.groups[0].paths[0].args,
            PathArgs::ServiceTime {
                repeat_count: 1,
                relative_throughput: 40
            }
        );
        assert_eq!(t.render_line(), s);
    }

    #[test]
    fn unknown_and_malformed_features_stay_verbatim() {
        for s in [
            "0 8 multipath 3 frobnicate 5 7 0 1 1 round-robin 0 1 1 8:0 1",
            "0 8 multipath 1 pg_init_retries 0 1 1 round-robin 0 1 1 8:0 1",
            "0 8 multipath 2 pg_init_retries x 0 1 1 round-robin 0 1 1 8:0 1",
            "0 8 multipath 2 queue_mode fast 0 1 1 round-robin 0 1 1 8:0 1",
            "0 8 multipath 1 QUEUE_IF_NO_PATH 0 1 1 round-robin 0 1 1 8:0 1",
        ] {
            let t = MultipathTable::parse_line(s).unwrap();
            assert!(matches!(t.features[0], Feature::Other(_)), "{s}");
            assert_eq!(t.render_line(), s);
        }
    }

    #[test]
    fn error_names_token_and_reason() {
        let e = MultipathTable::parse_params(0, 8, "x 0 1 1").unwrap_err();
        assert_eq!(e.index, 0);
        assert_eq!(e.token.as_deref(), Some("x"));
        assert_eq!(
            e.to_string(),
            "token 0 ('x'): expected a number of feature arguments (a decimal number), got 'x'"
        );

        let e = MultipathTable::parse_params(
            0,
            8,
            "0 0 2 1 round-robin 0 1 1 8:0 1 round-robin 0 3 1 8:16 1 8:32 1",
        )
        .unwrap_err();
        assert_eq!(e.token, None);
        assert!(
            e.reason.contains("path group 2 declares 3 paths")
                && e.reason.ends_with("ends after 2"),
            "{e}"
        );

        let e = MultipathTable::parse_params(0, 8, "0 0 2 1 round-robin 0 1 1 8:0 1").unwrap_err();
        assert!(
            e.reason.contains("declares 2 path groups but ends after 1"),
            "{e}"
        );

        let e = MultipathTable::parse_params(0, 8, "0 0 1 1 round-robin 0 1 1 sdb 1").unwrap_err();
        assert_eq!((e.index, e.token.as_deref()), (8, Some("sdb")));

        let e =
            MultipathTable::parse_params(0, 8, "0 0 1 1 round-robin 0 1 1 8:0 1 junk").unwrap_err();
        assert_eq!(e.token.as_deref(), Some("junk"));

        let e = MultipathTable::parse_params(0, 8, "5 queue_if_no_path 0 1 1").unwrap_err();
        assert!(e.reason.contains("5 declared"), "{e}");

        let e = MultipathTable::parse_line("0 8 linear 8:0 0").unwrap_err();
        assert_eq!(e.index, 2);
    }

    #[test]
    fn zero_groups_is_a_valid_table() {
        let s = "0 8 multipath 1 queue_if_no_path 0 0 0";
        let t = MultipathTable::parse_line(s).unwrap();
        assert!(t.groups.is_empty());
        assert_eq!(t.render_line(), s);
    }

    #[test]
    fn new_and_set_selector() {
        let devs = [d(8, 0), d(8, 16)];
        let mut t = MultipathTable::new(100, &devs, Selector::RoundRobin).unwrap();
        assert_eq!(
            t.render_line(),
            "0 100 multipath 0 0 1 1 round-robin 0 2 1 8:0 1 8:16 1"
        );
        t.set_selector(Selector::ServiceTime).unwrap();
        t.set_relative_throughput(d(8, 16), 4).unwrap();
        assert_eq!(
            t.render_params(),
            "0 0 1 1 service-time 0 2 2 8:0 1 1 8:16 1 4"
        );
        t.set_selector(Selector::ServiceTime).unwrap();
        assert_eq!(
            t.find_path(d(8, 16)).unwrap().args.relative_throughput(),
            Some(4)
        );
        assert_eq!(
            t.set_relative_throughput(d(8, 16), 101),
            Err(ModelError::WeightOutOfRange(101))
        );
        assert_eq!(
            t.set_relative_throughput(d(8, 99), 1),
            Err(ModelError::PathNotInMap(d(8, 99)))
        );
        t.set_selector(Selector::QueueLength).unwrap();
        assert!(matches!(
            t.set_relative_throughput(d(8, 0), 1),
            Err(ModelError::NotServiceTime { group: 1, .. })
        ));
        assert_eq!(
            t.set_selector(Selector::IoAffinity),
            Err(ModelError::NeedsPathArgs(Selector::IoAffinity))
        );
        assert_eq!(
            MultipathTable::new(1, &[], Selector::RoundRobin),
            Err(ModelError::NoPaths)
        );
        assert_eq!(
            MultipathTable::new(1, &[d(8, 0), d(8, 0)], Selector::RoundRobin),
            Err(ModelError::DuplicatePath(d(8, 0)))
        );
    }

    #[test]
    fn set_relative_throughput_widens_the_group() {
        let mut t =
            MultipathTable::parse_line("0 8 multipath 0 0 1 1 service-time 0 2 1 8:0 1 8:16 1")
                .unwrap();
        t.set_relative_throughput(d(8, 0), 0).unwrap();
        assert_eq!(
            t.render_params(),
            "0 0 1 1 service-time 0 2 2 8:0 1 0 8:16 1 1"
        );
    }

    #[test]
    fn repeat_count() {
        let mut t = MultipathTable::parse_line(
            "0 8 multipath 0 0 2 1 service-time 0 1 2 8:0 1 7 io-affinity 0 1 1 8:16 1",
        )
        .unwrap();
        assert_eq!(t.set_repeat_count(100), 1);
        assert_eq!(
            t.render_params(),
            "0 0 2 1 service-time 0 1 2 8:0 100 7 io-affinity 0 1 1 8:16 1"
        );
    }

    #[test]
    fn add_and_remove_paths() {
        let mut t = MultipathTable::parse_line(
            "0 8 multipath 0 0 2 2 round-robin 0 1 1 8:0 1 round-robin 0 2 1 8:16 1 8:32 1",
        )
        .unwrap();
        assert_eq!(t.group_of(d(8, 32)), Some(2));
        assert_eq!(
            t.remove_path(d(8, 99)),
            Err(ModelError::PathNotInMap(d(8, 99)))
        );
        t.remove_path(d(8, 0)).unwrap();
        assert_eq!(t.groups.len(), 1);
        assert_eq!(t.initial_pg, 1);
        t.remove_path(d(8, 16)).unwrap();
        assert_eq!(t.remove_path(d(8, 32)), Err(ModelError::LastPath(d(8, 32))));
        assert_eq!(
            t.add_path(
                1,
                Path {
                    dev: d(8, 32),
                    args: PathArgs::RepeatCount(1)
                }
            ),
            Err(ModelError::DuplicatePath(d(8, 32)))
        );
        assert_eq!(
            t.add_path(
                1,
                Path {
                    dev: d(8, 48),
                    args: PathArgs::Empty
                }
            ),
            Err(ModelError::ArgsMismatch {
                group: 1,
                expected: 1,
                got: 0
            })
        );
        assert_eq!(
            t.add_path(
                2,
                Path {
                    dev: d(8, 48),
                    args: PathArgs::RepeatCount(1)
                }
            ),
            Err(ModelError::NoSuchGroup(2))
        );
        t.add_path(
            1,
            Path {
                dev: d(8, 48),
                args: PathArgs::RepeatCount(1),
            },
        )
        .unwrap();
        assert_eq!(t.render_params(), "0 0 1 1 round-robin 0 2 1 8:32 1 8:48 1");
        // A path that joins late goes where discovery would have put it.
        t.add_path(
            1,
            Path {
                dev: d(8, 16),
                args: PathArgs::RepeatCount(1),
            },
        )
        .unwrap();
        assert_eq!(
            t.render_params(),
            "0 0 1 1 round-robin 0 3 1 8:16 1 8:32 1 8:48 1"
        );
    }

    #[test]
    fn cpumask() {
        let m = CpuMask::new("00000001,80000003").unwrap();
        assert_eq!(m.cpus(), vec![0, 1, 31, 32]);
        for bad in ["", "g", ",1", "1,", "123456789"] {
            assert!(CpuMask::new(bad).is_none(), "{bad}");
        }
    }
}
