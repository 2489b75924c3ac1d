//! Which devices may become paths: multipath.conf's `blacklist` and
//! `blacklist_exceptions`, with its meaning.
//!
//! - Each entry is a POSIX extended regex matched anywhere in the value
//!   (`regexec` without anchors); a leading `!` inverts it.
//! - Kinds are judged one at a time, in multipath-tools' order (devnode,
//!   device, wwid): a device is denied when an entry of some kind denies it
//!   and no allow entry *of the same kind* matches. An allowed WWID does not
//!   rescue a denied device name, just as in multipath.conf.
//! - `device` entries match vendor and product together (product optional).
//! - With no deny entries of its own, the devnode kind denies what
//!   multipath-tools denies by default (ram, loop, dm-, sr, ...).
use std::fmt;

use regex_lite::Regex;

/// A regex with multipath.conf's `!` inversion.
#[derive(Clone, Debug)]
pub struct Pattern {
    text: String,
    re: Regex,
    invert: bool,
}

impl Pattern {
    pub fn new(text: &str) -> Result<Self, String> {
        let (invert, body) = match text.strip_prefix('!') {
            Some(b) => (true, b),
            None => (false, text),
        };
        let re = Regex::new(body).map_err(|e| format!("bad regex '{text}': {e}"))?;
        Ok(Pattern {
            text: text.to_string(),
            re,
            invert,
        })
    }

    pub fn matches(&self, s: &str) -> bool {
        self.re.is_match(s) != self.invert
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// One `blacklist`/`blacklist_exceptions` entry.
#[derive(Clone, Debug)]
pub enum Rule {
    Wwid(Pattern),
    Devnode(Pattern),
    Device {
        vendor: Pattern,
        product: Option<Pattern>,
    },
}

impl Rule {
    /// Parses `wwid=RE`, `devnode=RE` or `device=VENDOR_RE[/PRODUCT_RE]`.
    pub fn parse(s: &str) -> Result<Self, String> {
        let (kind, value) = s.split_once('=').ok_or_else(|| {
            format!("'{s}': expected wwid=REGEX, devnode=REGEX or device=VENDOR[/PRODUCT]")
        })?;
        if value.is_empty() {
            return Err(format!("'{s}': empty regex"));
        }
        match kind {
            "wwid" => Ok(Rule::Wwid(Pattern::new(value)?)),
            "devnode" => Ok(Rule::Devnode(Pattern::new(value)?)),
            "device" => {
                let (v, p) = match value.split_once('/') {
                    Some((v, p)) => (v, Some(p)),
                    None => (value, None),
                };
                Ok(Rule::Device {
                    vendor: Pattern::new(v)?,
                    product: p.map(Pattern::new).transpose()?,
                })
            }
            other => Err(format!(
                "'{s}': unknown kind '{other}' (wwid, devnode or device)"
            )),
        }
    }
}

/// What is known about a candidate path when filtering.
#[derive(Clone, Copy, Debug)]
pub struct Subject<'a> {
    pub devnode: &'a str,
    pub wwid: Option<&'a str>,
    pub vendor: &'a str,
    pub product: &'a str,
}

/// multipath-tools' built-in devnode blacklist.
pub const DEFAULT_DENY_DEVNODE: &[&str] = &[
    "^(ram|zram|raw|loop|fd|md|dm-|sr|scd|st|dcssblk)[0-9]",
    "^(td|hd|vd)[a-z]",
    "^nbd[0-9]",
];

/// [`DEFAULT_DENY_DEVNODE`] compiled once: a full scan checks every disk.
static DEFAULTS: std::sync::LazyLock<Vec<Pattern>> = std::sync::LazyLock::new(|| {
    DEFAULT_DENY_DEVNODE
        .iter()
        .map(|t| Pattern::new(t).expect("the built-in patterns compile"))
        .collect()
});

#[derive(Clone, Debug, Default)]
pub struct Filter {
    pub deny: Vec<Rule>,
    pub allow: Vec<Rule>,
}

impl Filter {
    pub fn new(deny: Vec<Rule>, allow: Vec<Rule>) -> Self {
        Filter { deny, allow }
    }

    /// `Ok(())` if the device may be a path, else the reason it may not.
    pub fn check(&self, s: &Subject<'_>) -> Result<(), String> {
        let devnode_denies: Vec<&Pattern> = self
            .deny
            .iter()
            .filter_map(|r| match r {
                Rule::Devnode(p) => Some(p),
                _ => None,
            })
            .collect();
        let defaults: &[Pattern] = if devnode_denies.is_empty() {
            &DEFAULTS
        } else {
            &[]
        };
        let denied_by = devnode_denies
            .into_iter()
            .chain(defaults)
            .find(|p| p.matches(s.devnode));
        if let Some(p) = denied_by
            && !self
                .allow
                .iter()
                .any(|r| matches!(r, Rule::Devnode(a) if a.matches(s.devnode)))
        {
            return Err(format!("device name {} denied by devnode '{p}'", s.devnode));
        }

        let dev_match = |r: &Rule| match r {
            Rule::Device { vendor, product } => {
                vendor.matches(s.vendor) && product.as_ref().is_none_or(|p| p.matches(s.product))
            }
            _ => false,
        };
        if let Some(Rule::Device { vendor, product }) = self.deny.iter().find(|r| dev_match(r))
            && !self.allow.iter().any(dev_match)
        {
            return Err(format!(
                "{} {} denied by device '{vendor}{}'",
                s.vendor,
                s.product,
                product
                    .as_ref()
                    .map(|p| format!("/{p}"))
                    .unwrap_or_default()
            ));
        }

        if let Some(w) = s.wwid {
            let wwid_match = |r: &Rule| matches!(r, Rule::Wwid(p) if p.matches(w));
            if let Some(Rule::Wwid(p)) = self.deny.iter().find(|r| wwid_match(r))
                && !self.allow.iter().any(wwid_match)
            {
                return Err(format!("wwid {w} denied by wwid '{p}'"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subj<'a>(devnode: &'a str, wwid: &'a str) -> Subject<'a> {
        Subject {
            devnode,
            wwid: Some(wwid),
            vendor: "QEMU",
            product: "QEMU HARDDISK",
        }
    }

    fn f(deny: &[&str], allow: &[&str]) -> Filter {
        Filter::new(
            deny.iter().map(|s| Rule::parse(s).unwrap()).collect(),
            allow.iter().map(|s| Rule::parse(s).unwrap()).collect(),
        )
    }

    #[test]
    fn defaults_deny_virtual_devices_only() {
        let none = Filter::default();
        assert!(none.check(&subj("sda", "3x")).is_ok());
        assert!(none.check(&subj("loop0", "3x")).is_err());
        assert!(none.check(&subj("dm-3", "3x")).is_err());
        assert!(none.check(&subj("vda", "3x")).is_err());
        assert!(none.check(&subj("nvme0n1", "3x")).is_ok());
    }

    #[test]
    fn exceptions_override_only_their_own_kind() {
        // The classic "everything but these WWIDs".
        let filt = f(&["wwid=.*"], &["wwid=^35000c500deadbeef$"]);
        assert!(filt.check(&subj("sda", "35000c500deadbeef")).is_ok());
        let e = filt.check(&subj("sda", "36001405aaaa")).unwrap_err();
        assert!(e.contains("wwid '.*'"), "{e}");
        // A WWID exception does not rescue a denied device name.
        let filt = f(&["devnode=^sd[a-b]$"], &["wwid=.*"]);
        assert!(filt.check(&subj("sda", "3x")).is_err());
        assert!(filt.check(&subj("sdc", "3x")).is_ok());
        // An explicit devnode deny replaces the defaults.
        assert!(filt.check(&subj("loop0", "3x")).is_ok());
    }

    #[test]
    fn regexes_match_anywhere_and_invert() {
        let filt = f(&["devnode=!^sd[a-z]"], &[]);
        assert!(filt.check(&subj("sdb", "3x")).is_ok());
        assert!(filt.check(&subj("nvme0n1", "3x")).is_err());
        let filt = f(&["wwid=beef"], &[]);
        assert!(filt.check(&subj("sda", "35000c500deadbeef")).is_err());
    }

    #[test]
    fn device_rules_need_vendor_and_product() {
        let filt = f(&["device=QEMU/CD-ROM"], &[]);
        assert!(filt.check(&subj("sda", "3x")).is_ok());
        let filt = f(&["device=^QEMU"], &[]);
        assert!(
            filt.check(&subj("sda", "3x"))
                .unwrap_err()
                .contains("device '^QEMU'")
        );
        let filt = f(&["device=^QEMU"], &["device=QEMU/HARDDISK"]);
        assert!(filt.check(&subj("sda", "3x")).is_ok());
    }

    #[test]
    fn bad_rules_are_refused_with_the_reason() {
        assert!(
            Rule::parse("serial=x")
                .unwrap_err()
                .contains("unknown kind")
        );
        assert!(Rule::parse("wwid").unwrap_err().contains("expected"));
        assert!(Rule::parse("wwid=(").unwrap_err().contains("bad regex"));
        assert!(Rule::parse("wwid=").unwrap_err().contains("empty"));
    }
}
