//! The multipath target's status (`dmsetup status`, `DM_TABLE_STATUS`
//! without the table flag).
//!
//! Syntax (`multipath_status`, `STATUSTYPE_INFO`, unchanged from 4.x to
//! current): `2 <queue_io> <pg_init_count> 0 <#pg> <next_pg>
//! { A|D|E <#ps_status> [..] <#paths> <#info> { <maj:min> A|F <fail_count> [info..] } }`.
//!
//! The string does not name the groups' selectors, so per-path selector
//! info is kept as text and typed on request with the table's selector
//! ([`PathStatus::selector_info`]). What the selectors print per path:
//! round-robin nothing; queue-length the in-flight I/O count; service-time
//! in-flight bytes and the relative throughput; historical-service-time the
//! service-time estimate (fixed point, 10 fractional bits), outstanding
//! requests and the stale-after time (ns); io-affinity the selector-wide
//! count of CPU map misses. Group level: historical-service-time prints
//! `2 <base_weight> <threshold_multiplier>`, all others `0`.

use std::fmt;
use std::str::FromStr;

use super::lex::{Cursor, canonical_i64, canonical_u32, canonical_u64};
use super::table::Selector;
use super::{DevNum, ParseError};

/// A priority group's state in the status line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GroupState {
    /// `A`: the group in use.
    Active,
    /// `D`: bypassed (`disable_group`, or a handler reported it busy).
    Disabled,
    /// `E`: usable, not in use.
    Enabled,
}

impl GroupState {
    pub fn as_char(self) -> char {
        match self {
            Self::Active => 'A',
            Self::Disabled => 'D',
            Self::Enabled => 'E',
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PathState {
    /// `A`: usable.
    Active,
    /// `F`: failed, until `reinstate_path`.
    Failed,
}

impl PathState {
    pub fn as_char(self) -> char {
        match self {
            Self::Active => 'A',
            Self::Failed => 'F',
        }
    }
}

/// A path's selector info typed by its selector.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PathInfo {
    /// round-robin prints nothing.
    Empty,
    QueueLength {
        in_flight: i64,
    },
    ServiceTime {
        in_flight_bytes: i64,
        relative_throughput: u32,
    },
    HistoricalServiceTime {
        /// Fixed point with 10 fractional bits, nanoseconds.
        service_time: u64,
        outstanding: u64,
        stale_after_ns: u64,
    },
    IoAffinity {
        /// Selector-wide, repeated on every path of the group.
        map_misses: i64,
    },
    /// Not what the named selector prints.
    Raw(Vec<String>),
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PathStatus {
    pub dev: DevNum,
    pub state: PathState,
    /// Cumulative failures since the table was loaded.
    pub fail_count: u32,
    /// The selector's info, verbatim.
    pub info: Vec<String>,
}

impl PathStatus {
    pub fn selector_info(&self, selector: &Selector) -> PathInfo {
        let t: Vec<&str> = self.info.iter().map(String::as_str).collect();
        let typed = match (selector, t.as_slice()) {
            (Selector::RoundRobin, []) => Some(PathInfo::Empty),
            (Selector::QueueLength, [n]) => {
                canonical_i64(n).map(|in_flight| PathInfo::QueueLength { in_flight })
            }
            (Selector::ServiceTime, [b, w]) => canonical_i64(b).zip(canonical_u32(w)).map(
                |(in_flight_bytes, relative_throughput)| PathInfo::ServiceTime {
                    in_flight_bytes,
                    relative_throughput,
                },
            ),
            (Selector::HistoricalServiceTime, [h, o, s]) => {
                match (canonical_u64(h), canonical_u64(o), canonical_u64(s)) {
                    (Some(service_time), Some(outstanding), Some(stale_after_ns)) => {
                        Some(PathInfo::HistoricalServiceTime {
                            service_time,
                            outstanding,
                            stale_after_ns,
                        })
                    }
                    _ => None,
                }
            }
            (Selector::IoAffinity, [n]) => {
                canonical_i64(n).map(|map_misses| PathInfo::IoAffinity { map_misses })
            }
            (_, []) => Some(PathInfo::Empty),
            _ => None,
        };
        typed.unwrap_or_else(|| PathInfo::Raw(self.info.clone()))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GroupStatus {
    pub state: GroupState,
    /// The selector's group status, verbatim.
    pub selector_args: Vec<String>,
    /// Never empty (the kernel refuses groups without paths).
    pub paths: Vec<PathStatus>,
}

impl GroupStatus {
    pub fn info_count(&self) -> usize {
        self.paths.first().map_or(0, |p| p.info.len())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MultipathStatus {
    pub start: u64,
    pub length: u64,
    /// Positional: `queue_io`, `pg_init_count` (see the accessors), verbatim.
    pub features: Vec<String>,
    /// Hardware handler status; the kernel prints none (`0`).
    pub hw_handler: Vec<String>,
    /// The group in use or about to be (1-based; 0 without groups).
    pub next_pg: u32,
    pub groups: Vec<GroupStatus>,
}

impl MultipathStatus {
    /// Parses `<start> <length> multipath <status>` as `dmsetup status` prints it.
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

    /// Parses the status string alone.
    pub fn parse_params(start: u64, length: u64, params: &str) -> Result<Self, ParseError> {
        Self::parse_cursor(start, length, &mut Cursor::new(params))
    }

    fn parse_cursor(start: u64, length: u64, c: &mut Cursor<'_>) -> Result<Self, ParseError> {
        let nfeat = c.count("a number of feature fields")?;
        let features = c.take(nfeat, "feature fields")?;
        let nhw = c.count("a number of hardware handler status fields")?;
        let hw_handler = c.take(nhw, "hardware handler status fields")?;
        let npg = c.count("a number of priority groups")?;
        let next_pg = c.u32("the next priority group number")?;
        let mut groups = Vec::new();
        for g in 1..=npg {
            if c.is_empty() {
                return Err(c.error(format!(
                    "the status declares {npg} path groups but ends after {}",
                    g - 1
                )));
            }
            let state = match c.next("a group state")? {
                "A" => GroupState::Active,
                "D" => GroupState::Disabled,
                "E" => GroupState::Enabled,
                other => {
                    return Err(ParseError {
                        index: c.pos() - 1,
                        token: Some(other.to_owned()),
                        reason: format!(
                            "expected the state of path group {g} (A, D or E), got '{other}'"
                        ),
                    });
                }
            };
            let nsel = c.count(&format!(
                "the number of selector status fields of path group {g}"
            ))?;
            let selector_args =
                c.take(nsel, &format!("selector status fields of path group {g}"))?;
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
            let ninfo = c.count(&format!(
                "the number of per-path info fields of path group {g}"
            ))?;
            let mut paths = Vec::new();
            for p in 0..npaths {
                if c.remaining() < 3 + ninfo {
                    return Err(c.error(format!(
                        "path group {g} declares {npaths} paths (with {ninfo} info fields each) but the status ends after {p}"
                    )));
                }
                let dev = c.dev(&format!("path {} of path group {g}", p + 1))?;
                let state = match c.next("a path state")? {
                    "A" => PathState::Active,
                    "F" => PathState::Failed,
                    other => {
                        return Err(ParseError {
                            index: c.pos() - 1,
                            token: Some(other.to_owned()),
                            reason: format!(
                                "expected the state of path {dev} (A or F), got '{other}'"
                            ),
                        });
                    }
                };
                let fail_count = c.u32(&format!("the fail count of path {dev}"))?;
                let info = c.take(ninfo, "path info fields")?;
                paths.push(PathStatus {
                    dev,
                    state,
                    fail_count,
                    info,
                });
            }
            groups.push(GroupStatus {
                state,
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
            next_pg,
            groups,
        })
    }

    fn param_tokens(&self) -> Vec<String> {
        let mut out = vec![self.features.len().to_string()];
        out.extend(self.features.iter().cloned());
        out.push(self.hw_handler.len().to_string());
        out.extend(self.hw_handler.iter().cloned());
        out.push(self.groups.len().to_string());
        out.push(self.next_pg.to_string());
        for g in &self.groups {
            out.push(g.state.as_char().to_string());
            out.push(g.selector_args.len().to_string());
            out.extend(g.selector_args.iter().cloned());
            out.push(g.paths.len().to_string());
            out.push(g.info_count().to_string());
            for p in &g.paths {
                out.push(p.dev.to_string());
                out.push(p.state.as_char().to_string());
                out.push(p.fail_count.to_string());
                out.extend(p.info.iter().cloned());
            }
        }
        out
    }

    pub fn render_params(&self) -> String {
        self.param_tokens().join(" ")
    }

    pub fn render_line(&self) -> String {
        format!(
            "{} {} multipath {}",
            self.start,
            self.length,
            self.render_params()
        )
    }

    /// Whether I/O is being held back (pg_init pending or running).
    pub fn queue_io(&self) -> Option<bool> {
        match self.features.first().map(String::as_str) {
            Some("0") => Some(false),
            Some("1") => Some(true),
            _ => None,
        }
    }

    /// How often the current group was initialised by the hardware handler.
    pub fn pg_init_count(&self) -> Option<u32> {
        self.features.get(1).and_then(|s| canonical_u32(s))
    }

    /// The 1-based number of the group marked `A`.
    pub fn active_group(&self) -> Option<usize> {
        self.groups
            .iter()
            .position(|g| g.state == GroupState::Active)
            .map(|i| i + 1)
    }

    pub fn paths(&self) -> impl Iterator<Item = &PathStatus> {
        self.groups.iter().flat_map(|g| g.paths.iter())
    }

    pub fn path(&self, dev: DevNum) -> Option<&PathStatus> {
        self.paths().find(|p| p.dev == dev)
    }
}

impl fmt::Display for MultipathStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render_line())
    }
}

impl FromStr for MultipathStatus {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse_line(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_round_robin_status_with_failed_path() {
        let s = "0 2097152 multipath 2 0 0 0 1 1 A 0 2 0 8:16 F 1 8:32 A 0";
        let st = MultipathStatus::parse_line(s).unwrap();
        assert_eq!(st.queue_io(), Some(false));
        assert_eq!(st.pg_init_count(), Some(0));
        assert_eq!(st.active_group(), Some(1));
        let p = st.path(DevNum::new(8, 16)).unwrap();
        assert_eq!((p.state, p.fail_count), (PathState::Failed, 1));
        assert_eq!(p.selector_info(&Selector::RoundRobin), PathInfo::Empty);
        assert_eq!(st.render_line(), s);
        assert_eq!(MultipathStatus::parse_line(&format!("{s} ")).unwrap(), st);
    }

    #[test]
    fn typed_selector_info() {
        let s = "0 8 multipath 2 0 0 0 3 1 A 0 1 2 8:0 A 0 4096 1 E 2 972 0 1 3 8:16 A 0 1024 0 0 D 0 1 1 8:32 A 0 -1";
        let st = MultipathStatus::parse_line(s).unwrap();
        assert_eq!(
            st.groups[0].paths[0].selector_info(&Selector::ServiceTime),
            PathInfo::ServiceTime {
                in_flight_bytes: 4096,
                relative_throughput: 1
            }
        );
        assert_eq!(
            st.groups[1].paths[0].selector_info(&Selector::HistoricalServiceTime),
            PathInfo::HistoricalServiceTime {
                service_time: 1024,
                outstanding: 0,
                stale_after_ns: 0
            }
        );
        assert_eq!(
            st.groups[2].paths[0].selector_info(&Selector::QueueLength),
            PathInfo::QueueLength { in_flight: -1 }
        );
        assert_eq!(
            st.groups[2].paths[0].selector_info(&Selector::RoundRobin),
            PathInfo::Raw(vec!["-1".into()])
        );
        assert_eq!(st.groups[2].state, GroupState::Disabled);
        assert_eq!(st.render_line(), s);
    }

    #[test]
    fn errors() {
        let e = MultipathStatus::parse_params(0, 8, "2 0 0 0 1 1 X 0 1 0 8:0 A 0").unwrap_err();
        assert_eq!((e.index, e.token.as_deref()), (6, Some("X")));
        let e = MultipathStatus::parse_params(0, 8, "2 0 0 0 1 1 A 0 1 0 8:0 B 0").unwrap_err();
        assert_eq!((e.index, e.token.as_deref()), (11, Some("B")));
        let e = MultipathStatus::parse_params(0, 8, "2 0 0 0 1 1 A 0 2 0 8:0 A 0").unwrap_err();
        assert!(
            e.reason.contains("declares 2 paths") && e.reason.ends_with("after 1"),
            "{e}"
        );
    }
}
