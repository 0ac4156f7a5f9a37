//! `lock_pending`: up to a batch of due executions locked under a lease, all or nothing, each
//! with a fresh run id; and what each worker is handed. The kernel grants the lease in the
//! write ([`LockGrant`], from the state row alone), and the backend reads the history
//! afterwards, outside the write transaction, for [`hand_over`] to assemble the
//! [`LockedExecution`]. The events below the locked version are append-only, so what is read
//! after the commit, cut at the locked version, is exactly what the write saw. Responses are
//! handed over as read: every one stored at the lock, and perhaps some that arrived since
//! (responses are only appended, in arrival order, so those are the ones the worker would
//! otherwise get next from `subscribe_to_next_responses`: as if the lock were a moment
//! later).

use crate::{
    CreateRequest, Created, DbError, ExecutionEvent, ExecutionEventInner, ExecutionId,
    ExecutionMetadata, FunctionFqn, HistoryEvent, JoinSetResponseEventOuter, LockPendingRequest,
    Locked, LockedExecution, Params, PendingState, RunId, ValidationError, Version,
    kernel::{
        DueQuery, ExecutionRow, FastHash, Keys, LogRows, Planner, Write, WritePlan,
        snapshot::inconsistent, write::sealed::Sealed,
    },
};
use chrono::{DateTime, Utc};
use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
};

impl Sealed for LockPendingRequest {}

impl LockPendingRequest {
    /// True when the request can lock nothing (no function, a batch of zero), which a backend
    /// may answer without reading anything.
    #[must_use]
    pub fn locks_nothing(&self) -> bool {
        self.batch_size == 0 || self.ffqns.is_empty()
    }
}

impl Write for LockPendingRequest {
    /// The leases granted, in lock order: the backend reads their histories after the commit
    /// and hands each over with [`hand_over`].
    type Reply = Vec<LockGrant>;

    fn keys(&self) -> Result<Keys, DbError> {
        validate_lock_pending(self)?;
        // A function named twice is one function: each backend reads its due executions once.
        let repeated = |(i, ffqn): (usize, &FunctionFqn)| self.ffqns[..i].contains(ffqn);
        let ffqns = if self.ffqns.iter().enumerate().any(repeated) {
            let mut unique: Vec<FunctionFqn> = Vec::with_capacity(self.ffqns.len());
            for ffqn in self.ffqns.iter() {
                if !unique.contains(ffqn) {
                    unique.push(ffqn.clone());
                }
            }
            Arc::from(unique)
        } else {
            self.ffqns.clone()
        };
        Ok(Keys {
            due: Some(DueQuery {
                ffqns,
                pending_at_or_sooner: self.pending_at_or_sooner,
                limit: self.batch_size,
            }),
            ..Keys::default()
        })
    }

    fn granted(reply: &mut Vec<LockGrant>) -> Vec<LockGrant> {
        std::mem::take(reply)
    }

    fn plan(self, planner: &mut Planner<'_>) -> Result<Vec<LockGrant>, DbError> {
        let req = &self;
        let snapshot = planner.snapshot;
        let mut locked = Vec::with_capacity(snapshot.due.len());
        planner.changes.reserve(snapshot.due.len());
        for execution_id in &snapshot.due {
            let row = snapshot
                .executions
                .get(execution_id)
                .ok_or_else(|| inconsistent(format!("due execution {execution_id} has no row")))?;
            // An index may round a due time down (to microseconds, say): not due yet after all.
            let Some(due_at) =
                (row.state.pending_state.pending_at()).filter(|at| *at <= req.pending_at_or_sooner)
            else {
                continue;
            };
            let locked_event = Locked {
                component_id: req.component_id.clone(),
                executor_id: req.executor_id,
                run_id: RunId::generate_at(req.now),
                lock_expires_at: req.lock_expires_at,
            };
            let version = row.state.next_version;
            // Each due execution is found once: staged without looking for its change, from
            // the row found above.
            let idx = planner.stage_row(row);
            planner.append_at(
                idx,
                execution_id,
                version,
                req.now,
                ExecutionEventInner::Locked(locked_event.clone()),
            )?;
            locked.push(LockGrant {
                row: planner.changes[idx].row.clone(),
                locked_at: version,
                locked_event,
                due_at,
            });
        }
        Ok(locked)
    }
}

/// Checks a request of `lock_pending`: the lease ends after it starts, and no stub function is
/// named (a stub is completed from outside, never run).
pub fn validate_lock_pending(req: &LockPendingRequest) -> Result<(), ValidationError> {
    if req.lock_expires_at <= req.now {
        return Err(ValidationError::InvalidExpiryDate {
            lock_expires_at: req.lock_expires_at,
            now: req.now,
        });
    }
    if let Some(stub) = req.ffqns.iter().find(|ffqn| ffqn.is_stub()) {
        return Err(ValidationError::InvalidRequest(format!(
            "function {stub} is a stub: no executor runs it, `complete` finishes its executions"
        )));
    }
    Ok(())
}

/// A lease `lock_pending` granted: the row after the lock and the `Locked` event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockGrant {
    /// The execution's row after the lock (its next version follows the `Locked` event).
    pub row: ExecutionRow,
    /// The version the `Locked` event was appended at: the worker is handed the events
    /// below it.
    pub locked_at: Version,
    /// The lease.
    pub locked_event: Locked,
    /// When the execution was due, before the lock.
    pub due_at: DateTime<Utc>,
}

impl LockGrant {
    /// How many events the worker is handed (versions `0..locked_at`): what the backend reads
    /// after the commit, with the responses of [`Self::responses_handed_over`].
    #[must_use]
    pub fn events_handed_over(&self) -> usize {
        usize::try_from(self.locked_at.0).unwrap_or(usize::MAX)
    }

    /// How many responses the worker is handed: those stored when the lock committed (the
    /// row's count). One that arrives later reaches the run as any later response does, so a
    /// backend reads none for an execution that had none.
    #[must_use]
    pub fn responses_handed_over(&self) -> usize {
        usize::try_from(self.row.response_count).unwrap_or(usize::MAX)
    }
}

/// The execution a worker is handed for `grant`, from its history read after the commit
/// (`log` may hold events appended and responses stored after the lock: it is cut at the
/// locked version and the row's response count).
pub fn hand_over(grant: LockGrant, mut log: LogRows) -> Result<LockedExecution, DbError> {
    let (events, responses) = handed_over(&grant, log.events.len(), log.responses.len())?;
    log.events.truncate(events);
    log.responses.truncate(responses);
    let mut history = log.events.into_iter();
    let Some(Created {
        params,
        metadata,
        scheduled_at,
        ..
    }) = (history.next())
        .and_then(|e| e.event.into_created())
        .map(|created| *created)
    else {
        return Err(not_created(&grant));
    };
    let event_history = history
        .filter_map(|e| match e.event {
            ExecutionEventInner::HistoryEvent { event } => Some(event),
            _ => None,
        })
        .collect();
    let created = (params, metadata, scheduled_at);
    Ok(assemble(&grant, created, event_history, log.responses))
}

/// The `Created` events of the executions a store created due at once, kept after their
/// commit so that the hand-over of their first lease reads nothing
/// ([`CreatedEvents::hand_over_leading`]). A `Created` event never changes while its execution
/// exists, so what is kept is what a read would find, as long as the store forgets an
/// execution as its deletion commits ([`CreatedEvents::forget`]) and forgets them all when
/// another connection may have written (it may have deleted one and created it again under the
/// same id). Each event is used once; at most `capacity` events are kept, of about
/// [`CreatedEvents::MAX_BYTES`] together; one over either bound forgets all the others first.
#[derive(Debug)]
pub struct CreatedEvents {
    kept: Mutex<Kept>,
    capacity: usize,
}

/// The events [`CreatedEvents`] keeps, each with its estimated size, and their total.
#[derive(Debug, Default)]
struct Kept {
    events: HashMap<ExecutionId, (Box<Created>, usize), FastHash>,
    bytes: usize,
}

impl CreatedEvents {
    /// About how many bytes the kept events take together, their parameters and metadata
    /// included; an event of more than a 64th of it is not kept.
    pub const MAX_BYTES: usize = 16 << 20;

    /// Keeps at most `capacity` events (one more forgets all the others first).
    #[must_use]
    pub fn new(capacity: usize) -> Self {
        Self {
            kept: Mutex::default(),
            capacity,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Kept> {
        self.kept.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Forgets the executions `plan` deleted. Called as each plan commits, before anything of
    /// its transaction is handed over: a lock in the same transaction may lease an execution
    /// that a write before it pruned and created again under the same id.
    pub fn forget(&self, plan: &WritePlan) {
        if plan.deleted.is_empty() {
            return;
        }
        let mut kept = self.lock();
        for execution_id in &plan.deleted {
            if let Some((_, size)) = kept.events.remove(execution_id) {
                kept.bytes -= size;
            }
        }
    }

    /// Takes the `Created` events of the executions `plans` created due at once, once they
    /// committed and were [`forgotten`](Self::forget) (the plans are done with).
    pub fn remember(&self, plans: Vec<WritePlan>) {
        let mut kept = self.lock();
        for plan in plans {
            for mut change in plan.changes {
                let due = match change.row.state.pending_state {
                    PendingState::PendingAt { scheduled_at } => scheduled_at,
                    _ => continue,
                };
                let Some((Version(0), event)) = change.events.drain(..).next() else {
                    continue;
                };
                let ExecutionEvent {
                    created_at,
                    event: ExecutionEventInner::Created(created),
                } = event
                else {
                    continue;
                };
                if due > created_at {
                    continue;
                }
                // The event, its entry and its id, then what it holds.
                let size = 256
                    + json_size(&created.params.0)
                    + (created.metadata.0.iter())
                        .map(|(key, value)| key.len() + value.len())
                        .sum::<usize>();
                if size > Self::MAX_BYTES / 64 {
                    continue;
                }
                if kept.events.len() >= self.capacity || kept.bytes + size > Self::MAX_BYTES {
                    *kept = Kept::default();
                }
                kept.bytes += size;
                let replaced = kept.events.insert(change.row.execution_id, (created, size));
                if let Some((_, size)) = replaced {
                    kept.bytes -= size;
                }
            }
        }
    }

    /// Forgets every event: another connection may have deleted or created any execution.
    pub fn clear(&self) {
        *self.lock() = Kept::default();
    }

    /// Hands over the leading `grants` whose history is their `Created` event alone (a first
    /// lease, no response), kept here, and removes them from `grants`; the rest, from the
    /// first grant whose event is not kept on, are the backend's to read, in their order.
    pub fn hand_over_leading(&self, grants: &mut Vec<LockGrant>) -> Vec<LockedExecution> {
        let mut kept = self.lock();
        let mut found = Vec::new();
        for grant in grants.iter() {
            let first = grant.events_handed_over() == 1 && grant.responses_handed_over() == 0;
            match first.then(|| kept.events.remove(&grant.row.execution_id)) {
                Some(Some((created, size))) => {
                    kept.bytes -= size;
                    found.push(created);
                }
                _ => break,
            }
        }
        drop(kept);
        (grants.drain(..found.len()).zip(found))
            .map(|(grant, created)| {
                let Created {
                    params,
                    metadata,
                    scheduled_at,
                    ..
                } = *created;
                assemble(
                    &grant,
                    (params, metadata, scheduled_at),
                    Vec::new(),
                    Vec::new(),
                )
            })
            .collect()
    }
}

/// About how many bytes `value` holds.
fn json_size(value: &serde_json::Value) -> usize {
    use serde_json::Value;
    match value {
        Value::Null | Value::Bool(_) | Value::Number(_) => 8,
        Value::String(text) => 8 + text.len(),
        Value::Array(items) => 8 + items.iter().map(json_size).sum::<usize>(),
        Value::Object(map) => {
            8 + (map.iter())
                .map(|(key, value)| key.len() + json_size(value))
                .sum::<usize>()
        }
    }
}

/// As [`hand_over`], from a history the backend holds in place (the memory store's records)
/// instead of one read for the worker: only what the worker is handed is cloned.
pub fn hand_over_cloned(
    grant: &LockGrant,
    events: &[ExecutionEvent],
    responses: &[JoinSetResponseEventOuter],
) -> Result<LockedExecution, DbError> {
    let (created, event_history, responses) = cloned_history(grant, events, responses)?;
    Ok(assemble(grant, created, event_history, responses))
}

/// As [`hand_over_cloned`], pushing the execution onto `into`: a locked execution is large,
/// and handing it back through a `Result` copies it once more (as moving each grant out of
/// its list would copy it: it is borrowed).
pub fn hand_over_cloned_into(
    grant: &LockGrant,
    events: &[ExecutionEvent],
    responses: &[JoinSetResponseEventOuter],
    into: &mut Vec<LockedExecution>,
) -> Result<(), DbError> {
    let (created, event_history, responses) = cloned_history(grant, events, responses)?;
    into.push(assemble(grant, created, event_history, responses));
    Ok(())
}

/// What the worker of `grant` is handed of `events` and `responses`, cloned: the `Created`
/// event's parameters, metadata and schedule, the history events and the responses.
#[expect(
    clippy::type_complexity,
    reason = "the parts `assemble` takes, named there"
)]
fn cloned_history(
    grant: &LockGrant,
    events: &[ExecutionEvent],
    responses: &[JoinSetResponseEventOuter],
) -> Result<
    (
        (Params, ExecutionMetadata, DateTime<Utc>),
        Vec<HistoryEvent>,
        Vec<JoinSetResponseEventOuter>,
    ),
    DbError,
> {
    let (handed, responses) = handed_over(grant, events.len(), responses.len())
        .map(|(handed, count)| (handed, &responses[..count]))?;
    let history = events.get(1..handed).unwrap_or_default();
    let Some(Created {
        params,
        metadata,
        scheduled_at,
        ..
    }) = events.first().and_then(|e| e.event.created())
    else {
        return Err(not_created(grant));
    };
    let event_history = history
        .iter()
        .filter_map(|e| match &e.event {
            ExecutionEventInner::HistoryEvent { event } => Some(event.clone()),
            _ => None,
        })
        .collect();
    let created = (params.clone(), metadata.clone(), *scheduled_at);
    Ok((created, event_history, responses.to_vec()))
}

/// The execution a worker is handed for one created already locked, by an `append_batch`
/// ([`Lease`](crate::Lease)) or a `create_locked`, once the write committed: its log is the
/// `Created` event of `created` and `locked` after it, so the request and the lease are all of it, and nothing is
/// read. Its next append carries version 2.
#[must_use]
pub fn hand_over_created(created: CreateRequest, locked: Locked) -> LockedExecution {
    let CreateRequest {
        execution_id,
        ffqn,
        params,
        parent,
        scheduled_at,
        retry_exp_backoff,
        max_retries,
        metadata,
        ..
    } = created.at_stored_precision();
    LockedExecution {
        execution_id,
        next_version: Version(2),
        metadata,
        locked_event: locked,
        ffqn,
        params,
        event_history: Vec::new(),
        responses: Vec::new(),
        scheduled_at,
        retry_exp_backoff,
        max_retries,
        parent,
        temporary_event_count: 0,
        due_at: scheduled_at,
    }
}

/// How many of the `events` and `responses` read the worker of `grant` is handed; an error
/// when the history read is shorter than the grant.
fn handed_over(
    grant: &LockGrant,
    events: usize,
    responses: usize,
) -> Result<(usize, usize), DbError> {
    let (handed, answered) = (grant.events_handed_over(), grant.responses_handed_over());
    if events < handed || responses < answered {
        return Err(inconsistent(format!(
            "execution {} was locked at version {} with {answered} responses, its log holds \
             {events} events and {responses} responses",
            grant.row.execution_id, grant.locked_at,
        )));
    }
    Ok((handed, answered))
}

fn not_created(grant: &LockGrant) -> DbError {
    inconsistent(format!(
        "version 0 of execution {} is not `Created`",
        grant.row.execution_id
    ))
}

/// The locked execution of `grant`, with the parameters, metadata and schedule of its
/// `Created` event, its history events and its responses. The grant is borrowed: its ids are
/// shared texts, cheaper to clone than the grant is to move.
fn assemble(
    grant: &LockGrant,
    (params, metadata, scheduled_at): (Params, ExecutionMetadata, DateTime<Utc>),
    event_history: Vec<HistoryEvent>,
    responses: Vec<JoinSetResponseEventOuter>,
) -> LockedExecution {
    let row = &grant.row;
    LockedExecution {
        execution_id: row.execution_id.clone(),
        next_version: row.state.next_version,
        metadata,
        locked_event: grant.locked_event.clone(),
        ffqn: row.ffqn.clone(),
        params,
        event_history,
        responses,
        scheduled_at,
        retry_exp_backoff: row.retry_exp_backoff,
        max_retries: row.max_retries,
        parent: row.parent.clone(),
        temporary_event_count: row.temporary_event_count,
        due_at: grant.due_at,
    }
}
