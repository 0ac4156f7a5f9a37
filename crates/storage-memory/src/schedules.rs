//! The stored schedules: their rows by name, the index of when each is next due, and their
//! recorded ticks.

use chrono::{DateTime, Utc};
use concepts::{
    kernel::{Keys, ScheduleWrite, Snapshot},
    schedule::{ScheduleName, ScheduleRow, Tick},
};
use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    ops::Bound,
};

#[derive(Debug, Default)]
pub(crate) struct Schedules {
    rows: BTreeMap<ScheduleName, ScheduleRow>,
    /// `(next_due_at, name)` of every schedule that has one.
    due: BTreeSet<(DateTime<Utc>, ScheduleName)>,
    /// Each schedule's ticks by sequence number.
    ticks: HashMap<ScheduleName, BTreeMap<u64, Tick>>,
}

impl Schedules {
    /// Loads the schedules `keys` name, and the due ones.
    pub(crate) fn load(&self, keys: &Keys, snapshot: &mut Snapshot) {
        for name in &keys.schedules {
            if let Some(row) = self.rows.get(name) {
                snapshot.add_schedule(row.clone());
            }
        }
        if let Some(query) = &keys.due_schedules {
            let due = self.due.iter().take_while(|(at, _)| *at <= query.at);
            for (_, name) in due.take(query.limit) {
                snapshot.add_due_schedule(self.rows[name].clone());
            }
        }
    }

    /// Stores what a plan changes about schedules.
    pub(crate) fn apply(&mut self, writes: impl IntoIterator<Item = ScheduleWrite>) {
        for write in writes {
            if let Some(old) = self.rows.get(&write.name)
                && let Some(at) = old.next_due_at
            {
                self.due.remove(&(at, write.name.clone()));
            }
            let Some(row) = write.row else {
                self.rows.remove(&write.name);
                self.ticks.remove(&write.name);
                continue;
            };
            if let Some(at) = row.next_due_at {
                self.due.insert((at, write.name.clone()));
            }
            let ticks = self.ticks.entry(write.name.clone()).or_default();
            ticks.extend(write.ticks.into_iter().map(|tick| (tick.seq, tick)));
            if let Some(before) = write.forget_ticks_before {
                *ticks = ticks.split_off(&before);
            }
            self.rows.insert(write.name, row);
        }
    }

    /// The schedules from `from` on in name order, at most `limit`.
    pub(crate) fn list(&self, from: Option<&ScheduleName>, limit: usize) -> Vec<ScheduleRow> {
        let from = from.map_or(Bound::Unbounded, Bound::Included);
        let rows = self.rows.range::<ScheduleName, _>((from, Bound::Unbounded));
        rows.take(limit).map(|(_, row)| row.clone()).collect()
    }

    /// The last `limit` ticks of `name`, newest first.
    pub(crate) fn ticks(&self, name: &ScheduleName, limit: usize) -> Vec<Tick> {
        let ticks = self.ticks.get(name).into_iter().flat_map(BTreeMap::values);
        ticks.rev().take(limit).cloned().collect()
    }
}
