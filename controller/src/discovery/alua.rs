//! ALUA as the host sees it: each path's access state and preferred bit
//! (scsi_dh_alua's sysfs attributes, where the handler is attached) and its
//! target port group (VPD page 0x83), and the priority multipath-tools'
//! `alua` prioritizer gives it.
use std::{fs, path::Path};

use serde::Serialize;

/// An asymmetric access state (SPC-4), as `device/access_state` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AccessState {
    Optimized,
    NonOptimized,
    LbaDependent,
    Standby,
    Unavailable,
    Offline,
    Transitioning,
}

impl AccessState {
    pub fn parse(s: &str) -> Option<AccessState> {
        Some(match s.trim() {
            "active/optimized" => AccessState::Optimized,
            "active/non-optimized" => AccessState::NonOptimized,
            "lba-dependent" | "lba dependent" => AccessState::LbaDependent,
            "standby" => AccessState::Standby,
            "unavailable" => AccessState::Unavailable,
            "offline" => AccessState::Offline,
            "transitioning" => AccessState::Transitioning,
            _ => return None,
        })
    }

    /// Whether the kernel fails I/O in this state before it reaches the
    /// array.
    pub fn refuses_io(self) -> bool {
        matches!(
            self,
            AccessState::Standby | AccessState::Unavailable | AccessState::Offline
        )
    }

    pub fn name(self) -> &'static str {
        match self {
            AccessState::Optimized => "active/optimized",
            AccessState::NonOptimized => "active/non-optimized",
            AccessState::LbaDependent => "lba-dependent",
            AccessState::Standby => "standby",
            AccessState::Unavailable => "unavailable",
            AccessState::Offline => "offline",
            AccessState::Transitioning => "transitioning",
        }
    }
}

/// What a path says of itself on an ALUA array.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Alua {
    pub state: AccessState,
    /// The array prefers this port (the PREF bit).
    pub preferred: bool,
    /// Its target port group, when VPD page 0x83 names it.
    pub group: Option<u16>,
}

impl Alua {
    /// Reads a SCSI disk's ALUA state (`/sys/class/block/<name>`); `None`
    /// where the alua handler is not attached (not an ALUA array).
    pub fn read(sys: &Path) -> Option<Alua> {
        let dev = sys.join("device");
        let attr = |f: &str| fs::read_to_string(dev.join(f)).ok();
        Some(Alua {
            state: Alua::state(sys)?,
            preferred: attr("preferred_path").is_some_and(|v| v.trim() == "1"),
            group: fs::read(dev.join("vpd_pg83"))
                .ok()
                .and_then(|p| super::vpd::target_port_group(&p)),
        })
    }

    /// Only the access state (two small reads, no VPD page): what the
    /// checker and the per-interval look at ALUA maps need.
    pub fn state(sys: &Path) -> Option<AccessState> {
        let dev = sys.join("device");
        Alua::state_from(&mut |f| fs::read_to_string(dev.join(f)).ok())
    }

    /// [`Alua::state`] with the device's attributes (`dh_state`,
    /// `access_state`) read by `attr` (a checker keeps them open).
    pub fn state_from(attr: &mut dyn FnMut(&'static str) -> Option<String>) -> Option<AccessState> {
        if attr("dh_state")?.trim() != "alua" {
            return None;
        }
        AccessState::parse(&attr("access_state")?)
    }

    /// Whether the kernel fails I/O on the path before it reaches the array.
    pub fn refuses_io(&self) -> bool {
        self.state.refuses_io()
    }

    /// Rescans the SCSI device at `sys` (`/sys/class/block/<name>`):
    /// scsi_dh_alua asks the array for the port states again (REPORT
    /// TARGET PORT GROUPS) and sd reads the capacity again. Returns
    /// whether the kernel took the request.
    pub fn rescan(sys: &Path) -> bool {
        fs::write(sys.join("device/rescan"), "1").is_ok()
    }

    /// The priority multipath-tools' `alua` prioritizer gives the path:
    /// optimized 50, non-optimized 10, LBA-dependent 5, standby 1, else 0;
    /// the preferred bit adds 80 to a port that is not optimized.
    pub fn prio(&self) -> u32 {
        let p = match self.state {
            AccessState::Optimized => 50,
            AccessState::NonOptimized => 10,
            AccessState::LbaDependent => 5,
            AccessState::Standby => 1,
            _ => 0,
        };
        if self.preferred && self.state != AccessState::Optimized {
            p + 80
        } else {
            p
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priorities_as_multipath_tools_gives_them() {
        let a = |state, preferred| Alua {
            state,
            preferred,
            group: None,
        };
        assert_eq!(a(AccessState::Optimized, false).prio(), 50);
        assert_eq!(a(AccessState::Optimized, true).prio(), 50);
        assert_eq!(a(AccessState::NonOptimized, false).prio(), 10);
        assert_eq!(a(AccessState::NonOptimized, true).prio(), 90);
        assert_eq!(a(AccessState::Standby, false).prio(), 1);
        assert_eq!(a(AccessState::Unavailable, false).prio(), 0);
        assert_eq!(a(AccessState::Transitioning, false).prio(), 0);
        assert_eq!(
            AccessState::parse("active/non-optimized\n"),
            Some(AccessState::NonOptimized)
        );
        assert_eq!(AccessState::parse("bogus"), None);
    }
}
