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
pub mod grouping;
mod lex;
pub mod status;
pub mod table;

pub use error::{ModelError, ParseError};
pub use status::{GroupState, GroupStatus, MultipathStatus, PathInfo, PathState, PathStatus};
pub use table::{
    CpuMask, Feature, HwHandler, MultipathTable, Path, PathArgs, PriorityGroup, QueueMode, Selector,
};

/// A block device as the kernel names it in tables: `major:minor`, the one
/// device-number type of pathpilot.
///
/// Tables may be loaded with `/dev/sdb`-style names, but the kernel always
/// prints the device number, and read-back compares against what it prints;
/// name resolution belongs to discovery.
pub use crate::blockdev::DevNum;

/// Why a string is not a `major:minor` device number.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("expected a device as major:minor (e.g. 8:16), got '{0}'")]
pub struct DevNumError(pub String);

/// Parses a table's device number. Only the canonical decimal form is
/// accepted so that a parsed table renders back to the same characters.
pub fn parse_dev(s: &str) -> Result<DevNum, DevNumError> {
    let err = || DevNumError(s.to_owned());
    let (maj, min) = s.split_once(':').ok_or_else(err)?;
    let major = lex::canonical_u32(maj).ok_or_else(err)?;
    let minor = lex::canonical_u32(min).ok_or_else(err)?;
    Ok(DevNum::new(major, minor))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devnum_round_trip() {
        let d = parse_dev("8:16").unwrap();
        assert_eq!(d, DevNum::new(8, 16));
        assert_eq!(d.to_string(), "8:16");
        assert_eq!(parse_dev("259:0").unwrap(), DevNum::new(259, 0));
    }

    #[test]
    fn devnum_rejects_names_and_odd_forms() {
        for bad in [
            "sdb", "8:", ":16", "08:16", "8:016", "8:16:1", "+8:16", "8:-1", "",
        ] {
            assert!(parse_dev(bad).is_err(), "{bad}");
        }
    }
}
