//! `append_outcome` and `append_outcomes`: how a run ended, one event at the version the writer
//! read, and the parent's response when it finishes a child, in the same transaction.
//! `append_outcomes` (the timers watcher timing out many leases) plans its outcomes one after
//! the other as a group of their own, each accepted or refused on its own.

use crate::{
    DbError, ExecutionId, JoinSetId, OutcomeWrite, ValidationError, Version,
    kernel::{GroupPlanner, Keys, Planner, Write, write::sealed::Sealed},
};

impl Sealed for OutcomeWrite {}

impl Write for OutcomeWrite {
    type Reply = Version;

    fn keys(&self) -> Result<Keys, DbError> {
        let mut keys = Keys::default();
        outcome_keys(&mut keys, self);
        Ok(keys)
    }

    fn plan(self, planner: &mut Planner<'_>) -> Result<Version, DbError> {
        planner
            .changes
            .reserve_exact(1 + usize::from(self.parent.is_some()));
        planner.outcome(self)
    }
}

/// `append_outcomes`: outcome writes that succeed or fail one by one, in one transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendOutcomes(pub Vec<OutcomeWrite>);

impl Sealed for AppendOutcomes {}

impl Write for AppendOutcomes {
    /// Each write's result, in the order of the request.
    type Reply = Vec<Result<Version, DbError>>;

    fn keys(&self) -> Result<Keys, DbError> {
        if self.0.is_empty() {
            return Err(ValidationError::EmptyBatch("append_outcomes").into());
        }
        let mut keys = Keys::default();
        for write in &self.0 {
            outcome_keys(&mut keys, write);
        }
        keys.dedup();
        Ok(keys)
    }

    fn plan(self, planner: &mut Planner<'_>) -> Result<Self::Reply, DbError> {
        let mut group = GroupPlanner::new(planner.snapshot);
        let replies = self.0.into_iter().map(|write| group.plan(write)).collect();
        planner.adopt(group.into_changes());
        Ok(replies)
    }
}

/// The rows an outcome write touches: its execution, and its parent's when it answers one.
pub(super) fn outcome_keys(keys: &mut Keys, write: &OutcomeWrite) {
    keys.executions.push(write.execution_id.clone());
    keys.add_events(&write.execution_id, std::slice::from_ref(&write.event));
    if let Some((parent_id, response)) = write.parent_response() {
        keys.executions.push(parent_id.clone());
        keys.add_response(&parent_id, &response.event);
    }
}

impl Planner<'_> {
    pub(crate) fn outcome(&mut self, write: OutcomeWrite) -> Result<Version, DbError> {
        let parent_response = write.parent_response();
        // The change's index stays valid: a planner only adds changes after it.
        let idx = self.touch(&write.execution_id)?;
        let next_version = self.append_at(
            idx,
            &write.execution_id,
            write.version,
            write.now,
            write.event,
        )?;
        if let Some((parent_id, response)) = parent_response {
            // Answered before the parent check: a named parent that does not exist is
            // `NotFound`, whatever else the outcome gets wrong.
            self.respond(response.created_at, &parent_id, response.event)?;
        }
        if self.changes[idx].row.parent != write.parent {
            return Err(ValidationError::InvalidRequest(format!(
                "the outcome of execution {} names parent {}, the execution's parent is {}",
                write.execution_id,
                describe_parent(write.parent.as_ref()),
                describe_parent(self.changes[idx].row.parent.as_ref()),
            ))
            .into());
        }
        Ok(next_version)
    }
}

fn describe_parent(parent: Option<&(ExecutionId, JoinSetId)>) -> String {
    match parent {
        Some((id, join_set_id)) => format!("{id} (join set {join_set_id})"),
        None => "none".to_owned(),
    }
}
