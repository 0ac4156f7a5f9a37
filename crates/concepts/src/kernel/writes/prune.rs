//! `prune`: the trees of top-level executions that finished before a time, each deleted whole
//! (its descendants, logs, responses, delays) when every member finished, all or nothing per
//! tree, with a cursor past the trees examined.

use crate::{
    DbError, ExecutionId, PendingState, PruneOutcome, PruneRequest, ValidationError,
    kernel::{
        Keys, Planner, PruneQuery, Snapshot, Write, snapshot::inconsistent, write::sealed::Sealed,
    },
};

impl Sealed for PruneRequest {}

impl Write for PruneRequest {
    type Reply = PruneOutcome;

    /// The candidates.
    fn keys(&self) -> Result<Keys, DbError> {
        let mut keys = Keys::default();
        let req = self;
        if req.limit == 0 {
            return Err(ValidationError::InvalidRequest(
                "prune examines at least one execution: `limit` must be at least 1".to_owned(),
            )
            .into());
        }
        keys.prune = Some(PruneQuery {
            finished_before: req.finished_before,
            after: req.after.clone(),
            limit: req.limit,
        });
        Ok(keys)
    }

    /// The whole tree of every candidate.
    fn follow_up_keys(&self, snapshot: &Snapshot) -> Option<Keys> {
        if snapshot.prune_candidates.is_empty() {
            return None;
        }
        Some(Keys {
            subtrees: snapshot.prune_candidates.iter().cloned().collect(),
            ..Keys::default()
        })
    }

    /// The trees whose every member finished are deleted; the reply says where the next call
    /// continues.
    fn plan(self, planner: &mut Planner<'_>) -> Result<PruneOutcome, DbError> {
        let (outcome, deleted) = plan_prune(planner.snapshot, &self)?;
        planner.deleted = deleted.into();
        Ok(outcome)
    }
}

/// `prune`: the trees whose every member finished, and where the next call continues.
fn plan_prune(
    snapshot: &Snapshot,
    req: &PruneRequest,
) -> Result<(PruneOutcome, Vec<ExecutionId>), DbError> {
    let mut outcome = PruneOutcome::default();
    let mut deleted = Vec::new();
    for root in &snapshot.prune_candidates {
        let row = snapshot
            .executions
            .get(root)
            .ok_or_else(|| inconsistent(format!("prune candidate {root} has no row")))?;
        let PendingState::Finished { finished_at, .. } = row.state.pending_state else {
            return Err(inconsistent(format!(
                "prune candidate {root} has not finished: {:?}",
                row.state.pending_state
            )));
        };
        if !root.is_top_level() || finished_at >= req.finished_before {
            return Err(inconsistent(format!(
                "prune candidate {root} (finished at {finished_at}) does not match the query"
            )));
        }
        outcome.next = Some((finished_at, root.clone()));
        let descendants = snapshot.subtrees.get(root).map_or(&[][..], Vec::as_slice);
        let all_finished = descendants.iter().all(|id| {
            snapshot
                .executions
                .get(id)
                .is_some_and(|row| row.state.pending_state.is_finished())
        });
        if all_finished {
            outcome.trees += 1;
            outcome.executions += 1 + descendants.len();
            deleted.push(root.clone());
            deleted.extend(descendants.iter().cloned());
        } else {
            outcome.kept += 1;
        }
    }
    if snapshot.prune_candidates.len() < req.limit {
        outcome.next = None;
    }
    Ok((outcome, deleted))
}
