//! The checks that look across steps: what disappeared from the store since the last step (only
//! the pruner removes anything: whole finished trees past retention, nothing of them left
//! behind, and the writes acknowledged to them retired, not lost), what the clients'
//! cancellations and completions of promises were answered compared with what the store
//! holds, and the running figures of a run.

use crate::{
    components::{Answer, CANCEL_REASON, PRUNE_INTERVAL, RETENTION, Records},
    faults::Chaos,
    invariants::{self, Broken, Invariant, broken, finished_result},
    schedules::{self, ScheduleState},
    workers::PROMISE,
};
use chrono::{DateTime, Utc};
use concepts::{
    CancelOutcome, ExecutionId, ExecutionLog, FinishedExecutionError, PendingState,
    SupportedFunctionReturnValue,
};
use std::collections::{BTreeMap, BTreeSet};
use storage_memory::MemoryStore;

/// Figures of what a run did that the checks saw.
#[derive(Debug, Clone, Copy, Default)]
pub struct Seen {
    /// Executions stored at some step (children, fired and pruned ones included).
    pub executions: u64,
    /// Trees the pruner deleted.
    pub pruned_trees: u64,
    /// Executions it deleted with them.
    pub pruned: u64,
    /// Acknowledged writes to pruned executions, retired from the lost-write check.
    pub retired_acks: u64,
    /// Trees past retention held back from the pruner by an unfinished member.
    pub held_back: u64,
}

/// What the checks remember from one step to the next.
#[derive(Default)]
pub struct History {
    /// Every log, as the last check read it.
    prev: BTreeMap<ExecutionId, ExecutionLog>,
    /// Every execution the pruner deleted.
    pruned: BTreeSet<ExecutionId>,
    /// The trees seen past retention with an unfinished member.
    held_back: BTreeSet<ExecutionId>,
    /// The figures.
    pub seen: Seen,
}

impl History {
    /// Every log as of the last check.
    #[must_use]
    pub fn logs(&self) -> &BTreeMap<ExecutionId, ExecutionLog> {
        &self.prev
    }

    /// Checks every invariant but liveness on `logs`, read after a step at `now`, and keeps
    /// them for the next step.
    ///
    /// # Errors
    /// The first invariant found broken.
    pub async fn check(
        &mut self,
        logs: BTreeMap<ExecutionId, ExecutionLog>,
        chaos: &Chaos,
        records: &mut Records,
        memory: &MemoryStore,
        now: DateTime<Utc>,
    ) -> Result<ScheduleState, Broken> {
        let removed = self.removed(&logs, memory, now)?;
        if !removed.is_empty() {
            self.seen.retired_acks += chaos.retire_acks(&removed) as u64;
            records
                .completions
                .retain(|c| !removed.contains(&c.promise));
            records.cancels.retain(|c| !removed.contains(&c.target));
            self.pruned.extend(removed);
        }
        let new = logs
            .iter()
            .filter(|(id, log)| !self.prev.get(*id).is_some_and(|prev| same(prev, log)))
            .count();
        self.seen.executions += new as u64;
        chaos.with_acks(|acks| invariants::check(&logs, acks))?;
        let schedule = schedules::read(memory).await?;
        let schedule =
            chaos.with_passes(|passes| schedules::check(&schedule, &logs, &self.pruned, passes))?;
        self.held_back(&logs, now);
        if let Some(refused) = records.conflicts.first() {
            return Err(broken(Invariant::SameSubmit, refused.clone()));
        }
        check_cancels(&logs, records)?;
        check_promises(&logs, records)?;
        self.prev = logs;
        Ok(schedule)
    }

    /// Notes the trees past retention that an unfinished member keeps from the pruner.
    fn held_back(&mut self, logs: &BTreeMap<ExecutionId, ExecutionLog>, now: DateTime<Utc>) {
        let horizon = now - retention();
        for (root, log) in logs.iter().filter(|(id, _)| id.is_top_level()) {
            let PendingState::Finished { finished_at, .. } = log.pending_state else {
                continue;
            };
            if finished_at < horizon
                && !self.held_back.contains(root)
                && tree(logs, root).any(|member| !logs[member].pending_state.is_finished())
            {
                self.held_back.insert(root.clone());
                self.seen.held_back += 1;
            }
        }
    }

    /// The executions gone since the last step (or created again, a new execution under a
    /// pruned one's id), each checked against the pruner's rules.
    fn removed(
        &mut self,
        logs: &BTreeMap<ExecutionId, ExecutionLog>,
        memory: &MemoryStore,
        now: DateTime<Utc>,
    ) -> Result<BTreeSet<ExecutionId>, Broken> {
        let removed: BTreeSet<ExecutionId> = (self.prev.iter())
            .filter(|(id, prev)| !logs.get(*id).is_some_and(|log| same(prev, log)))
            .map(|(id, _)| id.clone())
            .collect();
        let wrong = |detail: String| Err(broken(Invariant::PruneWhole, detail));
        for id in &removed {
            let prev = &self.prev[id];
            if !prev.pending_state.is_finished() {
                return wrong(format!("{id} was removed while {:?}", prev.pending_state));
            }
            let root = ExecutionId::from(id.top_level());
            let Some(PendingState::Finished { finished_at, .. }) =
                self.prev.get(&root).map(|log| &log.pending_state)
            else {
                return wrong(format!(
                    "{id} was removed after its top-level execution {root}"
                ));
            };
            let horizon = concepts::sub_saturating(now, RETENTION);
            if *finished_at >= horizon {
                return wrong(format!(
                    "the tree of {root}, finished at {finished_at}, was removed at {now}, \
                     within the retention of {RETENTION:?}"
                ));
            }
            if let Some(left) = tree(&self.prev, &root).find(|member| !removed.contains(*member)) {
                return wrong(format!(
                    "{id} was removed, and {left} of the same tree kept: {:?}",
                    logs.get(left).map(|log| &log.pending_state)
                ));
            }
            if !logs.contains_key(id) {
                let mentions = memory.mentions(id);
                if !mentions.is_empty() {
                    return wrong(format!(
                        "{id} was removed, and the store's {} still hold something of it",
                        mentions.join(", ")
                    ));
                }
            }
        }
        if !removed.is_empty() {
            let trees = removed.iter().filter(|id| id.is_top_level()).count();
            self.seen.pruned_trees += trees as u64;
            self.seen.pruned += removed.len() as u64;
        }
        Ok(removed)
    }

    /// The tree that has waited longest for the pruner, and since when: every member
    /// finished, the top-level execution more than the retention ago, and a pass of each
    /// pruner due since (`PRUNE_INTERVAL`).
    #[must_use]
    pub fn due_for_pruning(&self, now: DateTime<Utc>) -> Option<(&ExecutionId, DateTime<Utc>)> {
        let interval = chrono::Duration::from_std(PRUNE_INTERVAL).unwrap_or_default();
        let mut due = None;
        for (root, log) in self.prev.iter().filter(|(id, _)| id.is_top_level()) {
            let PendingState::Finished { finished_at, .. } = log.pending_state else {
                continue;
            };
            let mut ready = Some(finished_at + retention());
            for member in tree(&self.prev, root) {
                match self.prev[member].pending_state {
                    PendingState::Finished { finished_at, .. } => {
                        ready = ready.map(|ready| ready.max(finished_at));
                    }
                    _ => ready = None,
                }
            }
            let Some(ready) = ready else {
                continue;
            };
            if ready + interval <= now && due.is_none_or(|(_, since)| ready < since) {
                due = Some((root, ready));
            }
        }
        due
    }
}

fn retention() -> chrono::Duration {
    chrono::Duration::from_std(RETENTION).unwrap_or_default()
}

/// The same execution: the same `Created` event (an id pruned and created again is not).
fn same(prev: &ExecutionLog, log: &ExecutionLog) -> bool {
    prev.events.first() == log.events.first()
}

/// `root` and its descendants in `logs` (a descendant's id extends its ancestor's with `.`).
fn tree<'l>(
    logs: &'l BTreeMap<ExecutionId, ExecutionLog>,
    root: &'l ExecutionId,
) -> impl Iterator<Item = &'l ExecutionId> + 'l {
    let prefix = format!("{root}.");
    (logs.range(root.clone()..))
        .map(|(id, _)| id)
        .take_while(move |id| id.as_str().starts_with(root.as_str()))
        .filter(move |id| *id == root || id.as_str().starts_with(&prefix))
}

fn check_cancels(
    logs: &BTreeMap<ExecutionId, ExecutionLog>,
    records: &mut Records,
) -> Result<(), Broken> {
    let wrong = |detail: String| Err(broken(Invariant::CancelledTree, detail));
    for ack in &mut records.cancels {
        let target = &ack.target;
        let Some(result) = logs.get(target).and_then(finished_result) else {
            return wrong(format!(
                "{target} was cancelled ({:?}), and is {:?}",
                ack.outcome,
                logs.get(target).map(|log| &log.pending_state)
            ));
        };
        match &ack.outcome {
            CancelOutcome::Cancelled { executions } => {
                let ours = matches!(
                    result,
                    Err(FinishedExecutionError::Cancelled { reason }) if reason == CANCEL_REASON
                );
                if !ours {
                    return wrong(format!(
                        "{target} was cancelled ({executions} executions), and finished with \
                         {result:?}"
                    ));
                }
            }
            CancelOutcome::AlreadyFinished { result: answered } => {
                if answered != result {
                    return wrong(format!(
                        "the cancel of {target} was answered that it finished with {answered:?}, \
                         and it holds {result:?}"
                    ));
                }
            }
        }
        // An execution that had finished is left alone, its unfinished descendants too.
        let CancelOutcome::Cancelled { executions } = ack.outcome else {
            continue;
        };
        let members: BTreeSet<ExecutionId> = tree(logs, target)
            .filter(|id| *id != target)
            .cloned()
            .collect();
        if let Some(member) = members
            .iter()
            .find(|id| !logs[*id].pending_state.is_finished())
        {
            return wrong(format!(
                "{member} is {:?}, in the tree of {target}, which was cancelled",
                logs[member].pending_state
            ));
        }
        if executions > 1 + members.len() {
            return wrong(format!(
                "the cancel of {target} finished {executions} executions, its tree holds {}",
                1 + members.len()
            ));
        }
        match &ack.members {
            None => ack.members = Some(members),
            Some(earlier) => {
                if let Some(joined) = members.difference(earlier).next() {
                    return wrong(format!(
                        "{joined} joined the tree of {target} after it was cancelled"
                    ));
                }
            }
        }
    }
    Ok(())
}

/// The value of a promise that was completed: `Ok(n)` for a number, `Err` with the result
/// otherwise.
fn promised_value(log: &ExecutionLog) -> Option<Result<u64, String>> {
    let result = finished_result(log)?;
    Some(match result {
        Ok(SupportedFunctionReturnValue::InfallibleOrResultOk(json)) => {
            json.0.as_u64().ok_or_else(|| format!("{result:?}"))
        }
        other => Err(format!("{other:?}")),
    })
}

fn check_promises(
    logs: &BTreeMap<ExecutionId, ExecutionLog>,
    records: &Records,
) -> Result<(), Broken> {
    let wrong = |detail: String| Err(broken(Invariant::PromiseOnce, detail));
    let mut completed: BTreeMap<&ExecutionId, usize> = BTreeMap::new();
    for completion in &records.completions {
        let promise = &completion.promise;
        let held = logs.get(promise).and_then(promised_value);
        let accepted = match &completion.answer {
            Answer::Completed => {
                *completed.entry(promise).or_default() += 1;
                true
            }
            Answer::Repeated => true,
            Answer::Refused(_) => false,
        };
        let holds_it = held == Some(Ok(completion.value));
        if accepted != holds_it || (!accepted && held.is_none()) {
            return wrong(format!(
                "the completion of {promise} with {} was answered {:?}, and the promise holds \
                 {held:?}",
                completion.value, completion.answer
            ));
        }
    }
    if let Some((promise, count)) = completed.into_iter().find(|(_, count)| *count > 1) {
        return wrong(format!("{promise} was completed {count} times"));
    }
    let suffix = format!(".n:{PROMISE}_1");
    for (id, log) in logs {
        let Some(workflow) = id.as_str().strip_suffix(&suffix) else {
            continue;
        };
        let Some(Ok(value)) = promised_value(log) else {
            continue;
        };
        let returned = (workflow.parse::<ExecutionId>().ok())
            .and_then(|workflow| logs.get(&workflow))
            .and_then(promised_value);
        if let Some(Ok(returned)) = returned
            && returned != value.saturating_mul(2)
        {
            return wrong(format!(
                "{workflow} returned {returned}, though its promise {id} holds {value}"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
