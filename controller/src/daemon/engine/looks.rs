//! Changes made by someone else: a map's live table and knobs against
//! what the daemon left, looked at on the map's schedule and under its
//! lock before each change. A change found stops tuning until an operator
//! resumes it (the rules are [`crate::policy::outside`]'s).
use std::time::Instant;

use anyhow::Result;

use super::{Engine, say};
use crate::{
    mpath::MultipathTable,
    policy::{outside, schedule::Reads},
    tuner::{Settings, Tuner},
};

impl Engine {
    /// A look for changes made outside, when map `mi`'s is due: the live
    /// table and knobs, or the knobs alone (the table the daemon left taken
    /// as the live one), as its look schedule says.
    pub(super) fn look_if_due(&mut self, mi: usize, t: f64) {
        let now = Instant::now();
        let judging = self.maps[mi].tuner.as_ref().is_some_and(Tuner::may_keep);
        let Some(reads) = self.maps[mi].look.due(now, judging) else {
            return;
        };
        self.timed("knobs", |e| {
            if reads == Reads::TableAndKnobs {
                e.check_knobs(mi, t);
                e.maps[mi].look.looked(now);
            } else {
                e.check_queue_knobs(mi, t);
            }
        });
    }

    /// The queue knobs and table knobs of a managed map as the kernel holds
    /// them, against what the tuner last read back: a difference is a
    /// change someone else made (the daemon reads back after each of its
    /// own), and tuning stops until an operator resumes it.
    pub(super) fn check_knobs(&mut self, mi: usize, t: f64) {
        // A table loaded behind the daemon's back moves table knobs (and
        // resets the queue limits): said as the table change it is.
        let Ok(table) = self.dm.multipath_table(&self.maps[mi].name) else {
            return;
        };
        if self.maps[mi].expected.as_ref().is_some_and(|e| *e != table) {
            self.check_table(mi, table, t);
            return;
        }
        self.compare_knobs(mi, &table, t);
    }

    /// [`Self::check_knobs`] with the table the daemon last left taken as
    /// the live one: for a look while no swap was announced (a table swap
    /// sends a uevent; a knob written in sysfs sends nothing).
    pub(super) fn check_queue_knobs(&mut self, mi: usize, t: f64) {
        let Some(table) = self.maps[mi].expected.take() else {
            return self.check_knobs(mi, t);
        };
        self.compare_knobs(mi, &table, t);
        self.maps[mi].expected = Some(table);
    }

    /// The map's knobs as the kernel holds them with `table` live, against
    /// what the tuner last read back.
    pub(super) fn compare_knobs(&mut self, mi: usize, table: &MultipathTable, t: f64) {
        if let Ok(live) = self.settings_of(mi, table) {
            self.compare_live(mi, &live, t);
        }
    }

    /// The map's knobs as read (`live`) against what the tuner last read
    /// back: a difference is reported to the tuner, which stops tuning.
    pub(super) fn compare_live(&mut self, mi: usize, live: &Settings, t: f64) {
        let m = &mut self.maps[mi];
        let Some(tuner) = m.tuner.as_mut() else {
            return;
        };
        let mut moved = outside::knob_change(tuner.settings(), live);
        // Beside multipathd the table's knobs are its to set: followed.
        if m.beside && moved.iter().any(|k| !k.is_queue_knob()) {
            say!(
                "{}: multipathd's table moved ({}): tuning follows",
                m.name,
                moved
                    .iter()
                    .filter(|k| !k.is_queue_knob())
                    .map(|k| k.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            moved.retain(|k| k.is_queue_knob());
            if moved.is_empty() {
                tuner.reset_to(live.clone());
                return;
            }
        }
        if moved.is_empty() {
            return;
        }
        let what: Vec<String> = moved
            .iter()
            .map(|k| {
                format!(
                    "{} {} -> {}",
                    k.name(),
                    tuner.settings().show(*k),
                    live.show(*k)
                )
            })
            .collect();
        let why = format!("changed outside pathpilot: {}", what.join(", "));
        say!("{}: {why}", m.name);
        tuner.outside_change(t, &why, live.clone());
    }

    /// Never overwrite someone else's change: `table` (read under the
    /// map's lock) and the knobs, against what the daemon left. A change
    /// found stops tuning, and the tuner withdraws what it proposed: None.
    /// Otherwise the live table and settings. The look under the lock is
    /// the look before the change: a separate look just before taking the
    /// lock read the same table and knobs once more.
    pub(super) fn live_unless_outside(
        &mut self,
        mi: usize,
        mut table: MultipathTable,
        t: f64,
    ) -> Result<Option<(MultipathTable, Settings)>> {
        let held = |e: &Self| {
            e.maps[mi]
                .tuner
                .as_ref()
                .is_some_and(|tu| tu.held().is_some())
        };
        let before = held(self);
        if self.maps[mi].expected.as_ref().is_some_and(|e| *e != table) {
            self.check_table(mi, table, t);
            if !before && held(self) {
                return Ok(None);
            }
            // Only a form the daemon follows (see `check_table`): as it is now.
            table = self.dm.multipath_table(&self.maps[mi].name)?;
        }
        let live = self.settings_of(mi, &table)?;
        self.compare_live(mi, &live, t);
        // A full look: the periodic one starts again from here.
        self.maps[mi].look.looked(Instant::now());
        Ok((before || !held(self)).then_some((table, live)))
    }
}
