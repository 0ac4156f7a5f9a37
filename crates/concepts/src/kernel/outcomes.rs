//! Many outcome writes in one transaction (`append_outcomes`, the watcher timing out a long list
//! of expired leases): each write is planned on its own, on the snapshot as the writes before it
//! left it, so that one refused write (a stale version, say) refuses only itself; the changes of
//! the accepted ones are merged into one plan, one change per execution.

use super::plan::{Planner, wakeups_of};
use super::request::{ExecutionChange, WritePlan, WriteReply};
use super::snapshot::{FastHash, Snapshot};
use crate::{DbError, JoinSetResponse, OutcomeWrite, Version};
use std::collections::HashMap;

/// What `append_outcomes` answers: one result per write, in the order of the request. Two
/// answers are equal when their versions are and their refusals say the same.
#[derive(Debug, Clone, Default)]
pub struct OutcomeReplies(pub Vec<Result<Version, DbError>>);

impl PartialEq for OutcomeReplies {
    fn eq(&self, other: &Self) -> bool {
        self.0.len() == other.0.len()
            && self.0.iter().zip(&other.0).all(|pair| match pair {
                (Ok(a), Ok(b)) => a == b,
                (Err(a), Err(b)) => a.kind() == b.kind() && a.to_string() == b.to_string(),
                _ => false,
            })
    }
}

impl Eq for OutcomeReplies {}

/// Plans every write of `writes` in order, each on `snapshot` as the accepted writes before it
/// changed it; returns the merged plan, whose reply holds each write's result.
pub(super) fn plan_outcomes(snapshot: &Snapshot, writes: Vec<OutcomeWrite>) -> WritePlan {
    let mut view = snapshot.clone();
    let mut merged: Vec<ExecutionChange> = Vec::new();
    let mut position: HashMap<crate::ExecutionId, usize, FastHash> = HashMap::default();
    let mut replies = Vec::with_capacity(writes.len());
    for write in writes {
        let mut planner = Planner::new(&view);
        let result = planner.outcome(write);
        let changes = std::mem::take(&mut planner.changes);
        drop(planner);
        if result.is_ok() {
            for change in changes {
                absorb(&mut view, &change);
                merge(&mut merged, &mut position, change);
            }
        }
        replies.push(result);
    }
    let mut wakeups = super::request::Wakeups::new();
    for change in &merged {
        wakeups_of(change, &mut wakeups);
    }
    WritePlan {
        changes: merged,
        wakeups,
        locked: Vec::new(),
        deleted: Vec::new(),
        reply: WriteReply::Outcomes(OutcomeReplies(replies)),
    }
}

/// Carries `change` into `snapshot`: what the next write of the batch reads is what this one
/// left.
fn absorb(snapshot: &mut Snapshot, change: &ExecutionChange) {
    let execution_id = &change.row.execution_id;
    for (join_set_id, counters) in &change.join_sets {
        let row = snapshot
            .join_sets
            .entry((execution_id.clone(), join_set_id.clone()))
            .or_default();
        let before = row.counters;
        for planned in change
            .responses
            .iter()
            .filter(|p| p.response.event.join_set_id == *join_set_id)
        {
            // A response extends the known window of unconsumed arrival times when it is the
            // next one after it, as the planner does within one write.
            let known = before.join_next_count + row.next_response_times.len() as u64;
            if planned.join_set_idx == known {
                row.next_response_times.push(planned.response.created_at);
            }
        }
        let consumed = counters
            .join_next_count
            .saturating_sub(before.join_next_count);
        let consumed = usize::try_from(consumed)
            .unwrap_or(usize::MAX)
            .min(row.next_response_times.len());
        row.next_response_times.drain(..consumed);
        row.counters = *counters;
    }
    for planned in &change.responses {
        match &planned.response.event.event {
            JoinSetResponse::DelayFinished { delay_id } => {
                let key = (execution_id.clone(), *delay_id);
                snapshot.delays.entry(key).or_default().answered = true;
            }
            JoinSetResponse::ChildExecutionFinished {
                child_execution_id, ..
            } => {
                let key = (execution_id.clone(), child_execution_id.clone());
                snapshot.child_responses.insert(key);
            }
        }
    }
    for delay in &change.delays_requested {
        let key = (execution_id.clone(), delay.delay_id);
        snapshot.delays.entry(key).or_default().requested = true;
    }
    snapshot.add_execution(change.row.clone());
}

/// Adds `change` to `merged`, folding it into the earlier change of the same execution.
fn merge(
    merged: &mut Vec<ExecutionChange>,
    position: &mut HashMap<crate::ExecutionId, usize, FastHash>,
    change: ExecutionChange,
) {
    let Some(&idx) = position.get(&change.row.execution_id) else {
        position.insert(change.row.execution_id.clone(), merged.len());
        merged.push(change);
        return;
    };
    let earlier = &mut merged[idx];
    earlier.row = change.row;
    earlier.events.extend(change.events);
    earlier.responses.extend(change.responses);
    for (join_set_id, counters) in change.join_sets {
        match earlier
            .join_sets
            .iter_mut()
            .find(|(j, _)| *j == join_set_id)
        {
            Some((_, c)) => *c = counters,
            None => earlier.join_sets.push((join_set_id, counters)),
        }
    }
    earlier.delays_requested.extend(change.delays_requested);
    earlier.delays_closed.extend(change.delays_closed);
}
