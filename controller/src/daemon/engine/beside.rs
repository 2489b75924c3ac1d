//! Beside multipathd (`beside.apply`): a map's table advice, once it has
//! held ([`advice::Applier`]), goes into pathpilot's file under
//! multipath-tools' conf.d and multipathd is asked to `reconfigure`; a
//! few seconds later the log names the maps whose table it changed.
use std::{collections::HashMap, path::Path, time::Instant};

use super::{Engine, maps::tables_changed, say, status::map_report};
use crate::{
    dm::multipathd::Multipathd,
    policy::advice::{self, Advice, Applier},
    tuner::Mode,
};

/// The maps' tables before a reconfigure, to tell which ones it changed.
#[derive(Debug)]
struct Reconfigured {
    map: String,
    tables: HashMap<String, String>,
    at: Instant,
}

/// What applying advice through multipathd keeps between windows.
#[derive(Debug, Default)]
pub(super) struct BesideApply {
    applier: Applier,
    pending: Option<Reconfigured>,
}

impl Engine {
    /// Each window, for map `mi` when it is multipathd's and
    /// `beside.apply` is on: its advice, applied once it has held.
    pub(super) fn apply_advice_if_due(&mut self, mi: usize) {
        self.report_reconfigure();
        let m = &self.maps[mi];
        if !m.beside
            || !self.cfg.beside.apply
            || m.tuner.as_ref().is_none_or(|t| t.mode() != Mode::Tune)
        {
            return;
        }
        let pinned = self.state.operator(&m.name).pinned_unix;
        let a = advice::advise(&map_report(m, &self.checkers, self.started.unix, pinned));
        if self.beside_apply.applier.window(&a) {
            self.apply_advice(mi, &a);
        }
    }

    fn apply_advice(&mut self, mi: usize, a: &Advice) {
        let name = self.maps[mi].name.clone();
        let Some(entry) = a.multipath_conf() else {
            return;
        };
        self.state.beside_entries.insert(a.wwid.clone(), entry);
        self.save_state();
        let file = Path::new(advice::CONF_D_FILE);
        let text = advice::conf_d_file(&self.state.beside_entries);
        let written = file
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|_| {
                let tmp = file.with_extension("tmp");
                std::fs::write(&tmp, text)?;
                std::fs::rename(&tmp, file)
            });
        if let Err(e) = written {
            say!("{name}: cannot write {}: {e}", file.display());
            return;
        }
        let tables = self.map_tables();
        match Multipathd::connect().and_then(|mut c| c.act("reconfigure")) {
            Ok(()) => {
                say!(
                    "{name}: advice applied through multipathd: {} in {}, then `multipathd \
                     reconfigure` (multipathd reloads only the maps whose table changes; its \
                     per-map `reload map` would not read the new entry)",
                    a.key(),
                    file.display()
                );
                self.beside_apply.pending = Some(Reconfigured {
                    map: name,
                    tables,
                    at: Instant::now(),
                });
            }
            Err(e) => say!(
                "{name}: advice written to {}, not applied: {e}",
                file.display()
            ),
        }
    }

    /// A few seconds after a reconfigure: the maps whose table multipathd
    /// changed (a reload of the same table leaves no trace to compare).
    fn report_reconfigure(&mut self) {
        let due = self
            .beside_apply
            .pending
            .as_ref()
            .is_some_and(|p| p.at.elapsed().as_secs_f64() >= 3.0);
        if !due {
            return;
        }
        let Some(p) = self.beside_apply.pending.take() else {
            return;
        };
        let now = self.map_tables();
        let changed = tables_changed(&p.tables, &now);
        let table = self
            .dm
            .multipath_table(&p.map)
            .map(|t| t.to_string())
            .unwrap_or_default();
        say!(
            "{}: after `multipathd reconfigure`: table {table}; tables changed: {} of {} maps",
            p.map,
            if changed.is_empty() {
                "none".to_string()
            } else {
                changed.join(", ")
            },
            now.len()
        );
    }
}
