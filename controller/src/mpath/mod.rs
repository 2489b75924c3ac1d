//! One typed model of a dm-multipath map, parsed from and rendered to the
//! exact strings the kernel's multipath target prints.
//!
//! Everything that looks at or changes a map goes through this model so that
//! no other part of pathpilot builds table strings by hand. The model follows
//! `drivers/md/dm-mpath.c` (`multipath_ctr`, `multipath_status`) and the
//! path selectors' `status`/`add_path` functions:
//!
//! * [`table`]: what `DM_TABLE_LOAD` takes and `DM_TABLE_STATUS` with the
//!   table flag returns;
//! * [`status`]: what `DM_TABLE_STATUS` returns without it.
//!
//! The kernel ends both strings with one space (every `DMEMIT` ends with
//! one); parsing accepts that and any other surrounding whitespace, rendering
//! produces single spaces and no trailing one, which the kernel accepts.

mod error;
mod lex;
pub mod status;
pub mod table;

pub use error::{ModelError, ParseError};
pub use status::{GroupState, GroupStatus, MultipathStatus, PathInfo, PathState, PathStatus};
pub use table::{
    CpuMask, Feature, HwHandler, MultipathTable, Path, PathArgs, PriorityGroup, QueueMode, Selector,
};

use std::fmt;
use std::str::FromStr;

/// A block device as the kernel names it in tables: `major:minor`.
///
/// Tables may be loaded with `/dev/sdb`-style names, but the kernel always
/// prints the device number, and read-back compares against what it prints;
/// name resolution belongs to discovery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DevNum {
    pub major: u32,
    pub minor: u32,
}

impl DevNum {
    pub const fn new(major: u32, minor: u32) -> Self {
        Self { major, minor }
    }
}

impl fmt::Display for DevNum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.major, self.minor)
    }
}

/// Why a string is not a `major:minor` device number.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("expected a device as major:minor (e.g. 8:16), got '{0}'")]
pub struct DevNumError(pub String);

impl FromStr for DevNum {
    type Err = DevNumError;

    /// Only the canonical decimal form is accepted so that a parsed table
    /// renders back to the same characters.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || DevNumError(s.to_owned());
        let (maj, min) = s.split_once(':').ok_or_else(err)?;
        let major = lex::canonical_u32(maj).ok_or_else(err)?;
        let minor = lex::canonical_u32(min).ok_or_else(err)?;
        Ok(Self { major, minor })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devnum_round_trip() {
        let d: DevNum = "8:16".parse().unwrap();
        assert_eq!(d, DevNum::new(8, 16));
        assert_eq!(d.to_string(), "8:16");
        assert_eq!("259:0".parse::<DevNum>().unwrap(), DevNum::new(259, 0));
    }

    #[test]
    fn devnum_rejects_names_and_odd_forms() {
        for bad in [
            "sdb", "8:", ":16", "08:16", "8:016", "8:16:1", "+8:16", "8:-1", "",
        ] {
            assert!(bad.parse::<DevNum>().is_err(), "{bad}");
        }
    }
}
