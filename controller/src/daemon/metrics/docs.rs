//! docs/metrics.md against what the daemon exports: every family the
//! metrics endpoint declares has its row on the page, and every
//! `pathpilot_` name the page mentions is one the endpoint declares (a
//! histogram's `_bucket`, `_sum` and `_count` series included).
use std::collections::BTreeMap;

use super::render;
use crate::ctl::status::DaemonStatus;

#[test]
fn the_metrics_page_names_every_exported_family_and_no_other() {
    let page = include_str!("../../../../docs/metrics.md");
    // An empty status still declares every family.
    let families: BTreeMap<String, String> = render(&DaemonStatus::default())
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|r| r.split_once(' '))
        .map(|(n, t)| (n.to_string(), t.to_string()))
        .collect();
    assert!(families.len() > 20, "{families:?}");
    for name in families.keys() {
        assert!(
            page.contains(&format!("`{name}")),
            "docs/metrics.md has no row for {name}"
        );
    }
    let re = regex_lite::Regex::new(r"pathpilot_[a-z0-9_]*[a-z0-9]").unwrap();
    for m in re.find_iter(page) {
        let name = m.as_str();
        let exported = families.contains_key(name)
            || ["_bucket", "_sum", "_count"].iter().any(|suf| {
                name.strip_suffix(suf)
                    .and_then(|base| families.get(base))
                    .is_some_and(|t| t == "histogram")
            });
        assert!(
            exported,
            "docs/metrics.md names {name}, which is not exported"
        );
    }
}
