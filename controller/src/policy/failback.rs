//! Failback. dm-mpath leaves a path group only when it must (its paths
//! fail) and never returns to a better one by itself: after the optimized
//! port of an ALUA array comes back, I/O would stay on the non-optimized
//! one. multipathd sends `switch_group` when a path of a higher group is
//! usable again ("failback immediate", its setting for ALUA arrays); so
//! does the daemon, for maps whose groups are ordered by priority.
//!
//! A port that comes back must first be seen to come back: the rules for
//! the checks of an ALUA path ([`rescan_port`]) and for timing its return
//! ([`port_returned`], [`serving`]) are here too.
use crate::{
    blockdev::DevNum,
    discovery::alua::AccessState,
    mpath::{GroupState, MultipathStatus, PathState},
};

/// The group to switch to (1-based), when the first group has a usable
/// path but another group is in use.
pub fn failback(st: &MultipathStatus) -> Option<usize> {
    let first = st.groups.first()?;
    let usable = first.paths.iter().any(|p| p.state == PathState::Active);
    // A disabled group is one the handler refused to activate: not ours
    // to force.
    let idle = first.state == GroupState::Enabled && st.next_pg != 1;
    (st.groups.len() > 1 && usable && idle).then_some(1)
}

/// Whether a path check rescans the SCSI device (`device/rescan`) before
/// it judges the path, given the port's ALUA state as the kernel holds it
/// and whether a read of the device found it empty (0 bytes at offset 0).
/// - A port that refuses I/O: the kernel fails every read before it
///   reaches the array, so no unit attention tells it the port came back;
///   a rescan asks the array (REPORT TARGET PORT GROUPS).
/// - A port that takes I/O on a device that reads as empty: the capacity
///   was read while the port refused I/O (a rescan then finds 0 sectors),
///   and the kernel reads it again only on a rescan. The state can turn
///   usable without one (the handler's own RTPG, at a table load or a path
///   group's activation), which leaves the path failing its checks until
///   a rescan reads the capacity again.
pub fn rescan_port(state: AccessState, read_empty: bool) -> bool {
    state.refuses_io() || read_empty
}

/// Whether a check's ALUA state is a port's return: the check before it
/// read a state that refuses I/O, this one a state that takes it.
pub fn port_returned(before: Option<AccessState>, now: Option<AccessState>) -> bool {
    matches!((before, now), (Some(b), Some(n)) if b.refuses_io() && !n.refuses_io())
}

/// Whether path `dev` carries the map's I/O: active, in the group the
/// kernel uses.
pub fn serving(st: &MultipathStatus, dev: DevNum) -> bool {
    st.groups.iter().any(|g| {
        g.state == GroupState::Active
            && g.paths
                .iter()
                .any(|p| p.dev == dev && p.state == PathState::Active)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::testing::d;

    fn st(s: &str) -> MultipathStatus {
        s.parse().unwrap()
    }

    #[test]
    fn back_to_the_first_group_once_its_path_is_usable() {
        // The kernel on group 2, group 1's path active again: switch back.
        let s = st("0 524288 multipath 2 0 1 0 2 2 E 0 1 2 8:16 A 1 0 1 A 0 1 2 8:32 A 0 0 1");
        assert_eq!(failback(&s), Some(1));
        // Its path still failed: stay.
        let s = st("0 524288 multipath 2 0 1 0 2 2 E 0 1 2 8:16 F 1 0 1 A 0 1 2 8:32 A 0 0 1");
        assert_eq!(failback(&s), None);
        // Already on group 1, or about to be.
        let s = st("0 524288 multipath 2 0 1 0 2 1 A 0 1 2 8:16 A 1 0 1 E 0 1 2 8:32 A 0 0 1");
        assert_eq!(failback(&s), None);
        let s = st("0 524288 multipath 2 0 1 0 2 1 E 0 1 2 8:16 A 1 0 1 A 0 1 2 8:32 A 0 0 1");
        assert_eq!(failback(&s), None);
        // Disabled by the handler: left alone.
        let s = st("0 524288 multipath 2 0 1 0 2 2 D 0 1 2 8:16 A 1 0 1 A 0 1 2 8:32 A 0 0 1");
        assert_eq!(failback(&s), None);
        // One group: nothing to fail back to.
        let s = st("0 524288 multipath 2 0 1 0 1 1 A 0 1 2 8:16 A 1 0 1");
        assert_eq!(failback(&s), None);
    }

    #[test]
    fn a_port_is_rescanned_while_it_refuses_io_or_reads_as_empty() {
        use AccessState::*;
        for s in [Standby, Unavailable, Offline] {
            assert!(
                rescan_port(s, false),
                "{s:?}: the kernel's state may be stale"
            );
        }
        for s in [Optimized, NonOptimized, LbaDependent, Transitioning] {
            assert!(!rescan_port(s, false), "{s:?} and a device that reads");
            // The port came back while the device's capacity still reads
            // 0: rescanned, so the check judges the device as it is.
            assert!(rescan_port(s, true), "{s:?} and an empty device");
        }
    }

    #[test]
    fn a_port_returns_when_a_state_that_refused_io_takes_it_again() {
        use AccessState::*;
        assert!(port_returned(Some(Unavailable), Some(Optimized)));
        assert!(port_returned(Some(Standby), Some(NonOptimized)));
        assert!(!port_returned(Some(Optimized), Some(Optimized)));
        assert!(
            !port_returned(Some(NonOptimized), Some(Optimized)),
            "moved, not returned"
        );
        assert!(!port_returned(Some(Optimized), Some(Unavailable)));
        assert!(
            !port_returned(None, Some(Optimized)),
            "a first look is no return"
        );
        assert!(!port_returned(Some(Unavailable), None));
    }

    #[test]
    fn a_path_serves_when_active_in_the_group_in_use() {
        // Group 2 in use; 8:16 in group 1 active but not serving.
        let s = st("0 524288 multipath 2 0 1 0 2 2 E 0 1 2 8:16 A 1 0 1 A 0 1 2 8:32 A 0 0 1");
        assert!(!serving(&s, d(16)));
        assert!(serving(&s, d(32)));
        // Back on group 1 with 8:16 active.
        let s = st("0 524288 multipath 2 0 1 0 2 1 A 0 1 2 8:16 A 1 0 1 E 0 1 2 8:32 A 0 0 1");
        assert!(serving(&s, d(16)));
        assert!(!serving(&s, d(32)));
        // In the group in use but failed.
        let s = st("0 524288 multipath 2 0 1 0 2 1 A 0 1 2 8:16 F 1 0 1 E 0 1 2 8:32 A 0 0 1");
        assert!(!serving(&s, d(16)));
    }
}
