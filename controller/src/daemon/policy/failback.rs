//! Failback. dm-mpath leaves a path group only when it must (its paths
//! fail) and never returns to a better one by itself: after the optimized
//! port of an ALUA array comes back, I/O would stay on the non-optimized
//! one. multipathd sends `switch_group` when a path of a higher group is
//! usable again ("failback immediate", its setting for ALUA arrays); so
//! does the daemon, for maps whose groups are ordered by priority.
use crate::mpath::{GroupState, MultipathStatus, PathState};

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
