//! `create` and `create_batch`: a new execution, `PendingAt` its schedule at version 1, and the
//! idempotent submit (a repeated `create` of an identical request is answered and writes
//! nothing; one that differs is a conflict naming what differs). A child's id is derived from
//! its parent's, so that the descendants of an execution are the ids that start with its id and
//! a dot. `create_locked` ([`CreateLocked`]) is `create` with the `Locked` event of an
//! executor's lease appended at version 1 in the same transaction, as an `append_batch` creates
//! a child locked; a repeat is answered as `create`'s, without the lease.

use crate::{
    CreateConflict, CreateOutcome, CreateRequest, Created, DbError, DuplicateKind, ExecutionEvent,
    ExecutionEventInner, ExecutionId, Locked, PendingState, ValidationError, Version,
    kernel::{
        ExecutionChange, ExecutionRow, Keys, Planner, Snapshot, ThinVec, Write,
        snapshot::inconsistent, write::sealed::Sealed,
    },
};
use smallvec::smallvec;

impl Sealed for CreateRequest {}

impl Write for CreateRequest {
    type Reply = CreateOutcome;

    /// The new execution, and its parent (which must exist).
    fn keys(&self) -> Result<Keys, DbError> {
        validate_create(self)?;
        Ok(Keys {
            executions: self.parent.iter().map(|(id, _)| id.clone()).collect(),
            new_executions: std::iter::once(self.execution_id.clone()).collect(),
            ..Keys::default()
        })
    }

    fn plan(self, planner: &mut Planner<'_>) -> Result<CreateOutcome, DbError> {
        planner.changes.reserve_exact(1);
        planner.create(self, true)
    }

    const ANSWERED_FROM_READ: bool = true;

    // The `Created` event never changes, and the state is the one the read saw.
    fn answer_from_read(&self, snapshot: &Snapshot) -> Option<Result<CreateOutcome, DbError>> {
        match stored_creation(snapshot, &self.execution_id) {
            Ok(None) => None,
            Ok(Some(existing)) => Some(repeated_create(self, existing)),
            Err(err) => Some(Err(err)),
        }
    }
}

/// `create_locked`: a new top-level execution due now, created under `locked`, the lease of an
/// executor that runs it once the write committed (`DbClient::create_locked`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateLocked {
    /// The execution, due at its `created_at`.
    pub request: CreateRequest,
    /// The lease its `Locked` event, at version 1, records.
    pub locked: Locked,
}

impl Sealed for CreateLocked {}

impl Write for CreateLocked {
    type Reply = CreateOutcome;

    fn keys(&self) -> Result<Keys, DbError> {
        let Self { request, locked } = self;
        let keys = request.keys()?;
        if request.parent.is_some() {
            return Err(ValidationError::InvalidRequest(format!(
                "execution {} is a child: a child is created locked by its parent's \
                 `append_batch`, which records the request",
                request.execution_id
            ))
            .into());
        }
        validate_lease(request, locked, request.created_at)?;
        Ok(keys)
    }

    fn plan(self, planner: &mut Planner<'_>) -> Result<CreateOutcome, DbError> {
        planner.changes.reserve_exact(1);
        let (execution_id, now) = (self.request.execution_id.clone(), self.request.created_at);
        let outcome = planner.create(self.request, true)?;
        if matches!(outcome, CreateOutcome::Created) {
            // Checked as a lock of the new execution: due at `now`, the lease ending after it.
            let locked = ExecutionEventInner::Locked(self.locked);
            planner.append(&execution_id, Version(1), now, locked)?;
        }
        Ok(outcome)
    }

    const ANSWERED_FROM_READ: bool = true;

    fn answer_from_read(&self, snapshot: &Snapshot) -> Option<Result<CreateOutcome, DbError>> {
        self.request.answer_from_read(snapshot)
    }
}

/// Checks the lease `locked` a new execution `req` is created under at `now`: of a function an
/// executor may run (not a stub), ending after `now`.
pub(crate) fn validate_lease(
    req: &CreateRequest,
    locked: &Locked,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<(), ValidationError> {
    if req.ffqn.is_stub() {
        return Err(ValidationError::InvalidRequest(format!(
            "execution {} is of stub function {}: no executor runs it, `complete` finishes it",
            req.execution_id, req.ffqn
        )));
    }
    if locked.lock_expires_at <= now {
        return Err(ValidationError::InvalidExpiryDate {
            lock_expires_at: locked.lock_expires_at,
            now,
        });
    }
    Ok(())
}

/// `create_batch`: many executions, all or nothing, each item idempotent as `create` is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateBatch(pub Vec<CreateRequest>);

impl Sealed for CreateBatch {}

impl Write for CreateBatch {
    type Reply = ();

    fn keys(&self) -> Result<Keys, DbError> {
        if self.0.is_empty() {
            return Err(ValidationError::EmptyBatch("create_batch").into());
        }
        for req in &self.0 {
            validate_create(req)?;
        }
        let new_executions: ThinVec<_> = self.0.iter().map(|r| r.execution_id.clone()).collect();
        // The parents the batch does not create itself, each once.
        let mut parents = crate::kernel::ExecutionIds::new();
        for (parent, _) in self.0.iter().filter_map(|req| req.parent.as_ref()) {
            if !new_executions.contains(parent) && !parents.contains(parent) {
                parents.push(parent.clone());
            }
        }
        Ok(Keys {
            executions: parents,
            new_executions,
            ..Keys::default()
        })
    }

    fn plan(self, planner: &mut Planner<'_>) -> Result<(), DbError> {
        // One change per request: grown once, not doubled (and moved) a thousand times.
        planner.changes.reserve(self.0.len());
        for req in self.0 {
            planner.create(req, true)?;
        }
        Ok(())
    }
}

impl Planner<'_> {
    /// Stages the creation of `req`. When its id exists (stored, or created earlier in this
    /// write), `idempotent` decides: an identical request is answered `AlreadyExisted` and
    /// writes nothing, a different one is a conflict; without it any existing id is a
    /// duplicate (children of `append_batch`, fenced by their parent's version).
    pub(crate) fn create(
        &mut self,
        mut req: CreateRequest,
        idempotent: bool,
    ) -> Result<CreateOutcome, DbError> {
        req.truncate_to_stored_precision();
        if let Some(existing) = self.existing_creation(&req.execution_id)? {
            if !idempotent {
                return Err(DuplicateKind::Execution(req.execution_id).into());
            }
            return repeated_create(&req, existing);
        }
        if let Some((parent, _)) = &req.parent
            && !self.snapshot.executions.contains_key(parent)
            && self.find(parent).is_none()
        {
            // Its finish would answer no one: it could never finish, be cancelled or pruned.
            return Err(ValidationError::InvalidRequest(format!(
                "execution {} names parent {parent}, which does not exist: create the parent \
                 first",
                req.execution_id
            ))
            .into());
        }
        let row = ExecutionRow::new_execution(&req);
        // The request's values move into its `Created` event, which is all a backend stores
        // of it beside the row: nothing is cloned.
        let created_event = req.into_created_event();
        self.changes.push(ExecutionChange {
            row,
            old_state: None,
            events: smallvec![(Version(0), created_event)],
            responses: ThinVec::new(),
            join_sets: ThinVec::new(),
            delays_requested: ThinVec::new(),
            delays_closed: ThinVec::new(),
        });
        self.index_staged();
        Ok(CreateOutcome::Created)
    }

    /// The `Created` event and current state of an execution with this id, stored or created
    /// earlier in this write.
    fn existing_creation(
        &self,
        execution_id: &ExecutionId,
    ) -> Result<Option<(ExecutionEvent, PendingState)>, DbError> {
        if let Some(idx) = self.find(execution_id)
            && let change = &self.changes[idx]
            && change.is_new()
            && let Some((_, created)) = change.events.first()
        {
            let state = change.row.state.pending_state.clone();
            return Ok(Some((created.clone(), state)));
        }
        stored_creation(self.snapshot, execution_id)
    }
}

/// The `Created` event and state of a stored execution with this id, as `snapshot` loaded it.
fn stored_creation(
    snapshot: &Snapshot,
    execution_id: &ExecutionId,
) -> Result<Option<(ExecutionEvent, PendingState)>, DbError> {
    let Some(row) = snapshot.executions.get(execution_id) else {
        return Ok(None);
    };
    let created = snapshot.created.get(execution_id).ok_or_else(|| {
        inconsistent(format!(
            "the `Created` event of existing execution {execution_id} was not loaded"
        ))
    })?;
    Ok(Some((created.clone(), row.state.pending_state.clone())))
}

/// A `create` of an id that exists: identical (function, parameters, parent) is answered
/// `AlreadyExisted` and writes nothing; anything else is a conflict naming what differs.
fn repeated_create(
    req: &CreateRequest,
    (created, pending_state): (ExecutionEvent, PendingState),
) -> Result<CreateOutcome, DbError> {
    let Some(Created {
        ffqn,
        params,
        parent,
        ..
    }) = created.event.into_created().map(|created| *created)
    else {
        return Err(inconsistent(format!(
            "version 0 of execution {} is not `Created`",
            req.execution_id
        )));
    };
    let mut differences = Vec::new();
    if ffqn != req.ffqn {
        differences.push(CreateConflict::Function);
    }
    if params != req.params {
        differences.push(CreateConflict::Params);
    }
    if parent != req.parent {
        differences.push(CreateConflict::Parent);
    }
    if differences.is_empty() {
        Ok(CreateOutcome::AlreadyExisted { pending_state })
    } else {
        Err(DuplicateKind::ExecutionConflict {
            execution_id: req.execution_id.clone(),
            differences,
        }
        .into())
    }
}

/// Checks a request of `create`: a child's id is derived from its parent and join set
/// (`<parent>.<join set>_<index>`, [`ExecutionId::next_level`]), and an execution without a
/// parent has a top-level id. So the descendants of an execution are exactly the ids that
/// start with its id and a dot, which is how `cancel` and `prune` find a tree.
pub fn validate_create(req: &CreateRequest) -> Result<(), ValidationError> {
    let derived = req.execution_id.split_to_parent();
    match (&req.parent, derived) {
        (None, None) => Ok(()),
        (Some(parent), Some(derived)) if *parent == derived => {
            // `next_level` builds without validating: an index of 0 would store an id that no
            // read could parse back.
            match req.execution_id.as_str().parse::<ExecutionId>() {
                Ok(_) => Ok(()),
                Err(err) => Err(ValidationError::InvalidRequest(format!(
                    "execution id {} is malformed ({err}): child indexes start at 1",
                    req.execution_id
                ))),
            }
        }
        (None, Some((parent_id, _))) => Err(ValidationError::InvalidRequest(format!(
            "execution {} has a child's id (of {parent_id}), but the request names no parent",
            req.execution_id
        ))),
        (Some((parent_id, join_set_id)), _) => Err(ValidationError::InvalidRequest(format!(
            "execution {} is created as a child of {parent_id} in join set {join_set_id}, so \
             its id must be `{parent_id}.{join_set_id}_<index>` (`ExecutionId::next_level`)",
            req.execution_id
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ComponentId, JoinSetId};
    use chrono::DateTime;

    fn child_request(execution_id: ExecutionId, parent: &ExecutionId) -> CreateRequest {
        let join_set_id: JoinSetId = "n:batch".parse().unwrap();
        let at = DateTime::from_timestamp(0, 0).unwrap();
        CreateRequest {
            created_at: at,
            execution_id,
            ffqn: "ns:pkg/ifc.fn".parse().unwrap(),
            params: serde_json::json!([]).into(),
            parent: Some((parent.clone(), join_set_id)),
            scheduled_at: at,
            retry_exp_backoff: std::time::Duration::ZERO,
            max_retries: 0,
            component_id: ComponentId::new("activity", "test").unwrap(),
            metadata: crate::ExecutionMetadata::default(),
            scheduled_by: None,
        }
    }

    #[test]
    fn a_child_index_of_zero_is_refused_before_it_is_stored() {
        let parent = ExecutionId::generate_at(DateTime::from_timestamp(0, 0).unwrap());
        let join_set_id: JoinSetId = "n:batch".parse().unwrap();
        let first = parent.next_level(&join_set_id, 1);
        assert_eq!(validate_create(&child_request(first, &parent)), Ok(()));
        let zeroth = parent.next_level(&join_set_id, 0);
        let err = validate_create(&child_request(zeroth, &parent)).unwrap_err();
        assert!(
            err.to_string().contains("child indexes start at 1"),
            "{err}"
        );
    }
}
