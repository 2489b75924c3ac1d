//! The device-mapper operations the daemon's policies carry out, behind a
//! narrow trait: the daemon runs them against the kernel ([`Dm`]), the
//! policies' tests against [`fake::FakeDm`], a model of what the kernel does
//! with a table and a message (a new table starts with every path active;
//! `fail_path` and `reinstate_path` change one path's state).
use crate::{
    blockdev::DevNum,
    dm::{Dm, DmError, Message, ReloadTiming},
    mpath::{MultipathStatus, MultipathTable},
};

pub trait MapOps {
    fn table(&self, map: &str) -> Result<MultipathTable, DmError>;
    fn status(&self, map: &str) -> Result<MultipathStatus, DmError>;
    fn reload(&self, map: &str, table: &MultipathTable) -> Result<ReloadTiming, DmError>;
    fn message(&self, map: &str, msg: &Message) -> Result<(), DmError>;
}

impl MapOps for Dm {
    fn table(&self, map: &str) -> Result<MultipathTable, DmError> {
        self.multipath_table(map)
    }

    fn status(&self, map: &str) -> Result<MultipathStatus, DmError> {
        self.multipath_status(map)
    }

    fn reload(&self, map: &str, table: &MultipathTable) -> Result<ReloadTiming, DmError> {
        Dm::reload(self, map, table)
    }

    fn message(&self, map: &str, msg: &Message) -> Result<(), DmError> {
        Dm::message(self, map, msg)
    }
}

/// The paths of a status the kernel holds failed.
pub fn failed_in(status: &MultipathStatus) -> Vec<DevNum> {
    status
        .paths()
        .filter(|p| p.state == crate::mpath::PathState::Failed)
        .map(|p| p.dev)
        .collect()
}

#[cfg(test)]
pub mod fake {
    //! A model of one multipath map in the kernel, enough for the
    //! policies: tables, path states, messages, and a log of every call.
    use std::{cell::RefCell, collections::BTreeSet, time::Duration};

    use super::*;

    #[derive(Default)]
    pub struct FakeDm {
        pub table: RefCell<Option<MultipathTable>>,
        pub failed: RefCell<BTreeSet<DevNum>>,
        pub calls: RefCell<Vec<String>>,
        /// Refuse the next reload with this errno.
        pub refuse_reload: RefCell<Option<i32>>,
    }

    impl FakeDm {
        pub fn with_table(line: &str) -> Self {
            let f = FakeDm::default();
            *f.table.borrow_mut() = Some(line.parse().expect("a valid table"));
            f
        }

        pub fn fail(&self, d: DevNum) {
            self.failed.borrow_mut().insert(d);
        }

        pub fn is_failed(&self, d: DevNum) -> bool {
            self.failed.borrow().contains(&d)
        }

        pub fn calls(&self) -> Vec<String> {
            self.calls.borrow().clone()
        }
    }

    fn kernel(errno: i32) -> DmError {
        DmError::Kernel {
            op: crate::dm::Op::Load,
            map: "mpatha".into(),
            errno: crate::dm::Errno(errno),
            hint: None,
        }
    }

    impl MapOps for FakeDm {
        fn table(&self, _map: &str) -> Result<MultipathTable, DmError> {
            self.table.borrow().clone().ok_or(kernel(libc::ENXIO))
        }

        fn status(&self, _map: &str) -> Result<MultipathStatus, DmError> {
            let t = self.table(_map)?;
            let failed = self.failed.borrow();
            let mut line = format!(
                "{} {} multipath 2 0 0 0 {} 1",
                t.start,
                t.length,
                t.groups.len()
            );
            for (i, g) in t.groups.iter().enumerate() {
                line.push_str(&format!(
                    " {} 0 {} 0",
                    if i == 0 { 'A' } else { 'E' },
                    g.paths.len()
                ));
                for p in &g.paths {
                    let st = if failed.contains(&p.dev) { 'F' } else { 'A' };
                    line.push_str(&format!(" {} {st} 0", p.dev));
                }
            }
            Ok(MultipathStatus::parse_line(&line).expect("a valid status"))
        }

        fn reload(&self, map: &str, table: &MultipathTable) -> Result<ReloadTiming, DmError> {
            self.calls
                .borrow_mut()
                .push(format!("reload {map} {}", table.render_params()));
            if let Some(e) = self.refuse_reload.borrow_mut().take() {
                return Err(kernel(e));
            }
            *self.table.borrow_mut() = Some(table.clone());
            // A new table starts with every path active.
            self.failed.borrow_mut().clear();
            let z = Duration::ZERO;
            Ok(ReloadTiming { load: z, stall: z })
        }

        fn message(&self, map: &str, msg: &Message) -> Result<(), DmError> {
            self.calls.borrow_mut().push(format!("message {map} {msg}"));
            let in_table = |d: DevNum| {
                self.table
                    .borrow()
                    .as_ref()
                    .is_some_and(|t| t.find_path(d).is_some())
            };
            match msg {
                Message::FailPath(d) if in_table(*d) => {
                    self.failed.borrow_mut().insert(*d);
                }
                Message::ReinstatePath(d) if in_table(*d) => {
                    self.failed.borrow_mut().remove(d);
                }
                Message::FailPath(_) | Message::ReinstatePath(_) => {
                    return Err(kernel(libc::EINVAL));
                }
                _ => {}
            }
            Ok(())
        }
    }
}
