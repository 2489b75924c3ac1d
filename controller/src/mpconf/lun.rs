//! A discovered LUN planned with multipath-tools' configuration: its paths'
//! identities read and ordered as multipath-tools lists them, its choices,
//! its tables, its name, whether multipath-tools would map it at all, and
//! the blacklist as pathpilot's filter rules.
use std::{collections::HashSet, path::PathBuf};

use serde::Serialize;

use super::{
    model::{At, Blacklist, FindMultipaths, Src},
    plan::{Own, Plan, PlanPath, plan},
    select::{Effective, LunFacts, Origin, PathFacts, Selection, Setting, select},
};
use crate::discovery::{
    Lun, Rule,
    filter::Pattern,
    identity::{Identity, Tpgs, devpath_order},
};

/// A LUN's plan, with multipath-tools' choices when they were followed.
#[derive(Clone, Debug, Serialize)]
pub struct Planned {
    pub plan: Plan,
    #[serde(skip)]
    pub selection: Option<Selection>,
    /// The device entries that matched, the most recent first.
    pub devices: Vec<String>,
}

/// Plans a LUN: pathpilot's own rules alone without `eff`, else following
/// multipath-tools' configuration `eff`.
pub fn plan_lun(lun: &Lun, eff: Option<&Effective>, own: &Own) -> Result<Planned, String> {
    let sizes: HashSet<u64> = lun.paths.iter().map(|p| p.size_sectors).collect();
    if sizes.len() > 1 {
        return Err(format!(
            "the paths of {} disagree on the size ({}): not one LUN?",
            lun.wwid,
            lun.paths
                .iter()
                .map(|p| format!("{} {}", p.name, p.size_sectors))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let size = lun.paths.first().map_or(0, |p| p.size_sectors);
    let Some(eff) = eff else {
        let paths: Vec<PlanPath> = lun
            .paths
            .iter()
            .map(|p| PlanPath {
                name: p.name.clone(),
                dev: p.dev,
                alua: p.alua,
                serial: None,
                node_name: None,
            })
            .collect();
        return Ok(Planned {
            plan: plan(size, &paths, None, own),
            selection: None,
            devices: vec![],
        });
    };
    // multipath-tools lists a map's paths in udev's order of devices.
    let mut read: Vec<(PlanPath, PathFacts, String)> = lun
        .paths
        .iter()
        .map(|p| {
            let id = Identity::read(&p.name);
            let facts = PathFacts {
                tpgs: id.as_ref().map_or(Tpgs::Unknown, |i| i.tpgs),
                dh_state: id.as_ref().and_then(|i| i.dh_state.clone()),
                access_state: p.alua.is_some(),
            };
            let path = PlanPath {
                name: p.name.clone(),
                dev: p.dev,
                alua: p.alua,
                serial: id.as_ref().and_then(|i| i.serial.clone()),
                node_name: id.as_ref().map(|i| i.node_name.clone()),
            };
            let devpath = id.map(|i| i.devpath).unwrap_or_default();
            (path, facts, devpath)
        })
        .collect();
    read.sort_by(|a, b| devpath_order(&a.2, &b.2));
    let facts: Vec<PathFacts> = read.iter().map(|r| r.1.clone()).collect();
    let paths: Vec<PlanPath> = read.into_iter().map(|r| r.0).collect();
    let first = &lun.paths[0];
    let sel = select(
        eff,
        &LunFacts {
            wwid: &lun.wwid,
            vendor: &first.vendor,
            product: &first.model,
            revision: &first.rev,
            paths: &facts,
        },
    );
    Ok(Planned {
        plan: plan(size, &paths, Some(&sel), own),
        devices: sel.devices.clone(),
        selection: Some(sel),
    })
}

/// How a new map is named.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Naming {
    /// The alias of its `multipaths` entry.
    Alias(String),
    /// `user_friendly_names yes`: the prefix and the next free suffix, with
    /// this bindings file.
    Friendly { prefix: String, bindings: PathBuf },
    /// `user_friendly_names no`, set for this array or by the admin: its
    /// WWID.
    Wwid,
    /// pathpilot's: `mpatha`.. with /etc/multipath/bindings.
    Pathpilot,
}

/// The naming multipath-tools would use, where it says something specific
/// (the multipaths entry, the array's entry, the admin's defaults).
pub fn naming(sel: &Selection, eff: &Effective) -> Setting<Naming> {
    if let Some(a) = &sel.alias {
        return Setting {
            value: Naming::Alias(a.value.clone()),
            origin: a.origin.clone(),
        };
    }
    let ufn = &sel.user_friendly_names;
    if !ufn.origin.specific() {
        return Setting {
            value: Naming::Pathpilot,
            origin: Origin::Pathpilot {
                how: "pathpilot's default".into(),
            },
        };
    }
    let value = if ufn.value {
        Naming::Friendly {
            prefix: sel.alias_prefix.value.clone(),
            bindings: eff
                .conf
                .defaults
                .bindings_file
                .as_ref()
                .map_or(crate::discovery::naming::BINDINGS.into(), |b| {
                    b.value.clone().into()
                }),
        }
    } else {
        Naming::Wwid
    };
    Setting {
        value,
        origin: ufn.origin.clone(),
    }
}

/// A new map's name: multipath-tools' naming where its configuration
/// says something of its own (`rule`), else pathpilot's (`mpatha`.., with
/// `bindings`). Returns the name and where multipath-tools' rule came from.
pub fn name(
    wwid: &str,
    rule: Option<&Setting<Naming>>,
    in_use: &HashSet<String>,
    bindings: &[(String, String)],
) -> (String, Option<String>) {
    let own = || crate::discovery::naming::pick(wwid, in_use, bindings);
    let Some(rule) = rule else {
        return (own(), None);
    };
    let name = match &rule.value {
        Naming::Alias(a) => a.clone(),
        Naming::Friendly { prefix, bindings } => crate::discovery::naming::pick_prefixed(
            prefix,
            wwid,
            in_use,
            &crate::discovery::naming::bindings_at(bindings),
        ),
        Naming::Wwid => wwid.to_string(),
        Naming::Pathpilot => return (own(), None),
    };
    (name, Some(rule.origin.to_string()))
}

/// pathpilot's defaults from the daemon's `[maps]` keys, for where
/// multipath-tools has only its generic ones.
pub fn daemon_own(cfg: &crate::config::Config) -> Own {
    let how = |k: &str| Origin::Pathpilot {
        how: format!("[maps] {k}"),
    };
    Own {
        default_selector: Some(Setting {
            value: crate::mpath::Selector::from_name(&cfg.maps.selector),
            origin: how("selector"),
        }),
        default_grouping: cfg
            .maps
            .path_grouping_policy
            .as_deref()
            .and_then(|g| g.parse().ok())
            .map(|value| Setting {
                value,
                origin: how("path_grouping_policy"),
            }),
        default_queue_if_no_path: cfg.maps.queue_if_no_path,
        ..Own::default()
    }
}

/// Whether multipath-tools would map a LUN on its own (`find_multipaths`):
/// `known` is a WWID in the wwids file or the multipaths section.
pub fn wanted(find: FindMultipaths, paths: usize, known: bool) -> Result<(), String> {
    match find {
        FindMultipaths::Off | FindMultipaths::Greedy => Ok(()),
        FindMultipaths::Strict if known => Ok(()),
        FindMultipaths::Strict => Err("find_multipaths strict: its WWID is not in the wwids file \
             nor the multipaths section"
            .into()),
        FindMultipaths::On | FindMultipaths::Smart if known || paths >= 2 => Ok(()),
        FindMultipaths::On | FindMultipaths::Smart => Err(format!(
            "find_multipaths {find}: one path, and its WWID is not in the wwids file"
        )),
    }
}

/// The WWIDs of a wwids file (`/WWID/` lines).
pub fn parse_wwids(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter_map(|l| l.strip_prefix('/')?.strip_suffix('/'))
        .map(str::to_string)
        .collect()
}

/// The WWIDs multipath-tools knows: its wwids file and its multipaths
/// section.
pub fn known_wwids(eff: &Effective) -> Vec<String> {
    let file = eff
        .conf
        .defaults
        .wwids_file
        .as_ref()
        .map_or(super::WWIDS.to_string(), |w| w.value.clone());
    let mut v = std::fs::read_to_string(file)
        .map(|t| parse_wwids(&t))
        .unwrap_or_default();
    v.extend(eff.conf.multipaths.iter().map(|m| m.wwid.clone()));
    v
}

/// One kind of blacklist entry: its list, and the rule it makes.
struct Kind {
    entries: fn(&Blacklist) -> &Vec<At<Pattern>>,
    rule: fn(Pattern) -> Rule,
}

const KINDS: [Kind; 4] = [
    Kind {
        entries: |b| &b.devnode,
        rule: Rule::Devnode,
    },
    Kind {
        entries: |b| &b.wwid,
        rule: Rule::Wwid,
    },
    Kind {
        entries: |b| &b.property,
        rule: Rule::Property,
    },
    Kind {
        entries: |b| &b.protocol,
        rule: Rule::Protocol,
    },
];

/// One list's entries as rules; `admin` (the same list in the admin's
/// files) says where each was written, else it is multipath-tools' own.
fn rules(eff: &Effective, list: &Blacklist, admin: &Blacklist) -> Vec<Rule> {
    let own = |at: &Src| {
        if eff.builtin {
            "multipath-tools' default blacklist".to_string()
        } else {
            format!("multipath.conf, {at}")
        }
    };
    let mut v = vec![];
    for k in &KINDS {
        for p in (k.entries)(list) {
            let from = (k.entries)(admin)
                .iter()
                .find(|a| a.value.text() == p.value.text())
                .map_or_else(|| own(&p.at), |a| format!("multipath.conf, {}", a.at));
            v.push((k.rule)(p.value.clone().from_source(from)));
        }
    }
    let text = |p: &Option<Pattern>| p.as_ref().map(|p| p.text().to_string());
    for d in &list.device {
        let from = admin
            .device
            .iter()
            .find(|a| text(&a.vendor) == text(&d.vendor) && text(&a.product) == text(&d.product))
            .map_or_else(|| own(&d.at), |a| format!("multipath.conf, {}", a.at));
        v.push(Rule::Device {
            vendor: d.vendor.clone().map(|p| p.from_source(from.clone())),
            product: d.product.clone().map(|p| p.from_source(from.clone())),
        });
    }
    v
}

/// multipath-tools' blacklist and exceptions as pathpilot's filter rules,
/// each naming where it was written: `(deny, allow)`.
pub fn filter_rules(eff: &Effective) -> Result<(Vec<Rule>, Vec<Rule>), String> {
    let mut deny = rules(eff, &eff.conf.blacklist, &eff.admin.blacklist);
    let allow = rules(eff, &eff.conf.exceptions, &eff.admin.exceptions);
    // Without the binary, the admin's device entries' management LUNs
    // are blacklisted as multipath-tools would (`multipath -t` lists them).
    if !eff.builtin {
        for d in &eff.conf.devices {
            if let (Some(v), Some(pb)) = (&d.vendor, &d.product_blacklist) {
                let from = format!("product_blacklist of device entry {}, {}", d.name(), pb.at);
                deny.push(Rule::Device {
                    vendor: Some(Pattern::new(&v.text)?.from_source(from.clone())),
                    product: Some(Pattern::new(&pb.value)?.from_source(from)),
                });
            }
        }
    }
    Ok((deny, allow))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        discovery::{Filter, Subject},
        mpconf::parse,
    };

    #[test]
    fn find_multipaths_as_multipath_tools_decides() {
        use FindMultipaths::*;
        assert!(wanted(Strict, 4, false).unwrap_err().contains("strict"));
        assert!(wanted(Strict, 1, true).is_ok());
        assert!(wanted(On, 2, false).is_ok());
        assert!(wanted(Smart, 1, false).is_err());
        assert!(wanted(On, 1, true).is_ok());
        assert!(wanted(Greedy, 1, false).is_ok());
        assert!(wanted(Off, 1, false).is_ok());
        assert_eq!(
            parse_wwids("# Multipath wwids, Version : 1.0\n/3600a/\n/36001405b/ # x\njunk\n"),
            ["3600a", "36001405b"]
        );
    }

    #[test]
    fn the_blacklist_becomes_rules_that_name_their_line() {
        let admin = parse(
            "blacklist {\n\twwid \".*\"\n}\nblacklist_exceptions {\n\twwid \"^3600a\"\n}\n",
            "/etc/multipath.conf",
        )
        .unwrap();
        let mut conf = parse(
            include_str!("../../tests/fixtures/multipath-t-0.9.4.conf"),
            "multipath -t",
        )
        .unwrap();
        conf.blacklist.wwid = admin.blacklist.wwid.clone();
        conf.exceptions.wwid = admin.exceptions.wwid.clone();
        let eff = Effective {
            conf,
            admin,
            builtin: true,
        };
        let (deny, allow) = filter_rules(&eff).unwrap();
        let f = Filter::new(deny, allow);
        let e = f
            .check(&Subject::new(
                "sdb",
                Some("35000c5"),
                "QEMU",
                "QEMU HARDDISK",
            ))
            .unwrap_err();
        assert_eq!(
            e,
            "wwid 35000c5 denied by wwid '.*' (multipath.conf, /etc/multipath.conf line 2)"
        );
        assert!(
            f.check(&Subject::new(
                "sdb",
                Some("3600a0"),
                "QEMU",
                "QEMU HARDDISK"
            ))
            .is_ok()
        );
        let e = f
            .check(&Subject::new(
                "vda",
                Some("3600a0"),
                "QEMU",
                "QEMU HARDDISK",
            ))
            .unwrap_err();
        assert!(e.ends_with("(multipath-tools' default blacklist)"), "{e}");
        let e = f
            .check(&Subject::new("sdc", Some("3600a0"), "DGC", "LUNZ"))
            .unwrap_err();
        assert!(
            e.starts_with("DGC LUNZ denied by device '^DGC/LUNZ'"),
            "{e}"
        );
    }

    #[test]
    fn without_the_binary_product_blacklists_are_rules() {
        let conf = parse(
            "devices {\n\tdevice {\n\t\tvendor ACME\n\t\tproduct Array\n\t\tproduct_blacklist Mgmt\n\t}\n}\n",
            "/etc/multipath.conf",
        )
        .unwrap();
        let eff = Effective {
            conf: conf.clone(),
            admin: conf,
            builtin: false,
        };
        let (deny, allow) = filter_rules(&eff).unwrap();
        let f = Filter::new(deny, allow);
        let e = f
            .check(&Subject::new("sdc", Some("3x"), "ACME", "Mgmt LUN"))
            .unwrap_err();
        assert!(
            e.contains("product_blacklist of device entry ACME/Array"),
            "{e}"
        );
        assert!(
            f.check(&Subject::new("sdc", Some("3x"), "ACME", "Array"))
                .is_ok()
        );
    }
}
