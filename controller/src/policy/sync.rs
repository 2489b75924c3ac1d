//! Path states after a reload, as multipath-tools' `sync_map_state` does
//! them: a new table starts with every path active, so each path that must
//! carry no I/O is failed again at once, and the status is read back.
use std::collections::BTreeMap;

use crate::{
    blockdev::DevNum,
    dm::{DmError, Message, ReloadTiming},
    mpath::{MultipathStatus, MultipathTable, PathState},
    policy::ops::MapOps,
};

/// Why a path is held failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Hold {
    /// Failed by hand: only a reinstate by hand ends it.
    Operator,
    /// The checker finds it faulty or silent.
    Checker,
    /// The kernel failed it (an I/O error) and no check has found it ready
    /// since.
    Kernel,
}

impl Hold {
    pub fn word(self) -> &'static str {
        match self {
            Hold::Operator => "failed by the operator",
            Hold::Checker => "failed by the checker",
            Hold::Kernel => "failed by the kernel, not checked ready since",
        }
    }
}

/// The paths that `status` shows active and that are held failed.
pub fn to_refail(status: &MultipathStatus, held: &BTreeMap<DevNum, Hold>) -> Vec<(DevNum, Hold)> {
    status
        .paths()
        .filter(|p| p.state == PathState::Active)
        .filter_map(|p| held.get(&p.dev).map(|h| (p.dev, *h)))
        .collect()
}

/// What a sync did.
#[derive(Debug)]
pub struct Synced {
    /// Paths failed again, and why.
    pub refailed: Vec<(DevNum, Hold)>,
    /// Messages the kernel refused (the status shows the result).
    pub errors: Vec<String>,
    /// The status read back afterwards.
    pub status: MultipathStatus,
}

/// Fails every held path the kernel shows active, then reads the status.
pub fn sync(ops: &dyn MapOps, map: &str, held: &BTreeMap<DevNum, Hold>) -> Result<Synced, DmError> {
    let before = ops.status(map)?;
    let mut refailed = vec![];
    let mut errors = vec![];
    for (dev, why) in to_refail(&before, held) {
        match ops.message(map, &Message::FailPath(dev)) {
            Ok(()) => refailed.push((dev, why)),
            Err(e) => errors.push(format!("fail_path {dev}: {e}")),
        }
    }
    // Read again only when a message was sent: otherwise nothing of ours
    // moved since `before`.
    let status = if refailed.is_empty() && errors.is_empty() {
        before
    } else {
        ops.status(map)?
    };
    Ok(Synced {
        refailed,
        errors,
        status,
    })
}

/// A reload followed by its sync.
#[derive(Debug)]
pub struct Reloaded {
    pub timing: ReloadTiming,
    /// The table as the kernel holds it now.
    pub table: MultipathTable,
    pub synced: Synced,
}

/// Loads `table` into `map`, then syncs the path states. A refused table
/// leaves the old one and its path states as they were.
pub fn reload(
    ops: &dyn MapOps,
    map: &str,
    table: &MultipathTable,
    held: &BTreeMap<DevNum, Hold>,
) -> Result<Reloaded, DmError> {
    let timing = ops.reload(map, table)?;
    let synced = sync(ops, map, held)?;
    Ok(Reloaded {
        timing,
        table: ops.table(map)?,
        synced,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::ops::fake::FakeDm;

    use crate::policy::testing::{T3 as T, d};

    #[test]
    fn held_paths_stay_failed_across_a_reload() {
        let dm = FakeDm::with_table(T);
        dm.fail(d(16)); // by the operator
        dm.fail(d(32)); // by the checker
        let held = BTreeMap::from([(d(16), Hold::Operator), (d(32), Hold::Checker)]);
        // A path leaves: the new table starts with every path active.
        let mut t: MultipathTable = T.parse().unwrap();
        t.remove_path(d(0)).unwrap();
        let r = reload(&dm, "mpatha", &t, &held).unwrap();
        assert!(
            dm.is_failed(d(16)) && dm.is_failed(d(32)),
            "{:?}",
            dm.calls()
        );
        assert_eq!(
            r.synced.refailed,
            vec![(d(16), Hold::Operator), (d(32), Hold::Checker)]
        );
        assert!(r.synced.errors.is_empty());
        assert_eq!(
            crate::policy::ops::failed_in(&r.synced.status),
            vec![d(16), d(32)]
        );
        // The messages come after the reload, never before it.
        let calls = dm.calls();
        assert!(calls[0].starts_with("reload"), "{calls:?}");
        assert_eq!(
            calls[1..],
            [
                "message mpatha fail_path 8:16",
                "message mpatha fail_path 8:32"
            ]
        );
    }

    #[test]
    fn only_held_paths_are_failed() {
        let dm = FakeDm::with_table(T);
        let held = BTreeMap::from([(d(16), Hold::Kernel)]);
        let s = sync(&dm, "mpatha", &held).unwrap();
        assert_eq!(s.refailed, vec![(d(16), Hold::Kernel)]);
        assert!(!dm.is_failed(d(0)) && !dm.is_failed(d(32)));
        // Already failed: nothing to send, and the status read before
        // stands for after.
        let s = sync(&dm, "mpatha", &held).unwrap();
        assert!(s.refailed.is_empty());
        assert_eq!(crate::policy::ops::failed_in(&s.status), vec![d(16)]);
        assert_eq!(dm.calls().len(), 1);
    }

    #[test]
    fn a_held_path_no_longer_in_the_table_is_ignored() {
        let dm = FakeDm::with_table(T);
        let held = BTreeMap::from([(d(48), Hold::Operator)]);
        let s = sync(&dm, "mpatha", &held).unwrap();
        assert!(s.refailed.is_empty() && s.errors.is_empty());
        assert!(dm.calls().is_empty());
    }

    #[test]
    fn a_refused_table_changes_no_path_state() {
        let dm = FakeDm::with_table(T);
        dm.fail(d(16));
        *dm.refuse_reload.borrow_mut() = Some(libc::EINVAL);
        let held = BTreeMap::from([(d(16), Hold::Operator)]);
        let t: MultipathTable = "0 2097152 multipath 0 0 1 1 round-robin 0 3 1 8:0 1 8:16 1 8:32 1"
            .parse()
            .unwrap();
        assert!(reload(&dm, "mpatha", &t, &held).is_err());
        assert!(dm.is_failed(d(16)));
        assert_eq!(dm.calls().len(), 1, "no message after a refused load");
    }
}
