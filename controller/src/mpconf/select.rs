//! Which value multipath-tools takes for each setting of a map, and where
//! it came from, as `libmultipath/propsel.c` decides: the first layer that
//! sets it, most specific first (the LUN's `multipaths` entry, then
//! `overrides`, then the device entries that match the array, the most
//! recent first, then `defaults`, then multipath-tools' internal default);
//! not every setting reads every layer (the hardware handler reads only
//! the device entries and `defaults`, the checker no `multipaths` entry),
//! and some are detected on the paths (ALUA's prioritizer and handler).
//! Pure: the configuration and what the paths say of themselves in, the
//! settings and their origins out.
use std::fmt;

use serde::Serialize;

use super::model::{
    At, Attrs, Conf, DeviceEntry, Failback, FindMultipaths, NoPathRetry, Prio, RrWeight,
    SelectorSpec, Src,
};
use crate::{
    discovery::identity::Tpgs,
    mpath::{Feature, HwHandler, Selector, grouping::Grouping},
};

/// The configuration multipath-tools runs with, and what the admin wrote.
#[derive(Clone, Debug, Default)]
pub struct Effective {
    /// What multipath-tools uses: `multipath -t` (its built-in table and
    /// defaults with the admin's files merged in), or the files alone
    /// where the binary is missing.
    pub conf: Conf,
    /// The admin's files alone (multipath.conf and conf.d), which tell a
    /// built-in value from one the admin set, and where.
    pub admin: Conf,
    /// Whether `conf` holds multipath-tools' built-in table and defaults.
    pub builtin: bool,
}

/// Where a setting's value came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Origin {
    /// The LUN's entry in the `multipaths` section.
    Multipaths { wwid: String, at: Option<String> },
    /// The `overrides` section.
    Overrides { at: Option<String> },
    /// A device entry; `at` is `None` for multipath-tools' built-in
    /// hwtable.
    Device { entry: String, at: Option<String> },
    /// The `defaults` section as the admin wrote it.
    Defaults { at: String },
    /// multipath-tools' own default (`multipath -t`'s defaults the admin
    /// did not write, or propsel's internal one).
    Builtin,
    /// Found on the paths (ALUA support, a handler the kernel attached).
    Detected { how: String },
    /// pathpilot's own: its configuration, a flag, or its default.
    Pathpilot { how: String },
}

impl Origin {
    /// Whether multipath-tools says something of its own for this array
    /// or this host (an entry, an override, the admin's defaults, a
    /// detection), rather than falling back to its generic default.
    pub fn specific(&self) -> bool {
        !matches!(self, Origin::Builtin | Origin::Pathpilot { .. })
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = |a: &Option<String>| a.as_ref().map(|a| format!(", {a}")).unwrap_or_default();
        match self {
            Origin::Multipaths { wwid, at: a } => write!(f, "multipaths entry {wwid}{}", at(a)),
            Origin::Overrides { at: a } => write!(f, "overrides{}", at(a)),
            Origin::Device { entry, at: None } => {
                write!(f, "device entry {entry}, multipath-tools' built-in hwtable")
            }
            Origin::Device { entry, at: a } => write!(f, "device entry {entry}{}", at(a)),
            Origin::Defaults { at } => write!(f, "defaults, {at}"),
            Origin::Builtin => f.write_str("multipath-tools' default"),
            Origin::Detected { how } => write!(f, "detected: {how}"),
            Origin::Pathpilot { how } => f.write_str(how),
        }
    }
}

/// A value and its origin.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Setting<T> {
    pub value: T,
    pub origin: Origin,
}

/// What multipath-tools knows of one path when it chooses.
#[derive(Clone, Debug)]
pub struct PathFacts {
    pub tpgs: Tpgs,
    /// The device handler the kernel attached (not `detached`).
    pub dh_state: Option<String>,
    /// Whether sysfs has the path's ALUA access state (scsi_dh_alua).
    pub access_state: bool,
}

/// The LUN as the hwtable matches it.
#[derive(Clone, Debug)]
pub struct LunFacts<'a> {
    pub wwid: &'a str,
    pub vendor: &'a str,
    pub product: &'a str,
    pub revision: &'a str,
    pub paths: &'a [PathFacts],
}

/// multipath-tools' choices for one map.
#[derive(Clone, Debug, Serialize)]
pub struct Selection {
    /// The device entries that matched, the most recent first.
    pub devices: Vec<String>,
    pub path_grouping_policy: Setting<Grouping>,
    #[serde(serialize_with = "display")]
    pub path_selector: Setting<SelectorSpec>,
    /// As loaded, without `queue_if_no_path` (which `no_path_retry`
    /// decides) and `retain_attached_hw_handler` (implied since 4.3).
    #[serde(serialize_with = "display_features")]
    pub features: Setting<Vec<Feature>>,
    /// `None` inside: undefined (no queueing).
    #[serde(serialize_with = "display_opt")]
    pub no_path_retry: Setting<Option<NoPathRetry>>,
    #[serde(serialize_with = "display_hw")]
    pub hardware_handler: Setting<Option<HwHandler>>,
    /// The prioritizer of each path, in the order given.
    #[serde(serialize_with = "display_prios")]
    pub prio: Vec<Setting<Prio>>,
    pub path_checker: Setting<String>,
    #[serde(serialize_with = "display")]
    pub failback: Setting<Failback>,
    #[serde(serialize_with = "display_rr")]
    pub rr_weight: Setting<RrWeight>,
    pub rr_min_io_rq: Setting<u32>,
    pub user_friendly_names: Setting<bool>,
    pub alias: Option<Setting<String>>,
    pub alias_prefix: Setting<String>,
    pub polling_interval: Setting<u32>,
    #[serde(serialize_with = "display")]
    pub find_multipaths: Setting<FindMultipaths>,
}

fn display<S: serde::Serializer, T: fmt::Display>(
    s: &Setting<T>,
    ser: S,
) -> Result<S::Ok, S::Error> {
    shown(s.value.to_string(), &s.origin, ser)
}

fn shown<S: serde::Serializer>(value: String, origin: &Origin, ser: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeStruct;
    let mut st = ser.serialize_struct("Setting", 2)?;
    st.serialize_field("value", &value)?;
    st.serialize_field("origin", &origin.to_string())?;
    st.end()
}

fn display_opt<S: serde::Serializer>(
    s: &Setting<Option<NoPathRetry>>,
    ser: S,
) -> Result<S::Ok, S::Error> {
    shown(
        s.value.map_or("undef".into(), |v| v.to_string()),
        &s.origin,
        ser,
    )
}

fn display_features<S: serde::Serializer>(
    s: &Setting<Vec<Feature>>,
    ser: S,
) -> Result<S::Ok, S::Error> {
    shown(features_text(&s.value), &s.origin, ser)
}

fn display_hw<S: serde::Serializer>(
    s: &Setting<Option<HwHandler>>,
    ser: S,
) -> Result<S::Ok, S::Error> {
    shown(hw_text(&s.value), &s.origin, ser)
}

fn display_rr<S: serde::Serializer>(s: &Setting<RrWeight>, ser: S) -> Result<S::Ok, S::Error> {
    shown(
        match s.value {
            RrWeight::Uniform => "uniform".into(),
            RrWeight::Priorities => "priorities".into(),
        },
        &s.origin,
        ser,
    )
}

fn display_prios<S: serde::Serializer>(v: &[Setting<Prio>], ser: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeSeq;
    let mut seq = ser.serialize_seq(Some(v.len()))?;
    for p in v {
        seq.serialize_element(&serde_json::json!({
            "value": prio_text(&p.value),
            "origin": p.origin.to_string(),
        }))?;
    }
    seq.end()
}

/// `2 pg_init_retries 50`: the count-prefixed form multipath.conf and
/// `multipath -ll` show.
pub fn features_text(f: &[Feature]) -> String {
    let words: Vec<String> = f
        .iter()
        .flat_map(crate::dm::readback::feature_tokens)
        .collect();
    let mut s = words.len().to_string();
    for w in words {
        s.push(' ');
        s.push_str(&w);
    }
    s
}

/// `0` or `1 alua`.
pub fn hw_text(h: &Option<HwHandler>) -> String {
    match h {
        None => "0".into(),
        Some(h) => {
            let mut v = vec![(1 + h.args.len()).to_string(), h.name.clone()];
            v.extend(h.args.iter().cloned());
            v.join(" ")
        }
    }
}

pub fn prio_text(p: &Prio) -> String {
    if p.args.is_empty() {
        p.name.clone()
    } else {
        format!("{} ({})", p.name, p.args)
    }
}

/// The layers a setting is read from, most specific first.
#[derive(Clone, Copy, PartialEq)]
enum Layer {
    Multipaths,
    Overrides,
    Devices,
    Defaults,
}

const ALL: &[Layer] = &[
    Layer::Multipaths,
    Layer::Overrides,
    Layer::Devices,
    Layer::Defaults,
];

struct Chooser<'a> {
    e: &'a Effective,
    wwid: &'a str,
    devices: Vec<&'a DeviceEntry>,
}

impl<'a> Chooser<'a> {
    /// The first layer of `layers` that sets the key `get` reads.
    fn pick<T: Clone>(
        &self,
        layers: &[Layer],
        get: impl Fn(&Attrs) -> Option<&At<T>>,
    ) -> Option<Setting<T>> {
        let e = self.e;
        let src = |a: Option<&At<T>>| a.map(|a| a.at.to_string());
        for l in layers {
            match l {
                Layer::Multipaths => {
                    if let Some(m) = e.conf.multipath(self.wwid)
                        && let Some(v) = get(&m.attrs)
                    {
                        let at = e
                            .admin
                            .multipath(self.wwid)
                            .and_then(|m| src(get(&m.attrs)));
                        return Some(Setting {
                            value: v.value.clone(),
                            origin: Origin::Multipaths {
                                wwid: self.wwid.to_string(),
                                at: at.or_else(|| self.own(&v.at)),
                            },
                        });
                    }
                }
                Layer::Overrides => {
                    if let Some(v) = get(&e.conf.overrides) {
                        return Some(Setting {
                            value: v.value.clone(),
                            origin: Origin::Overrides {
                                at: src(get(&e.admin.overrides)).or_else(|| self.own(&v.at)),
                            },
                        });
                    }
                }
                Layer::Devices => {
                    for d in &self.devices {
                        if let Some(v) = get(&d.attrs) {
                            let at = e
                                .admin
                                .devices
                                .iter()
                                .rev()
                                .find(|a| a.same_strings(d))
                                .and_then(|a| src(get(&a.attrs)));
                            return Some(Setting {
                                value: v.value.clone(),
                                origin: Origin::Device {
                                    entry: d.name(),
                                    at: at.or_else(|| self.own(&v.at)),
                                },
                            });
                        }
                    }
                }
                Layer::Defaults => {
                    if let Some(v) = get(&e.conf.defaults.attrs) {
                        return Some(self.defaults(
                            v.value.clone(),
                            &v.at,
                            src(get(&e.admin.defaults.attrs)),
                        ));
                    }
                }
            }
        }
        None
    }

    /// Where a value read from `conf` was written, when `conf` is the
    /// admin's files themselves (no binary): its own source.
    fn own(&self, at: &Src) -> Option<String> {
        (!self.e.builtin).then(|| at.to_string())
    }

    /// A defaults value: the admin's where the admin wrote it, else
    /// multipath-tools' own.
    fn defaults<T>(&self, value: T, at: &Src, admin: Option<String>) -> Setting<T> {
        let origin = match admin.or_else(|| self.own(at)) {
            Some(at) => Origin::Defaults { at },
            None => Origin::Builtin,
        };
        Setting { value, origin }
    }

    fn or<T>(&self, s: Option<Setting<T>>, default: T) -> Setting<T> {
        s.unwrap_or(Setting {
            value: default,
            origin: Origin::Builtin,
        })
    }
}

/// The hardware handler multipath-tools loads for ALUA arrays.
fn alua_handler() -> Option<HwHandler> {
    Some(HwHandler {
        name: "alua".into(),
        args: vec![],
    })
}

/// multipath-tools' choices for a LUN (`select_*` in propsel.c), on a
/// kernel of 4.3 or later (which keeps an attached handler itself).
pub fn select(e: &Effective, lun: &LunFacts<'_>) -> Selection {
    let c = Chooser {
        e,
        wwid: lun.wwid,
        devices: e.conf.devices_for(lun.vendor, lun.product, lun.revision),
    };
    let path_grouping_policy = c.or(
        c.pick(ALL, |a| a.path_grouping_policy.as_ref()),
        Grouping::Failover,
    );
    let path_selector = c.or(
        c.pick(ALL, |a| a.path_selector.as_ref()),
        SelectorSpec {
            selector: Selector::ServiceTime,
            args: vec![],
        },
    );
    let mut no_path_retry = c
        .pick(ALL, |a| a.no_path_retry.as_ref())
        .map(|s| Setting {
            value: Some(s.value),
            origin: s.origin,
        })
        .unwrap_or(Setting {
            value: None,
            origin: Origin::Builtin,
        });
    let mut features = c.or(c.pick(ALL, |a| a.features.as_ref()), vec![]);
    // `queue_if_no_path` in features is the old spelling of
    // `no_path_retry queue`; multipath-tools moves it there.
    if features.value.contains(&Feature::QueueIfNoPath) {
        if no_path_retry.value.is_none() {
            no_path_retry = Setting {
                value: Some(NoPathRetry::Queue),
                origin: features.origin.clone(),
            };
        }
        features.value.retain(|f| *f != Feature::QueueIfNoPath);
    }
    features
        .value
        .retain(|f| *f != Feature::RetainAttachedHwHandler);

    // Kernels since 4.3 keep a handler attached: a path with one names it.
    let all_tpgs = lun.paths.iter().all(|p| p.tpgs != Tpgs::None)
        && lun.paths.iter().any(|p| p.tpgs.supported());
    let attached = lun.paths.iter().find_map(|p| p.dh_state.clone());
    let mut hardware_handler = match attached {
        Some(name) => Setting {
            value: Some(HwHandler { name, args: vec![] }),
            origin: Origin::Detected {
                how: "the handler the kernel attached (retained since 4.3)".into(),
            },
        },
        None => c.or(
            c.pick(&[Layer::Devices, Layer::Defaults], |a| {
                a.hardware_handler.as_ref()
            }),
            None,
        ),
    };
    if all_tpgs && hardware_handler.value.is_none() && hardware_handler.origin == Origin::Builtin {
        hardware_handler = Setting {
            value: alua_handler(),
            origin: Origin::Detected {
                how: "every path supports ALUA (TPGS)".into(),
            },
        };
    } else if !all_tpgs && hardware_handler.value == alua_handler() {
        hardware_handler = Setting {
            value: None,
            origin: Origin::Detected {
                how: "not every path supports ALUA (TPGS)".into(),
            },
        };
    }

    let detect = |get: fn(&Attrs) -> Option<&At<bool>>| {
        c.pick(&[Layer::Overrides, Layer::Devices, Layer::Defaults], get)
            .is_none_or(|s| s.value)
    };
    let detect_prio = detect(|a| a.detect_prio.as_ref());
    let configured_prio = || {
        // Name and arguments each from the first layer that has it
        // (`set_prio_from_vec` for the device entries).
        let name = c.pick(ALL, |a| a.prio.as_ref());
        let args = c.pick(ALL, |a| a.prio_args.as_ref());
        match name {
            Some(n) => Setting {
                value: Prio {
                    name: n.value,
                    args: args.map(|a| a.value).unwrap_or_default(),
                },
                origin: n.origin,
            },
            None => Setting {
                value: Prio {
                    name: "const".into(),
                    args: String::new(),
                },
                origin: Origin::Builtin,
            },
        }
    };
    let prio = lun
        .paths
        .iter()
        .map(|p| {
            if detect_prio && p.tpgs != Tpgs::None && p.tpgs != Tpgs::Unknown {
                let name = if p.access_state { "sysfs" } else { "alua" };
                return Setting {
                    value: Prio {
                        name: name.into(),
                        args: String::new(),
                    },
                    origin: Origin::Detected {
                        how: "the path supports ALUA (detect_prio)".into(),
                    },
                };
            }
            let mut s = configured_prio();
            if s.value.name == "alua" && p.tpgs == Tpgs::None {
                s = Setting {
                    value: Prio {
                        name: "const".into(),
                        args: String::new(),
                    },
                    origin: Origin::Detected {
                        how: "prio alua on a path without ALUA falls back to const".into(),
                    },
                };
            }
            s
        })
        .collect();
    let detect_checker = detect(|a| a.detect_checker.as_ref());
    let path_checker = if detect_checker && lun.paths.iter().any(|p| p.tpgs.supported()) {
        Setting {
            value: "tur".to_string(),
            origin: Origin::Detected {
                how: "the paths support ALUA (detect_checker)".into(),
            },
        }
    } else {
        c.or(
            c.pick(&[Layer::Overrides, Layer::Devices, Layer::Defaults], |a| {
                a.path_checker.as_ref()
            }),
            "tur".into(),
        )
    };
    let d = &e.conf.defaults;
    let admin = &e.admin.defaults;
    let polling_interval = match &d.polling_interval {
        Some(v) => c.defaults(
            v.value,
            &v.at,
            admin.polling_interval.as_ref().map(|a| a.at.to_string()),
        ),
        None => c.or(None, 5),
    };
    let find_multipaths = match &d.find_multipaths {
        Some(v) => c.defaults(
            v.value,
            &v.at,
            admin.find_multipaths.as_ref().map(|a| a.at.to_string()),
        ),
        None => c.or(None, FindMultipaths::Strict),
    };
    let alias = e.conf.multipath(lun.wwid).and_then(|m| {
        m.alias.as_ref().map(|a| Setting {
            value: a.value.clone(),
            origin: Origin::Multipaths {
                wwid: lun.wwid.to_string(),
                at: e
                    .admin
                    .multipath(lun.wwid)
                    .and_then(|m| m.alias.as_ref().map(|a| a.at.to_string()))
                    .or_else(|| c.own(&a.at)),
            },
        })
    });
    Selection {
        devices: c.devices.iter().map(|d| d.name()).collect(),
        path_grouping_policy,
        path_selector,
        features,
        no_path_retry,
        hardware_handler,
        prio,
        path_checker,
        failback: c.or(c.pick(ALL, |a| a.failback.as_ref()), Failback::Manual),
        rr_weight: c.or(c.pick(ALL, |a| a.rr_weight.as_ref()), RrWeight::Uniform),
        rr_min_io_rq: c.or(c.pick(ALL, |a| a.rr_min_io_rq.as_ref()), 1),
        user_friendly_names: c.or(c.pick(ALL, |a| a.user_friendly_names.as_ref()), false),
        alias,
        alias_prefix: c.or(
            c.pick(&[Layer::Overrides, Layer::Devices, Layer::Defaults], |a| {
                a.alias_prefix.as_ref()
            }),
            "mpath".into(),
        ),
        polling_interval,
        find_multipaths,
    }
}
