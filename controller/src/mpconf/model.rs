//! multipath.conf as typed values: the sections and the settings that
//! shape a map (dict.c's keywords, with their values checked), each
//! remembering the file and line it came from. Keys that shape nothing
//! pathpilot builds are left in the [`Document`] and ignored here.
use std::fmt;

use regex_lite::Regex;

use super::syntax::{Document, Entry, Item, Section, SyntaxError};
use crate::{
    discovery::filter::Pattern,
    mpath::{Feature, HwHandler, MultipathTable, Selector, grouping::Grouping},
};

/// Where a value was written: a file and a line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Src {
    pub file: String,
    pub line: usize,
}

impl fmt::Display for Src {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} line {}", self.file, self.line)
    }
}

/// A value and where it was written.
#[derive(Clone, Debug, PartialEq)]
pub struct At<T> {
    pub value: T,
    pub at: Src,
}

/// `no_path_retry`: what a map does with I/O while no path is usable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoPathRetry {
    /// Fail it at once (`fail`, `0`).
    Fail,
    /// Queue it until a path returns (`queue`).
    Queue,
    /// Queue it for this many checker intervals, then fail it.
    Checks(u32),
}

impl fmt::Display for NoPathRetry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NoPathRetry::Fail => f.write_str("fail"),
            NoPathRetry::Queue => f.write_str("queue"),
            NoPathRetry::Checks(n) => write!(f, "{n}"),
        }
    }
}

/// `failback`: when the map goes back to its best path group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failback {
    Manual,
    Immediate,
    Followover,
    /// After this many seconds.
    Secs(u32),
}

impl fmt::Display for Failback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failback::Manual => f.write_str("manual"),
            Failback::Immediate => f.write_str("immediate"),
            Failback::Followover => f.write_str("followover"),
            Failback::Secs(n) => write!(f, "{n}"),
        }
    }
}

/// `rr_weight`: whether a path's repeat count is multiplied by its
/// priority.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RrWeight {
    Uniform,
    Priorities,
}

/// `find_multipaths`: which WWIDs multipath-tools makes a map for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FindMultipaths {
    /// `no`, `off`: every device not blacklisted.
    Off,
    /// `yes`, `on`: two paths with one WWID, or a WWID known before.
    On,
    /// Only WWIDs known before (the wwids file, the multipaths section).
    Strict,
    /// Every device, and a single path is a map at once.
    Greedy,
    /// As `on`, and a single path waits a while for a second one.
    Smart,
}

impl fmt::Display for FindMultipaths {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FindMultipaths::Off => "off",
            FindMultipaths::On => "on",
            FindMultipaths::Strict => "strict",
            FindMultipaths::Greedy => "greedy",
            FindMultipaths::Smart => "smart",
        })
    }
}

/// `path_selector`: the selector and its group arguments, as the table
/// takes them (`service-time 0`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SelectorSpec {
    pub selector: Selector,
    pub args: Vec<String>,
}

impl fmt::Display for SelectorSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.selector, self.args.len())?;
        for a in &self.args {
            write!(f, " {a}")?;
        }
        Ok(())
    }
}

/// `prio` and `prio_args` together: a prioritizer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prio {
    pub name: String,
    pub args: String,
}

/// The settings that may appear in `defaults`, `overrides`, a `device` and
/// a `multipath` entry (not every key is allowed everywhere; each section
/// reads what multipath-tools reads there).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Attrs {
    pub path_grouping_policy: Option<At<Grouping>>,
    pub path_selector: Option<At<SelectorSpec>>,
    /// The features list, `queue_if_no_path` and
    /// `retain_attached_hw_handler` included as written.
    pub features: Option<At<Vec<Feature>>>,
    /// `None` inside: `0`, no handler.
    pub hardware_handler: Option<At<Option<HwHandler>>>,
    pub prio: Option<At<String>>,
    pub prio_args: Option<At<String>>,
    pub path_checker: Option<At<String>>,
    pub no_path_retry: Option<At<NoPathRetry>>,
    pub failback: Option<At<Failback>>,
    pub rr_weight: Option<At<RrWeight>>,
    pub rr_min_io_rq: Option<At<u32>>,
    pub detect_prio: Option<At<bool>>,
    pub detect_checker: Option<At<bool>>,
    pub retain_attached_hw_handler: Option<At<bool>>,
    pub user_friendly_names: Option<At<bool>>,
    pub alias_prefix: Option<At<String>>,
    pub uid_attribute: Option<At<String>>,
}

/// The `defaults` section.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Defaults {
    pub attrs: Attrs,
    pub find_multipaths: Option<At<FindMultipaths>>,
    /// Seconds between two checks of a path (`no_path_retry` counts these).
    pub polling_interval: Option<At<u32>>,
    pub bindings_file: Option<At<String>>,
    pub wwids_file: Option<At<String>>,
}

/// A hwtable regex (`vendor`, `product`, `revision`): matched anywhere,
/// as `regexec` does, with no `!` inversion.
#[derive(Clone, Debug)]
pub struct HwRegex {
    pub text: String,
    re: Regex,
}

impl HwRegex {
    pub fn new(text: &str) -> Result<Self, String> {
        Regex::new(text)
            .map(|re| HwRegex {
                text: text.to_string(),
                re,
            })
            .map_err(|e| format!("bad regex '{text}': {e}"))
    }

    pub fn matches(&self, s: &str) -> bool {
        self.re.is_match(s)
    }
}

impl PartialEq for HwRegex {
    fn eq(&self, o: &Self) -> bool {
        self.text == o.text
    }
}

/// A `devices { device { ... } }` entry.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceEntry {
    pub vendor: Option<HwRegex>,
    pub product: Option<HwRegex>,
    pub revision: Option<HwRegex>,
    /// Products of this vendor that are blacklisted (an array's management
    /// LUN).
    pub product_blacklist: Option<At<String>>,
    pub attrs: Attrs,
    pub at: Src,
}

impl DeviceEntry {
    /// `VENDOR/PRODUCT` as written.
    pub fn name(&self) -> String {
        let t = |r: &Option<HwRegex>| r.as_ref().map_or("", |r| r.text.as_str()).to_string();
        let mut s = format!("{}/{}", t(&self.vendor), t(&self.product));
        if let Some(r) = &self.revision {
            s.push_str(&format!("/{}", r.text));
        }
        s
    }

    /// Whether this entry is for the device (`hwe_regmatch`): each regex
    /// given matches its field anywhere.
    pub fn matches(&self, vendor: &str, product: &str, revision: &str) -> bool {
        let ok = |r: &Option<HwRegex>, s: &str| r.as_ref().is_none_or(|r| r.matches(s));
        ok(&self.vendor, vendor) && ok(&self.product, product) && ok(&self.revision, revision)
    }

    /// Whether `o` is written with the same strings (multipath-tools then
    /// merges the two: `hwe_strmatch`).
    pub fn same_strings(&self, o: &DeviceEntry) -> bool {
        self.vendor == o.vendor && self.product == o.product && self.revision == o.revision
    }
}

/// A `multipaths { multipath { ... } }` entry.
#[derive(Clone, Debug, PartialEq)]
pub struct MultipathEntry {
    pub wwid: String,
    pub alias: Option<At<String>>,
    pub attrs: Attrs,
    pub at: Src,
}

/// A `device` entry of a blacklist.
#[derive(Clone, Debug)]
pub struct DeviceRule {
    pub vendor: Option<Pattern>,
    pub product: Option<Pattern>,
    pub at: Src,
}

/// `blacklist` or `blacklist_exceptions`.
#[derive(Clone, Debug, Default)]
pub struct Blacklist {
    pub devnode: Vec<At<Pattern>>,
    pub wwid: Vec<At<Pattern>>,
    pub property: Vec<At<Pattern>>,
    pub protocol: Vec<At<Pattern>>,
    pub device: Vec<DeviceRule>,
}

impl Blacklist {
    pub fn is_empty(&self) -> bool {
        self.devnode.is_empty()
            && self.wwid.is_empty()
            && self.property.is_empty()
            && self.protocol.is_empty()
            && self.device.is_empty()
    }
}

/// A whole configuration, typed.
#[derive(Clone, Debug, Default)]
pub struct Conf {
    pub defaults: Defaults,
    pub blacklist: Blacklist,
    pub exceptions: Blacklist,
    /// In order: a later entry is searched first (multipath-tools appends
    /// the admin's entries after its built-in ones).
    pub devices: Vec<DeviceEntry>,
    pub overrides: Attrs,
    pub multipaths: Vec<MultipathEntry>,
}

fn err(line: usize, msg: String) -> SyntaxError {
    SyntaxError { line, msg }
}

fn yes_no(e: &Entry) -> Result<bool, String> {
    match e.value.text.as_str() {
        "yes" | "1" => Ok(true),
        "no" | "0" => Ok(false),
        v => Err(format!("'{v}' is not yes or no")),
    }
}

fn number(e: &Entry) -> Result<u32, String> {
    e.value
        .text
        .parse()
        .map_err(|_| format!("'{}' is not a number", e.value.text))
}

/// A count-prefixed word list (`2 pg_init_retries 50`, `1 alua`): the
/// words after the count; the count must be right.
fn counted(text: &str) -> Result<Vec<String>, String> {
    let mut w = text.split_whitespace();
    let n: usize = w
        .next()
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| format!("'{text}' does not start with a count of its words"))?;
    let rest: Vec<String> = w.map(str::to_string).collect();
    if rest.len() != n {
        return Err(format!(
            "'{text}' counts {n} word{}, but {} follow",
            if n == 1 { "" } else { "s" },
            rest.len()
        ));
    }
    Ok(rest)
}

/// A features value as a table's feature list.
pub fn parse_features(text: &str) -> Result<Vec<Feature>, String> {
    let words = counted(text)?;
    // The table model reads a feature list; a table with no groups holds it.
    let t =
        MultipathTable::parse_params(0, 1, &format!("{} {} 0 0 0", words.len(), words.join(" ")))
            .map_err(|e| format!("'{text}': {e}"))?;
    Ok(t.features)
}

fn parse_hwhandler(text: &str) -> Result<Option<HwHandler>, String> {
    let words = counted(text)?;
    Ok(words.split_first().map(|(name, args)| HwHandler {
        name: name.clone(),
        args: args.to_vec(),
    }))
}

fn parse_selector(text: &str) -> Result<SelectorSpec, String> {
    let mut w = text.split_whitespace();
    let name = w.next().ok_or("an empty path_selector")?;
    let args = counted(&w.collect::<Vec<_>>().join(" ")).map_err(|e| {
        format!("'{text}': the selector's name, then its arguments counted ('service-time 0'): {e}")
    })?;
    Ok(SelectorSpec {
        selector: Selector::from_name(name),
        args,
    })
}

/// Reads one key of `attrs` from `e`; `Ok(false)` if the key is not one of
/// them.
fn attr(attrs: &mut Attrs, e: &Entry, src: &Src) -> Result<bool, String> {
    let v = &e.value.text;
    fn at<T>(value: T, src: &Src) -> Option<At<T>> {
        Some(At {
            value,
            at: src.clone(),
        })
    }
    match e.key.as_str() {
        "path_grouping_policy" => attrs.path_grouping_policy = at(v.parse()?, src),
        "path_selector" => attrs.path_selector = at(parse_selector(v)?, src),
        "features" => attrs.features = at(parse_features(v)?, src),
        "hardware_handler" => attrs.hardware_handler = at(parse_hwhandler(v)?, src),
        "prio" => attrs.prio = at(v.clone(), src),
        "prio_args" => attrs.prio_args = at(v.clone(), src),
        "path_checker" => attrs.path_checker = at(v.clone(), src),
        "no_path_retry" => {
            let n = match v.as_str() {
                "fail" | "0" => NoPathRetry::Fail,
                "queue" => NoPathRetry::Queue,
                _ => NoPathRetry::Checks(
                    number(e).map_err(|_| format!("'{v}' is not fail, queue or a number"))?,
                ),
            };
            attrs.no_path_retry = at(n, src);
        }
        "failback" => {
            let f = match v.as_str() {
                "manual" => Failback::Manual,
                "immediate" => Failback::Immediate,
                "followover" => Failback::Followover,
                _ => Failback::Secs(number(e).map_err(|_| {
                    format!("'{v}' is not manual, immediate, followover or a number")
                })?),
            };
            attrs.failback = at(f, src);
        }
        "rr_weight" => {
            let w = match v.as_str() {
                "uniform" => RrWeight::Uniform,
                "priorities" => RrWeight::Priorities,
                _ => return Err(format!("'{v}' is not uniform or priorities")),
            };
            attrs.rr_weight = at(w, src);
        }
        "rr_min_io_rq" => attrs.rr_min_io_rq = at(number(e)?, src),
        "detect_prio" => attrs.detect_prio = at(yes_no(e)?, src),
        "detect_checker" => attrs.detect_checker = at(yes_no(e)?, src),
        "retain_attached_hw_handler" => attrs.retain_attached_hw_handler = at(yes_no(e)?, src),
        "user_friendly_names" => attrs.user_friendly_names = at(yes_no(e)?, src),
        "alias_prefix" => attrs.alias_prefix = at(v.clone(), src),
        "uid_attribute" => attrs.uid_attribute = at(v.clone(), src),
        _ => return Ok(false),
    }
    Ok(true)
}

/// Which subsections a section may hold: anything else would be misread.
fn check_nesting(parent: &str, items: &[Item]) -> Result<(), SyntaxError> {
    let allowed: &[&str] = match parent {
        "" => &[
            "defaults",
            "blacklist",
            "blacklist_exceptions",
            "devices",
            "overrides",
            "multipaths",
        ],
        "blacklist" | "blacklist_exceptions" | "devices" => &["device"],
        "multipaths" => &["multipath"],
        "overrides" => &["protocol"],
        _ => &[],
    };
    for i in items {
        match i {
            Item::Section(s) if !allowed.contains(&s.name.as_str()) => {
                return Err(err(
                    s.line,
                    if parent.is_empty() {
                        format!(
                            "unknown section '{}' (defaults, blacklist, blacklist_exceptions, devices, overrides, multipaths)",
                            s.name
                        )
                    } else {
                        format!("'{}' is not a section of '{parent}'", s.name)
                    },
                ));
            }
            Item::Section(s) => check_nesting(&s.name, &s.items)?,
            Item::Entry(e) if parent.is_empty() => {
                return Err(err(e.line, format!("'{}' outside any section", e.key)));
            }
            Item::Entry(_) => {}
        }
    }
    Ok(())
}

impl Conf {
    /// The typed configuration of one file (`file` names it in errors and
    /// origins).
    pub fn from_document(doc: &Document, file: &str) -> Result<Conf, SyntaxError> {
        check_nesting("", &doc.items)?;
        let mut c = Conf::default();
        let src = |line| Src {
            file: file.to_string(),
            line,
        };
        let bad = |e: &Entry, why: String| err(e.line, format!("{} {}: {why}", e.key, e.value));
        for s in doc.sections("defaults") {
            for e in s.entries() {
                let at = src(e.line);
                if attr(&mut c.defaults.attrs, e, &at).map_err(|w| bad(e, w))? {
                    continue;
                }
                let d = &mut c.defaults;
                match e.key.as_str() {
                    "find_multipaths" => {
                        let f = match e.value.text.as_str() {
                            "off" | "no" | "0" => FindMultipaths::Off,
                            "on" | "yes" | "1" => FindMultipaths::On,
                            "strict" => FindMultipaths::Strict,
                            "greedy" => FindMultipaths::Greedy,
                            "smart" => FindMultipaths::Smart,
                            _ => {
                                return Err(bad(e, "not off, on, strict, greedy or smart".into()));
                            }
                        };
                        d.find_multipaths = Some(At { value: f, at });
                    }
                    "polling_interval" => {
                        let n = number(e).map_err(|w| bad(e, w))?;
                        d.polling_interval = Some(At { value: n, at });
                    }
                    "bindings_file" => {
                        d.bindings_file = Some(At {
                            value: e.value.text.clone(),
                            at,
                        })
                    }
                    "wwids_file" => {
                        d.wwids_file = Some(At {
                            value: e.value.text.clone(),
                            at,
                        })
                    }
                    _ => {}
                }
            }
        }
        for (name, list) in [
            ("blacklist", &mut c.blacklist),
            ("blacklist_exceptions", &mut c.exceptions),
        ] {
            for s in doc.sections(name) {
                read_blacklist(s, list, &src)?;
            }
        }
        for s in doc.sections("devices") {
            for d in s.sections("device") {
                let mut dev = DeviceEntry {
                    vendor: None,
                    product: None,
                    revision: None,
                    product_blacklist: None,
                    attrs: Attrs::default(),
                    at: src(d.line),
                };
                for e in d.entries() {
                    let at = src(e.line);
                    if attr(&mut dev.attrs, e, &at).map_err(|w| bad(e, w))? {
                        continue;
                    }
                    let re = || HwRegex::new(&e.value.text).map_err(|w| bad(e, w));
                    match e.key.as_str() {
                        "vendor" => dev.vendor = Some(re()?),
                        "product" => dev.product = Some(re()?),
                        "revision" => dev.revision = Some(re()?),
                        "product_blacklist" => {
                            re()?;
                            dev.product_blacklist = Some(At {
                                value: e.value.text.clone(),
                                at,
                            });
                        }
                        _ => {}
                    }
                }
                if dev.vendor.is_none() || dev.product.is_none() {
                    return Err(err(
                        d.line,
                        "a device entry needs a vendor and a product".into(),
                    ));
                }
                // An entry written twice with the same strings is one
                // entry: the later one's keys win (`factorize_hwtable`).
                if let Some(i) = c.devices.iter().position(|o| o.same_strings(&dev)) {
                    let old = c.devices.remove(i);
                    dev.attrs = merge(dev.attrs, old.attrs);
                    dev.product_blacklist = dev.product_blacklist.or(old.product_blacklist);
                }
                c.devices.push(dev);
            }
        }
        for s in doc.sections("overrides") {
            for e in s.entries() {
                attr(&mut c.overrides, e, &src(e.line)).map_err(|w| bad(e, w))?;
            }
        }
        for s in doc.sections("multipaths") {
            for m in s.sections("multipath") {
                let mut wwid = None;
                let mut alias = None;
                let mut attrs = Attrs::default();
                for e in m.entries() {
                    let at = src(e.line);
                    if attr(&mut attrs, e, &at).map_err(|w| bad(e, w))? {
                        continue;
                    }
                    match e.key.as_str() {
                        "wwid" => wwid = Some(e.value.text.clone()),
                        "alias" => {
                            alias = Some(At {
                                value: e.value.text.clone(),
                                at,
                            })
                        }
                        _ => {}
                    }
                }
                let Some(wwid) = wwid else {
                    return Err(err(m.line, "a multipath entry needs a wwid".into()));
                };
                let entry = MultipathEntry {
                    wwid,
                    alias,
                    attrs,
                    at: src(m.line),
                };
                match c.multipaths.iter_mut().find(|o| o.wwid == entry.wwid) {
                    Some(o) => {
                        o.alias = entry.alias.or(o.alias.take());
                        o.attrs = merge(entry.attrs, std::mem::take(&mut o.attrs));
                    }
                    None => c.multipaths.push(entry),
                }
            }
        }
        Ok(c)
    }

    /// Several files read in order (multipath.conf, then conf.d's files
    /// in name order), as multipath-tools reads them: a later file's
    /// defaults and overrides win key by key, blacklists add up, a device
    /// entry with the same strings merges into the later one, a multipath
    /// entry with the same WWID too.
    pub fn merge_files(files: Vec<Conf>) -> Conf {
        let mut c = Conf::default();
        for f in files {
            c.defaults = Defaults {
                attrs: merge(f.defaults.attrs, c.defaults.attrs),
                find_multipaths: f.defaults.find_multipaths.or(c.defaults.find_multipaths),
                polling_interval: f.defaults.polling_interval.or(c.defaults.polling_interval),
                bindings_file: f.defaults.bindings_file.or(c.defaults.bindings_file),
                wwids_file: f.defaults.wwids_file.or(c.defaults.wwids_file),
            };
            for (to, from) in [
                (&mut c.blacklist, f.blacklist),
                (&mut c.exceptions, f.exceptions),
            ] {
                to.devnode.extend(from.devnode);
                to.wwid.extend(from.wwid);
                to.property.extend(from.property);
                to.protocol.extend(from.protocol);
                to.device.extend(from.device);
            }
            for mut d in f.devices {
                if let Some(i) = c.devices.iter().position(|o| o.same_strings(&d)) {
                    let old = c.devices.remove(i);
                    d.attrs = merge(d.attrs, old.attrs);
                    d.product_blacklist = d.product_blacklist.or(old.product_blacklist);
                }
                c.devices.push(d);
            }
            c.overrides = merge(f.overrides, c.overrides);
            for m in f.multipaths {
                match c.multipaths.iter_mut().find(|o| o.wwid == m.wwid) {
                    Some(o) => {
                        o.alias = m.alias.or(o.alias.take());
                        o.attrs = merge(m.attrs, std::mem::take(&mut o.attrs));
                    }
                    None => c.multipaths.push(m),
                }
            }
        }
        c
    }

    /// The entry for a WWID in the multipaths section.
    pub fn multipath(&self, wwid: &str) -> Option<&MultipathEntry> {
        self.multipaths.iter().find(|m| m.wwid == wwid)
    }

    /// The device entries for a device, the most recent first
    /// (`find_hwe`): each setting is taken from the first that has it.
    pub fn devices_for(&self, vendor: &str, product: &str, revision: &str) -> Vec<&DeviceEntry> {
        self.devices
            .iter()
            .rev()
            .filter(|d| d.matches(vendor, product, revision))
            .collect()
    }
}

/// `new`'s keys, and `old`'s where `new` has none.
fn merge(new: Attrs, old: Attrs) -> Attrs {
    Attrs {
        path_grouping_policy: new.path_grouping_policy.or(old.path_grouping_policy),
        path_selector: new.path_selector.or(old.path_selector),
        features: new.features.or(old.features),
        hardware_handler: new.hardware_handler.or(old.hardware_handler),
        prio: new.prio.or(old.prio),
        prio_args: new.prio_args.or(old.prio_args),
        path_checker: new.path_checker.or(old.path_checker),
        no_path_retry: new.no_path_retry.or(old.no_path_retry),
        failback: new.failback.or(old.failback),
        rr_weight: new.rr_weight.or(old.rr_weight),
        rr_min_io_rq: new.rr_min_io_rq.or(old.rr_min_io_rq),
        detect_prio: new.detect_prio.or(old.detect_prio),
        detect_checker: new.detect_checker.or(old.detect_checker),
        retain_attached_hw_handler: new
            .retain_attached_hw_handler
            .or(old.retain_attached_hw_handler),
        user_friendly_names: new.user_friendly_names.or(old.user_friendly_names),
        alias_prefix: new.alias_prefix.or(old.alias_prefix),
        uid_attribute: new.uid_attribute.or(old.uid_attribute),
    }
}

fn read_blacklist(
    s: &Section,
    list: &mut Blacklist,
    src: &dyn Fn(usize) -> Src,
) -> Result<(), SyntaxError> {
    let pat = |e: &Entry| {
        Pattern::new(&e.value.text)
            .map(|p| At {
                value: p,
                at: src(e.line),
            })
            .map_err(|w| err(e.line, format!("{} {}: {w}", e.key, e.value)))
    };
    for e in s.entries() {
        match e.key.as_str() {
            "devnode" => list.devnode.push(pat(e)?),
            "wwid" => list.wwid.push(pat(e)?),
            "property" => list.property.push(pat(e)?),
            "protocol" => list.protocol.push(pat(e)?),
            _ => {}
        }
    }
    for d in s.sections("device") {
        let mut rule = DeviceRule {
            vendor: None,
            product: None,
            at: src(d.line),
        };
        for e in d.entries() {
            match e.key.as_str() {
                "vendor" => rule.vendor = Some(pat(e)?.value),
                "product" => rule.product = Some(pat(e)?.value),
                _ => {}
            }
        }
        if rule.vendor.is_none() && rule.product.is_none() {
            return Err(err(
                d.line,
                format!("a {} device entry needs a vendor or a product", s.name),
            ));
        }
        list.device.push(rule);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mpath::QueueMode;

    fn conf(text: &str) -> Result<Conf, SyntaxError> {
        Conf::from_document(&Document::parse(text)?, "multipath.conf")
    }

    #[test]
    fn values_are_typed_and_remember_their_line() {
        let c = conf(
            "defaults {\n\
             \tpath_grouping_policy multibus\n\
             \tpath_selector \"round-robin 0\"\n\
             \tfeatures \"3 queue_if_no_path pg_init_retries 50\"\n\
             \tno_path_retry 12\n\
             \tfailback immediate\n\
             \tfind_multipaths yes\n\
             \tpolling_interval 10\n\
             \tdetect_prio no\n\
             }\n",
        )
        .unwrap();
        let a = &c.defaults.attrs;
        assert_eq!(
            a.path_grouping_policy.as_ref().unwrap().value,
            Grouping::Multibus
        );
        assert_eq!(a.path_grouping_policy.as_ref().unwrap().at.line, 2);
        assert_eq!(
            a.path_selector.as_ref().unwrap().value,
            SelectorSpec {
                selector: Selector::RoundRobin,
                args: vec![]
            }
        );
        assert_eq!(
            a.features.as_ref().unwrap().value,
            vec![Feature::QueueIfNoPath, Feature::PgInitRetries(50)]
        );
        assert_eq!(
            a.no_path_retry.as_ref().unwrap().value,
            NoPathRetry::Checks(12)
        );
        assert_eq!(a.failback.as_ref().unwrap().value, Failback::Immediate);
        assert!(!a.detect_prio.as_ref().unwrap().value);
        assert_eq!(
            c.defaults.find_multipaths.as_ref().unwrap().value,
            FindMultipaths::On
        );
        assert_eq!(c.defaults.polling_interval.as_ref().unwrap().value, 10);
        assert_eq!(
            parse_features("2 queue_mode bio").unwrap(),
            vec![Feature::QueueMode(QueueMode::Bio)]
        );
        assert_eq!(parse_hwhandler("0").unwrap(), None);
        assert_eq!(
            parse_hwhandler("1 alua").unwrap().unwrap().name,
            "alua".to_string()
        );
    }

    #[test]
    fn bad_values_and_misplaced_sections_name_the_line() {
        let cases = [
            (
                "defaults {\n\tpath_grouping_policy by_luck\n}\n",
                "line 2: path_grouping_policy by_luck: unknown path_grouping_policy 'by_luck'",
            ),
            (
                "devices {\n\tdevice {\n\t\tvendor X\n\t\tproduct Y\n\t\tfeatures \"1 pg_init_retries 50\"\n\t}\n}\n",
                "line 5: features \"1 pg_init_retries 50\": '1 pg_init_retries 50' counts 1 word, but 2 follow",
            ),
            (
                "defaults {\n\tno_path_retry forever\n}\n",
                "line 2: no_path_retry forever: 'forever' is not fail, queue or a number",
            ),
            (
                "defaults {\n\tpath_selector \"service-time\"\n}\n",
                "line 2: path_selector \"service-time\": 'service-time': the selector's name",
            ),
            (
                "defaults {\n\tblacklist {\n\t}\n}\n",
                "line 2: 'blacklist' is not a section of 'defaults'",
            ),
            ("frobs {\n}\n", "line 1: unknown section 'frobs'"),
            ("verbosity 2\n", "line 1: 'verbosity' outside any section"),
            (
                "blacklist {\n\twwid \"(\"\n}\n",
                "line 2: wwid \"(\": bad regex '('",
            ),
            (
                "devices {\n\tdevice {\n\t\tvendor X\n\t}\n}\n",
                "line 2: a device entry needs a vendor and a product",
            ),
            (
                "multipaths {\n\tmultipath {\n\t\talias data\n\t}\n}\n",
                "line 2: a multipath entry needs a wwid",
            ),
        ];
        for (text, want) in cases {
            let e = conf(text).unwrap_err().to_string();
            assert!(e.starts_with(want), "{text:?}:\n {e}\n want {want}");
        }
    }

    #[test]
    fn entries_written_twice_merge_and_later_files_win() {
        let a = conf(
            "defaults {\n\tuser_friendly_names yes\n\tpolling_interval 5\n}\n\
             devices {\n\tdevice {\n\t\tvendor ACME\n\t\tproduct X\n\t\tno_path_retry 5\n\t\tprio alua\n\t}\n\
             \tdevice {\n\t\tvendor ACME\n\t\tproduct X\n\t\tno_path_retry queue\n\t}\n}\n",
        )
        .unwrap();
        assert_eq!(a.devices.len(), 1);
        let d = &a.devices[0];
        assert_eq!(
            d.attrs.no_path_retry.as_ref().unwrap().value,
            NoPathRetry::Queue
        );
        assert_eq!(d.attrs.prio.as_ref().unwrap().value, "alua");
        let b = Conf::from_document(
            &Document::parse(
                "defaults {\n\tpolling_interval 10\n}\n\
                 devices {\n\tdevice {\n\t\tvendor ACME\n\t\tproduct X\n\t\tprio const\n\t}\n\
                 \tdevice {\n\t\tvendor ACME\n\t\tproduct Y\n\t}\n}\n",
            )
            .unwrap(),
            "conf.d/a.conf",
        )
        .unwrap();
        let m = Conf::merge_files(vec![a, b]);
        assert_eq!(m.defaults.polling_interval.as_ref().unwrap().value, 10);
        assert_eq!(
            m.defaults.polling_interval.as_ref().unwrap().at.file,
            "conf.d/a.conf"
        );
        assert!(m.defaults.attrs.user_friendly_names.as_ref().unwrap().value);
        // ACME/X merged into the later file's entry, where that file has
        // it: before ACME/Y.
        assert_eq!(
            m.devices.iter().map(DeviceEntry::name).collect::<Vec<_>>(),
            ["ACME/X", "ACME/Y"]
        );
        let x = &m.devices[0];
        assert_eq!(x.attrs.prio.as_ref().unwrap().value, "const");
        assert_eq!(
            x.attrs.no_path_retry.as_ref().unwrap().value,
            NoPathRetry::Queue
        );
        // The most recent entry is searched first.
        let hits = m.devices_for("ACME", "XY", "0001");
        assert_eq!(
            hits.iter().map(|d| d.name()).collect::<Vec<_>>(),
            ["ACME/Y", "ACME/X"]
        );
    }
}
