//! [`PendingSets`]: the pending index of each function, the one used last found without
//! hashing the function's name.

use crate::{state::TimeKey, time_index::TimeIndex};
use concepts::{FunctionFqn, kernel::FastHash};
use std::collections::HashMap;

/// The index of the `PendingAt` executions of each function that has any. Writes come in
/// runs of one function (a batch's creations, a lock's grants, an executor's outcomes), so
/// the set used last is tried first, by a comparison of the name that its clones decide
/// from their pointers; only another function's is looked up by the name's hash.
#[derive(Debug, Default, Clone)]
pub(crate) struct PendingSets {
    /// In no order; none empty.
    sets: Vec<(FunctionFqn, TimeIndex<TimeKey>)>,
    /// Where the set of each function is in `sets`.
    positions: HashMap<FunctionFqn, usize, FastHash>,
    /// The position of the set used last (past the end when it was removed).
    last: usize,
}

/// Equal when each function has the same keys, wherever its set is.
impl PartialEq for PendingSets {
    fn eq(&self, other: &Self) -> bool {
        self.sets.len() == other.sets.len()
            && (self.sets.iter()).all(|(ffqn, set)| other.get(ffqn) == Some(set))
    }
}

impl Eq for PendingSets {}

impl PendingSets {
    /// The set of `ffqn`, when it has one.
    pub(crate) fn get(&self, ffqn: &FunctionFqn) -> Option<&TimeIndex<TimeKey>> {
        let at = *self.positions.get(ffqn)?;
        self.sets.get(at).map(|(_, set)| set)
    }

    /// Every function's set.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&FunctionFqn, &TimeIndex<TimeKey>)> {
        self.sets.iter().map(|(ffqn, set)| (ffqn, set))
    }

    /// Adds `key` to the set of `ffqn`.
    pub(crate) fn insert(&mut self, ffqn: &FunctionFqn, key: TimeKey) {
        let at = self.position(ffqn).unwrap_or_else(|| {
            let at = self.sets.len();
            self.sets.push((ffqn.clone(), TimeIndex::default()));
            self.positions.insert(ffqn.clone(), at);
            at
        });
        self.last = at;
        if let Some((_, set)) = self.sets.get_mut(at) {
            set.insert(key);
        }
    }

    /// Removes the key `key` builds (and `is` tells, see [`TimeIndex::remove_with`]) from the
    /// set of `ffqn`, and the set once it is empty.
    pub(crate) fn remove(
        &mut self,
        ffqn: &FunctionFqn,
        is: impl FnOnce(&TimeKey) -> bool,
        key: impl FnOnce() -> TimeKey,
    ) {
        let Some(at) = self.position(ffqn) else {
            return;
        };
        self.last = at;
        let Some((_, set)) = self.sets.get_mut(at) else {
            return;
        };
        set.remove_with(is, key);
        if !set.is_empty() {
            return;
        }
        self.sets.swap_remove(at);
        self.positions.remove(ffqn);
        // The last set took the removed one's place.
        if let Some((moved, _)) = self.sets.get(at)
            && let Some(position) = self.positions.get_mut(moved)
        {
            *position = at;
        }
    }

    /// Where the set of `ffqn` is in `sets`.
    fn position(&self, ffqn: &FunctionFqn) -> Option<usize> {
        if (self.sets.get(self.last)).is_some_and(|(last, _)| last == ffqn) {
            return Some(self.last);
        }
        self.positions.get(ffqn).copied()
    }
}

#[cfg(test)]
mod tests;
