//! Map names as multipath-tools gives them: `mpatha` .. `mpathz`,
//! `mpathaa` .. (or another `alias_prefix`), the first one free, honouring
//! `/etc/multipath/bindings` (a WWID bound to an alias keeps it; an alias
//! bound to another WWID is not free). pathpilot reads the bindings file
//! but never writes it.
use std::collections::HashSet;

pub const PREFIX: &str = "mpath";
pub const BINDINGS: &str = "/etc/multipath/bindings";

/// The suffix for index `i` in bijective base 26: 0 -> a, 25 -> z, 26 -> aa.
pub fn suffix(mut i: usize) -> String {
    let mut s = Vec::new();
    loop {
        s.push(b'a' + (i % 26) as u8);
        if i < 26 {
            break;
        }
        i = i / 26 - 1;
    }
    s.reverse();
    String::from_utf8(s).unwrap_or_default()
}

/// `(alias, wwid)` pairs of a bindings file; comments and junk skipped.
pub fn parse_bindings(text: &str) -> Vec<(String, String)> {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or(""))
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            Some((it.next()?.to_string(), it.next()?.to_string()))
        })
        .collect()
}

/// The name for a new map of `wwid`, given the dm names in use.
pub fn pick(wwid: &str, in_use: &HashSet<String>, bindings: &[(String, String)]) -> String {
    pick_prefixed(PREFIX, wwid, in_use, bindings)
}

/// [`pick`] with another prefix (multipath.conf's `alias_prefix`).
pub fn pick_prefixed(
    prefix: &str,
    wwid: &str,
    in_use: &HashSet<String>,
    bindings: &[(String, String)],
) -> String {
    if let Some((alias, _)) = bindings
        .iter()
        .find(|(a, w)| w == wwid && !in_use.contains(a))
    {
        return alias.clone();
    }
    let bound: HashSet<&str> = bindings.iter().map(|(a, _)| a.as_str()).collect();
    (0..)
        .map(|i| format!("{prefix}{}", suffix(i)))
        .find(|n| !in_use.contains(n) && !bound.contains(n.as_str()))
        .unwrap_or_else(|| format!("{prefix}-{wwid}"))
}

/// The bindings on this machine (empty if there is no file).
pub fn system_bindings() -> Vec<(String, String)> {
    bindings_at(std::path::Path::new(BINDINGS))
}

/// The bindings of a file (empty if there is none).
pub fn bindings_at(path: &std::path::Path) -> Vec<(String, String)> {
    std::fs::read_to_string(path)
        .map(|t| parse_bindings(&t))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suffixes_count_like_multipath_tools() {
        assert_eq!(suffix(0), "a");
        assert_eq!(suffix(25), "z");
        assert_eq!(suffix(26), "aa");
        assert_eq!(suffix(27), "ab");
        assert_eq!(suffix(26 + 26 * 26 - 1), "zz");
        assert_eq!(suffix(26 + 26 * 26), "aaa");
    }

    #[test]
    fn first_free_name_and_bindings() {
        let used: HashSet<String> = ["mpatha".to_string(), "mpathc".into()].into();
        assert_eq!(pick("3w", &used, &[]), "mpathb");
        let b = parse_bindings("# comment\nmpathb 3other\nmpathq 3w  # mine\n\njunk\n");
        assert_eq!(b.len(), 2);
        assert_eq!(pick("3w", &used, &b), "mpathq");
        assert_eq!(pick("3new", &used, &b), "mpathd");
        assert_eq!(pick_prefixed("data", "3new", &used, &b), "dataa");
    }
}
