//! The group planner: writes planned one after the other on one snapshot, each on the snapshot
//! as the accepted writes before it left it, so that several writes share one load, one
//! transaction and one commit and each still sees exactly what it would have seen alone after
//! them. A write the kernel refuses refuses only itself. Every backend plans through it: a
//! single write is a group of one ([`plan`]), `append_outcomes` is a group of its outcomes, and
//! a backend that lets concurrent writes share a transaction plans them as one group.

use super::{
    plan::{ExecutionChange, Planner, ScheduleWrite, ThinVec, WritePlan},
    snapshot::{FastHash, Snapshot},
    write::Write,
};
use crate::{DbError, ExecutionEventInner, ExecutionId, JoinSetResponse};
use std::{borrow::Cow, collections::HashMap};

/// Plans one write on `snapshot` (loaded for its keys and follow-up keys): the plan to
/// persist and the reply, or the error that refuses the whole write.
pub fn plan<W: Write>(snapshot: &Snapshot, write: W) -> Result<(WritePlan, W::Reply), DbError> {
    plan_into(snapshot, write, Vec::new())
}

/// As [`plan`], staging the changes in `changes`, an empty list whose room the plan's
/// `changes` keep: a backend that plans one write after another hands each the list of the
/// one before, emptied, and a write of one or two executions allocates none.
pub fn plan_into<W: Write>(
    snapshot: &Snapshot,
    write: W,
    changes: Vec<ExecutionChange>,
) -> Result<(WritePlan, W::Reply), DbError> {
    debug_assert!(changes.is_empty(), "a plan starts with no change");
    // A group of one, planned as `GroupPlanner` plans its first write, without the group's
    // state: there is nothing to carry or merge.
    let mut planner = Planner::new(snapshot);
    planner.changes = changes;
    let reply = write.plan(&mut planner)?;
    Ok((planner.into_plan(), reply))
}

/// Plans writes one after the other on one snapshot (loaded for the
/// [`union`](super::Keys::union) of their keys), and merges what the accepted ones change into
/// one [`WritePlan`]: one change per execution, whatever the number of writes that touched it.
///
/// Any writes whose keys [`share a transaction`](super::Keys::shares_a_transaction) may be
/// planned together, whether or not they name executions in common: each is planned on what the
/// writes before it left, so the outcomes of a parent's children each answer it in turn, and a
/// `create` followed by a write to what it created sees it.
#[derive(Debug)]
pub struct GroupPlanner<'s> {
    /// The snapshot as the accepted writes left it; copied only when a second write comes.
    view: Cow<'s, Snapshot>,
    /// The changes of the accepted writes but the last, one per execution.
    merged: Vec<ExecutionChange>,
    /// The index of each execution's change in `merged`.
    position: HashMap<ExecutionId, usize, FastHash>,
    /// The changes of the last accepted write, carried into `view` and `merged` when the next
    /// write comes (a group of one never copies its snapshot).
    last: Vec<ExecutionChange>,
    /// What the accepted writes delete.
    deleted: ThinVec<ExecutionId>,
    /// What the accepted writes change about schedules (a write that names a schedule is
    /// planned alone: `Keys::shares_a_transaction`).
    schedules: ThinVec<ScheduleWrite>,
}

impl<'s> GroupPlanner<'s> {
    /// A group planned on `snapshot`.
    #[must_use]
    pub fn new(snapshot: &'s Snapshot) -> Self {
        Self::on(Cow::Borrowed(snapshot))
    }

    /// A group planned on `snapshot`, which it owns (and changes in place as writes are
    /// accepted, never copying it).
    #[must_use]
    pub fn owning(snapshot: Snapshot) -> GroupPlanner<'static> {
        GroupPlanner::on(Cow::Owned(snapshot))
    }

    fn on(view: Cow<'s, Snapshot>) -> Self {
        Self {
            view,
            merged: Vec::new(),
            position: HashMap::default(),
            last: Vec::new(),
            deleted: ThinVec::new(),
            schedules: ThinVec::new(),
        }
    }

    /// Plans `write` as the next write of the group, on the snapshot as the accepted writes
    /// before it left it: its reply, or the error that refuses it (and nothing else; what it
    /// staged is dropped).
    pub fn plan<W: Write>(&mut self, write: W) -> Result<W::Reply, DbError> {
        self.carry_last();
        let mut planner = Planner::new(&self.view);
        let reply = write.plan(&mut planner)?;
        self.last = std::mem::take(&mut planner.changes);
        self.schedules.append(&mut planner.schedules);
        let deleted = std::mem::take(&mut planner.deleted);
        if !deleted.is_empty() {
            let view = self.view.to_mut();
            for execution_id in &deleted {
                view.executions.remove(execution_id);
            }
            self.deleted.extend(deleted);
        }
        Ok(reply)
    }

    /// What the accepted writes change, one change per execution, in the order first
    /// touched.
    pub(crate) fn into_changes(mut self) -> Vec<ExecutionChange> {
        if self.merged.is_empty() {
            return self.last;
        }
        for change in std::mem::take(&mut self.last) {
            merge(&mut self.merged, &mut self.position, change);
        }
        self.merged
    }

    /// The plan of every accepted write: their merged changes, the wake-ups those cause and
    /// the executions they delete.
    #[must_use]
    pub fn finish(mut self) -> WritePlan {
        let deleted = std::mem::take(&mut self.deleted);
        let schedules = std::mem::take(&mut self.schedules);
        WritePlan::of(self.into_changes(), deleted, schedules)
    }

    /// Carries the last accepted write's changes into the view (what the next write reads)
    /// and into the merged changes.
    fn carry_last(&mut self) {
        if self.last.is_empty() {
            return;
        }
        let view = self.view.to_mut();
        for change in &self.last {
            absorb(view, change);
        }
        for change in std::mem::take(&mut self.last) {
            merge(&mut self.merged, &mut self.position, change);
        }
    }
}

/// Carries `change` into `view`: what the next write of the group reads is what this one
/// left.
fn absorb(view: &mut Snapshot, change: &ExecutionChange) {
    // Destructured: a field added to the snapshot or to a change must be carried here.
    let Snapshot {
        executions,
        created,
        finished_results,
        open_delays,
        join_sets,
        delays,
        child_responses,
        // Read by queries (a tree, the prune candidates, due executions), which the writes of
        // a group never run: `Keys::shares_a_transaction`.
        subtrees: _,
        prune_candidates: _,
        due: _,
        // Read by writes of schedules, which are planned alone.
        schedules: _,
        due_schedules: _,
    } = view;
    let ExecutionChange {
        row,
        old_state,
        events,
        responses,
        join_sets: join_set_counters,
        delays_requested,
        delays_closed,
    } = change;
    let execution_id = &row.execution_id;
    if old_state.is_none()
        && let Some((_, event)) = events.first()
    {
        created.insert(execution_id.clone(), event.clone());
    }
    if let Some((_, event)) = events.last()
        && let ExecutionEventInner::Finished { result } = &event.event
    {
        finished_results.insert(execution_id.clone(), result.clone());
    }
    for (join_set_id, counters) in join_set_counters {
        let row = join_sets
            .entry((execution_id.clone(), join_set_id.clone()))
            .or_default();
        let before = row.counters;
        for planned in responses
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
    for planned in responses {
        match &planned.response.event.event {
            JoinSetResponse::DelayFinished { delay_id } => {
                let key = (execution_id.clone(), *delay_id);
                delays.entry(key).or_default().answered = true;
            }
            JoinSetResponse::ChildExecutionFinished {
                child_execution_id, ..
            } => {
                child_responses.insert((execution_id.clone(), child_execution_id.clone()));
            }
        }
    }
    for delay in delays_requested {
        let key = (execution_id.clone(), delay.delay_id);
        delays.entry(key).or_default().requested = true;
        if delay.open {
            (open_delays.entry(execution_id.clone()).or_default()).push(delay.delay_id);
        }
    }
    if let Some(open) = open_delays.get_mut(execution_id) {
        open.retain(|delay_id| !delays_closed.contains(delay_id));
    }
    executions.insert(execution_id.clone(), row.clone());
}

/// Adds `change` to `merged`, folding it into the earlier change of the same execution.
fn merge(
    merged: &mut Vec<ExecutionChange>,
    position: &mut HashMap<ExecutionId, usize, FastHash>,
    change: ExecutionChange,
) {
    let Some(&idx) = position.get(&change.row.execution_id) else {
        position.insert(change.row.execution_id.clone(), merged.len());
        merged.push(change);
        return;
    };
    let earlier = &mut merged[idx];
    // Destructured: a field added to a change must be merged here.
    let ExecutionChange {
        row,
        // The state before the first write of the group is the one the store holds (or none,
        // when the earlier change created it: a later write never creates it).
        old_state: _,
        events,
        responses,
        join_sets,
        delays_requested,
        delays_closed,
    } = change;
    earlier.row = row;
    earlier.events.extend(events);
    earlier.responses.extend(responses);
    for (join_set_id, counters) in join_sets {
        match earlier
            .join_sets
            .iter_mut()
            .find(|(j, _)| *j == join_set_id)
        {
            Some((_, c)) => *c = counters,
            None => earlier.join_sets.push((join_set_id, counters)),
        }
    }
    earlier.delays_requested.extend(delays_requested);
    for delay_id in delays_closed {
        // A delay requested earlier in the group that a later write answered never opens.
        match (earlier.delays_requested.iter_mut()).find(|d| d.delay_id == delay_id) {
            Some(requested) => requested.open = false,
            None if !earlier.delays_closed.contains(&delay_id) => {
                earlier.delays_closed.push(delay_id);
            }
            None => {}
        }
    }
}
