//! Which devices may become paths: multipath.conf's `blacklist` and
//! `blacklist_exceptions`, with its meaning.
//!
//! - Each entry is a POSIX extended regex matched anywhere in the value
//!   (`regexec` without anchors); a leading `!` inverts it (`\!` is a
//!   literal `!`).
//! - Kinds are judged one at a time, in multipath-tools' order (property,
//!   devnode, device, protocol, wwid): a device is denied when an entry of
//!   some kind denies it and no allow entry *of the same kind* matches. An
//!   allowed WWID does not rescue a denied device name, just as in
//!   multipath.conf.
//! - `device` entries match vendor and product together (either optional).
//! - `property` entries look at udev's property names, the first that an
//!   entry names decides; and where `property` exceptions exist, a device
//!   udev gave its `uid_attribute` (its WWID) but no excepted property is
//!   denied ("udev property missing"). Without a udev database for the
//!   device there is nothing to judge, as for multipath-tools.
//! - `protocol` entries match the transport (`scsi:fcp`, `scsi:iscsi`,
//!   `scsi:sas`, `scsi:unspec`, `nvme:tcp`, ...).
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
    /// Where the entry was written, for the reason a device is left out
    /// (`/etc/multipath.conf line 3`); `None` for pathpilot's own rules.
    from: Option<String>,
}

impl Pattern {
    pub fn new(text: &str) -> Result<Self, String> {
        let (invert, body) = match text.strip_prefix('!') {
            Some(b) => (true, b),
            None => (
                false,
                text.strip_prefix('\\')
                    .filter(|b| b.starts_with('!'))
                    .unwrap_or(text),
            ),
        };
        let re = Regex::new(body).map_err(|e| format!("bad regex '{text}': {e}"))?;
        Ok(Pattern {
            text: text.to_string(),
            re,
            invert,
            from: None,
        })
    }

    /// The same pattern, said to come from `from`.
    pub fn from_source(mut self, from: String) -> Self {
        self.from = Some(from);
        self
    }

    pub fn matches(&self, s: &str) -> bool {
        self.re.is_match(s) != self.invert
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    /// ` (/etc/multipath.conf line 3)`, or nothing for pathpilot's own rule.
    fn source(&self) -> String {
        self.from
            .as_ref()
            .map(|f| format!(" ({f})"))
            .unwrap_or_default()
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
        vendor: Option<Pattern>,
        product: Option<Pattern>,
    },
    Property(Pattern),
    Protocol(Pattern),
}

impl Rule {
    /// Parses `wwid=RE`, `devnode=RE`, `device=VENDOR_RE[/PRODUCT_RE]`,
    /// `property=RE` or `protocol=RE`.
    pub fn parse(s: &str) -> Result<Self, String> {
        let (kind, value) = s.split_once('=').ok_or_else(|| {
            format!(
                "'{s}': expected wwid=REGEX, devnode=REGEX, device=VENDOR[/PRODUCT], property=REGEX or protocol=REGEX"
            )
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
                    vendor: Some(Pattern::new(v)?),
                    product: p.map(Pattern::new).transpose()?,
                })
            }
            "property" => Ok(Rule::Property(Pattern::new(value)?)),
            "protocol" => Ok(Rule::Protocol(Pattern::new(value)?)),
            other => Err(format!(
                "'{s}': unknown kind '{other}' (wwid, devnode, device, property or protocol)"
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
    /// udev's property names, where udev has a database for the device.
    pub properties: Option<&'a [String]>,
    /// The property udev's WWID is in (multipath.conf's `uid_attribute`).
    pub uid_attribute: &'a str,
    /// The transport (`scsi:fcp`, ...), where it was read.
    pub protocol: Option<&'a str>,
}

impl<'a> Subject<'a> {
    /// A subject known by name, WWID, vendor and product only.
    pub fn new(devnode: &'a str, wwid: Option<&'a str>, vendor: &'a str, product: &'a str) -> Self {
        Subject {
            devnode,
            wwid,
            vendor,
            product,
            properties: None,
            uid_attribute: "ID_SERIAL",
            protocol: None,
        }
    }
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

    /// Whether a rule looks at udev's properties (reading them costs a
    /// file per device).
    pub fn wants_properties(&self) -> bool {
        self.deny
            .iter()
            .chain(&self.allow)
            .any(|r| matches!(r, Rule::Property(_)))
    }

    /// Whether a rule looks at the transport.
    pub fn wants_protocol(&self) -> bool {
        self.deny
            .iter()
            .chain(&self.allow)
            .any(|r| matches!(r, Rule::Protocol(_)))
    }

    /// `Ok(())` if the device may be a path, else the reason it may not.
    pub fn check(&self, s: &Subject<'_>) -> Result<(), String> {
        self.check_property(s)?;
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
            return Err(format!(
                "device name {} denied by devnode '{p}'{}",
                s.devnode,
                p.source()
            ));
        }

        let dev_match = |r: &Rule| match r {
            Rule::Device { vendor, product } => {
                (vendor.is_some() || product.is_some())
                    && vendor.as_ref().is_none_or(|v| v.matches(s.vendor))
                    && product.as_ref().is_none_or(|p| p.matches(s.product))
            }
            _ => false,
        };
        if let Some(Rule::Device { vendor, product }) = self.deny.iter().find(|r| dev_match(r))
            && !self.allow.iter().any(dev_match)
        {
            let src = vendor.as_ref().or(product.as_ref()).map(|p| p.source());
            return Err(format!(
                "{} {} denied by device '{}{}'{}",
                s.vendor,
                s.product,
                vendor.as_ref().map(Pattern::text).unwrap_or(".*"),
                product
                    .as_ref()
                    .map(|p| format!("/{p}"))
                    .unwrap_or_default(),
                src.unwrap_or_default()
            ));
        }

        if let Some(proto) = s.protocol {
            let proto_match = |r: &Rule| matches!(r, Rule::Protocol(p) if p.matches(proto));
            if let Some(Rule::Protocol(p)) = self.deny.iter().find(|r| proto_match(r))
                && !self.allow.iter().any(proto_match)
            {
                return Err(format!(
                    "protocol {proto} denied by protocol '{p}'{}",
                    p.source()
                ));
            }
        }

        if let Some(w) = s.wwid {
            let wwid_match = |r: &Rule| matches!(r, Rule::Wwid(p) if p.matches(w));
            if let Some(Rule::Wwid(p)) = self.deny.iter().find(|r| wwid_match(r))
                && !self.allow.iter().any(wwid_match)
            {
                return Err(format!("wwid {w} denied by wwid '{p}'{}", p.source()));
            }
        }
        Ok(())
    }

    /// multipath-tools' `filter_property`: the first property name an
    /// exception or a blacklist entry matches decides; with none matched,
    /// a device whose `uid_attribute` udev set is denied when exceptions
    /// exist to be met.
    fn check_property(&self, s: &Subject<'_>) -> Result<(), String> {
        let Some(props) = s.properties else {
            return Ok(());
        };
        let allows: Vec<&Pattern> = self
            .allow
            .iter()
            .filter_map(|r| match r {
                Rule::Property(p) => Some(p),
                _ => None,
            })
            .collect();
        let denies: Vec<&Pattern> = self
            .deny
            .iter()
            .filter_map(|r| match r {
                Rule::Property(p) => Some(p),
                _ => None,
            })
            .collect();
        if allows.is_empty() && denies.is_empty() {
            return Ok(());
        }
        for name in props {
            if allows.iter().any(|p| p.matches(name)) {
                return Ok(());
            }
            if let Some(p) = denies.iter().find(|p| p.matches(name)) {
                return Err(format!(
                    "udev property {name} denied by property '{p}'{}",
                    p.source()
                ));
            }
        }
        if !allows.is_empty() && props.iter().any(|n| n == s.uid_attribute) {
            return Err(format!(
                "no udev property that property exceptions allow ({}){}",
                allows
                    .iter()
                    .map(|p| p.text())
                    .collect::<Vec<_>>()
                    .join(", "),
                allows[0].source()
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subj<'a>(devnode: &'a str, wwid: &'a str) -> Subject<'a> {
        Subject::new(devnode, Some(wwid), "QEMU", "QEMU HARDDISK")
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

    #[test]
    fn properties_as_multipath_tools_judges_them() {
        // Debian's default: devices udev identified need an excepted property.
        let filt = f(&[], &["property=(SCSI_IDENT_|ID_WWN)"]);
        let with = |props: &[&str]| props.iter().map(|p| p.to_string()).collect::<Vec<_>>();
        let judged = |props: Option<&[String]>| {
            let mut s = subj("sda", "3x");
            s.properties = props;
            filt.check(&s)
        };
        assert!(judged(None).is_ok(), "no udev database: nothing to judge");
        assert!(judged(Some(&with(&["DEVNAME", "ID_SERIAL", "ID_WWN"]))).is_ok());
        let e = judged(Some(&with(&["DEVNAME", "ID_SERIAL"]))).unwrap_err();
        assert!(e.contains("no udev property"), "{e}");
        // Without its uid_attribute udev did not identify it: let through.
        assert!(judged(Some(&with(&["DEVNAME"]))).is_ok());
        let filt = f(&["property=^ID_CDROM"], &[]);
        let mut s = subj("sda", "3x");
        let p = with(&["ID_CDROM", "ID_SERIAL"]);
        s.properties = Some(&p);
        assert!(filt.check(&s).unwrap_err().contains("ID_CDROM"));
    }

    #[test]
    fn protocols_and_inverted_device_rules() {
        let filt = f(&["protocol=scsi:usb"], &[]);
        let mut s = subj("sda", "3x");
        assert!(filt.check(&s).is_ok(), "transport not read: not judged");
        s.protocol = Some("scsi:usb");
        assert!(filt.check(&s).unwrap_err().contains("protocol scsi:usb"));
        s.protocol = Some("scsi:fcp");
        assert!(filt.check(&s).is_ok());
        assert!(Pattern::new("\\!x").unwrap().matches("!x"));
        assert!(!Pattern::new("\\!x").unwrap().matches("x"));
        let p = Pattern::new("^36")
            .unwrap()
            .from_source("m.conf line 3".into());
        let filt = Filter::new(vec![Rule::Wwid(p)], vec![]);
        assert_eq!(
            filt.check(&subj("sda", "36001")).unwrap_err(),
            "wwid 36001 denied by wwid '^36' (m.conf line 3)"
        );
    }
}
