//! How a faulty step's action is drawn from the seed: which task to poll, how far the clock
//! moves, which execution a client submits, cancels (mostly a tree with children in flight)
//! or whose promise it completes (sometimes with another value than the one meant), which node
//! or loop is killed or restarted.

use super::{NODES, World};
use crate::{
    components::{LEASE, Workload},
    faults::FaultKind,
    tape::Action,
};
use concepts::ExecutionId;
use std::{collections::BTreeSet, time::Duration};

impl World {
    /// Draws the next faulty step's action.
    pub(super) fn draw_action(&mut self) -> Action {
        let faults = self.config.faults;
        let unless_off = |kind, action| {
            if faults.contains(kind) {
                action
            } else {
                Action::Idle
            }
        };
        match self.rng.below(1000) {
            0..640 => {
                if self.tasks.is_empty() {
                    return Action::Idle;
                }
                let idx = self.rng.index(self.tasks.len());
                Action::Poll(self.tasks[idx].label.clone())
            }
            640..800 => Action::Advance(Duration::from_millis(1 + self.rng.below(300))),
            800..860 => (1..=self.config.executions)
                .find(|k| !self.submitted.contains(k))
                .map_or(Action::Idle, Action::Submit),
            860..875 => unless_off(FaultKind::NodeKilled, Action::KillNode(self.node())),
            875..885 => unless_off(FaultKind::WatcherKilled, Action::KillWatcher(self.node())),
            885..895 => unless_off(FaultKind::PrunerKilled, Action::KillPruner(self.node())),
            895..925 => Action::Restart(self.node()),
            925..945 => {
                let by = LEASE * (1 + u32::try_from(self.rng.below(3)).unwrap_or(0));
                unless_off(FaultKind::ClockJump, Action::JumpClock(by))
            }
            945..965 => self.cancel_target().map_or(Action::Idle, Action::Cancel),
            _ => self.completion(),
        }
    }

    fn node(&mut self) -> usize {
        self.rng.index(NODES)
    }

    /// An execution to cancel: mostly a top-level execution with a child in flight (a whole
    /// tree), sometimes an unfinished child (the middle of a tree), else any submitted one.
    fn cancel_target(&mut self) -> Option<ExecutionId> {
        let unfinished_children = || {
            (self.history.logs().iter())
                .filter(|(id, log)| !id.is_top_level() && !log.pending_state.is_finished())
                .map(|(id, _)| id)
        };
        let candidates: Vec<ExecutionId> = match self.rng.below(4) {
            0 | 1 => (unfinished_children().map(|id| ExecutionId::from(id.top_level())))
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect(),
            2 => unfinished_children().cloned().collect(),
            _ => Vec::new(),
        };
        if candidates.is_empty() {
            let submitted: Vec<u32> = self.submitted.iter().copied().collect();
            if submitted.is_empty() {
                return None;
            }
            let k = submitted[self.rng.index(submitted.len())];
            return Some(self.top_level_id(k));
        }
        Some(candidates[self.rng.index(candidates.len())].clone())
    }

    /// A completion of the promise of a submitted `PROMISED` workflow: mostly with the value
    /// its clients mean, sometimes with another one (refused once the first is in).
    fn completion(&mut self) -> Action {
        let seed = self.config.seed;
        let promised: Vec<u32> = (self.submitted.iter().copied())
            .filter(|k| Workload::of(seed, *k).is_promised())
            .collect();
        if promised.is_empty() {
            return Action::Idle;
        }
        let k = promised[self.rng.index(promised.len())];
        let meant = Workload::of(seed, k).meant;
        let value = if self.rng.chance(700) {
            meant
        } else {
            meant + 1 + self.rng.below(5)
        };
        Action::Complete { k, value }
    }
}
