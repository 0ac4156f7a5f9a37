//! The invariants checked after every step of a simulation, on what the store holds.

use crate::faults::Ack;
use concepts::{
    DbClient, DbClientExt, DbError, ExecutionEventInner, ExecutionId, ExecutionLog,
    JoinSetResponse, ListExecutionsFilter, derive_pending_state,
};
use std::{collections::BTreeMap, fmt};

/// One invariant of the simulation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Invariant {
    /// At most one `Finished` per execution, and no event after it.
    OneFinished,
    /// A lease is taken only once the last one was resolved (unlocked, failed, timed out,
    /// given up on a join set) or by the run that holds it: no executor takes over a lease.
    OneLease,
    /// Versions dense: `events[v]` is version `v`, `Created` at 0 only, `next_version` the
    /// length (the version of the `Finished` event once finished).
    DenseVersions,
    /// The stored pending state equals `derive_pending_state` of the log and responses.
    PendingState,
    /// Every finished child's result is delivered to its parent exactly once, and no
    /// response names a child that did not finish with that result.
    ChildDeliveredOnce,
    /// Every acknowledged write is in the log.
    AcknowledgedWrite,
    /// A submit repeated (after an error) with the same request is answered as the same
    /// execution, never refused as a conflict.
    SameSubmit,
    /// The world's schedule fires each tick once and accounts for every tick it handled
    /// (fired, or inside one skipped range), each fired execution stored or pruned, and a
    /// tick is recorded as missed only when no scheduler pass succeeded within its catch-up
    /// window.
    ScheduleOnce,
    /// Once the run is over, the schedule ended and handled every tick up to its end.
    ScheduleHandled,
    /// A promise's completions: the first accepted is the value its stub holds, every other
    /// accepted one repeats it, every refused one differs from it, and the workflow returns
    /// what follows from that value (delivered once: `ChildDeliveredOnce`).
    PromiseOnce,
    /// A cancelled execution finished, with the cancellation when this cancel finished it,
    /// and then its tree has no unfinished member afterwards, and none joins it later (an
    /// execution that had finished is left alone, with its tree).
    CancelledTree,
    /// The pruner removes only whole trees whose every member finished, whose top-level
    /// execution finished more than the retention ago, and leaves nothing of them in any
    /// table or index.
    PruneWhole,
    /// Once faults stop, a tree whose every member finished, its top-level execution more
    /// than the retention ago, is pruned within a bounded simulated time.
    Retention,
    /// Once faults stop, everything finishes within a bounded simulated time.
    Liveness,
    /// The harness itself could not read the store.
    Harness,
}

impl Invariant {
    /// Its name in reports.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::OneFinished => "at most one Finished, nothing after it",
            Self::OneLease => "a lease is taken over by nobody but the watcher",
            Self::DenseVersions => "versions dense",
            Self::PendingState => "stored pending state = derive_pending_state",
            Self::ChildDeliveredOnce => "every child's result delivered to its parent exactly once",
            Self::AcknowledgedWrite => "no acknowledged write lost",
            Self::SameSubmit => "a repeated submit is answered as the same execution",
            Self::ScheduleOnce => "a schedule fires each tick once and accounts for every tick",
            Self::ScheduleHandled => "every due tick of a schedule handled, up to its end",
            Self::PromiseOnce => "a promise holds its first accepted completion, delivered once",
            Self::CancelledTree => "a cancelled tree has no unfinished member, and none joins it",
            Self::PruneWhole => "prune removes whole finished trees past retention, entirely",
            Self::Retention => "every finished tree past retention is pruned",
            Self::Liveness => "liveness: everything finishes once faults stop",
            Self::Harness => "the harness could read the store",
        }
    }
}

impl fmt::Display for Invariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A broken invariant, with what broke it.
#[derive(Debug, Clone)]
pub struct Broken {
    /// The invariant.
    pub invariant: Invariant,
    /// What the store holds that breaks it.
    pub detail: String,
}

/// A broken `invariant`, described by `detail`.
pub fn broken(invariant: Invariant, detail: String) -> Broken {
    Broken { invariant, detail }
}

impl From<DbError> for Broken {
    fn from(err: DbError) -> Self {
        broken(Invariant::Harness, format!("cannot read the store: {err}"))
    }
}

/// Every execution's log, by id.
///
/// # Errors
/// The store cannot be read.
pub async fn logs(db: &dyn DbClient) -> Result<BTreeMap<ExecutionId, ExecutionLog>, DbError> {
    let mut logs = BTreeMap::new();
    for summary in db
        .list_all_executions(ListExecutionsFilter::default())
        .await?
    {
        let log = db.get(&summary.execution_id).await?;
        logs.insert(summary.execution_id, log);
    }
    Ok(logs)
}

/// Checks every invariant but liveness on `logs`, and that each of `acks` is there.
///
/// # Errors
/// The first invariant found broken.
pub fn check(logs: &BTreeMap<ExecutionId, ExecutionLog>, acks: &[Ack]) -> Result<(), Broken> {
    for (id, log) in logs {
        check_log(id, log)?;
    }
    check_children(logs)?;
    for ack in acks {
        check_ack(logs, ack)?;
    }
    Ok(())
}

fn check_log(id: &ExecutionId, log: &ExecutionLog) -> Result<(), Broken> {
    let finished: Vec<usize> = (log.events.iter().enumerate())
        .filter(|(_, event)| matches!(event.event, ExecutionEventInner::Finished { .. }))
        .map(|(version, _)| version)
        .collect();
    match finished.as_slice() {
        [] => {}
        [version] if *version + 1 == log.events.len() => {}
        _ => {
            let kinds: Vec<_> = log.events.iter().map(|e| e.event.variant_name()).collect();
            return Err(broken(
                Invariant::OneFinished,
                format!("{id}: Finished at versions {finished:?} of {kinds:?}"),
            ));
        }
    }
    check_leases(id, log)?;
    let created_first = matches!(
        log.events.first().map(|e| &e.event),
        Some(ExecutionEventInner::Created(_))
    );
    let only_first = log
        .events
        .iter()
        .skip(1)
        .all(|e| !matches!(e.event, ExecutionEventInner::Created(_)));
    // A finished log's next version stays the version of its `Finished` (nothing follows it).
    let expected_next = log.events.len() - usize::from(!finished.is_empty());
    if !created_first || !only_first || log.next_version.0 as usize != expected_next {
        return Err(broken(
            Invariant::DenseVersions,
            format!(
                "{id}: next version {} for the events {:?}",
                log.next_version,
                log.events
                    .iter()
                    .map(|e| e.event.variant_name())
                    .collect::<Vec<_>>()
            ),
        ));
    }
    let derived = derive_pending_state(&log.events, &log.responses);
    if derived.as_ref() != Some(&log.pending_state) {
        return Err(broken(
            Invariant::PendingState,
            format!("{id}: stored {:?}, derived {derived:?}", log.pending_state),
        ));
    }
    Ok(())
}

fn check_leases(id: &ExecutionId, log: &ExecutionLog) -> Result<(), Broken> {
    let mut held = None;
    for (version, event) in log.events.iter().enumerate() {
        match &event.event {
            ExecutionEventInner::Locked(locked) => {
                if let Some(holder) = held.filter(|holder| *holder != locked.run_id) {
                    return Err(broken(
                        Invariant::OneLease,
                        format!(
                            "{id}: {} locked at version {version} while {holder} held the lease",
                            locked.run_id
                        ),
                    ));
                }
                held = Some(locked.run_id);
            }
            ExecutionEventInner::Unlocked { .. }
            | ExecutionEventInner::TemporarilyFailed { .. }
            | ExecutionEventInner::TemporarilyTimedOut { .. }
            | ExecutionEventInner::Finished { .. }
            | ExecutionEventInner::HistoryEvent {
                event: concepts::HistoryEvent::JoinNext { .. },
            } => held = None,
            _ => {}
        }
    }
    Ok(())
}

fn check_children(logs: &BTreeMap<ExecutionId, ExecutionLog>) -> Result<(), Broken> {
    let mut delivered: BTreeMap<&ExecutionId, usize> = BTreeMap::new();
    for (parent, log) in logs {
        for response in &log.responses {
            let JoinSetResponse::ChildExecutionFinished {
                child_execution_id,
                result,
                ..
            } = &response.event.event
            else {
                continue;
            };
            *delivered.entry(child_execution_id).or_default() += 1;
            let child_result = logs.get(child_execution_id).and_then(finished_result);
            if child_result != Some(result) {
                return Err(broken(
                    Invariant::ChildDeliveredOnce,
                    format!(
                        "{parent} holds the response {result:?} of {child_execution_id}, which \
                         finished with {child_result:?}"
                    ),
                ));
            }
        }
    }
    for (id, log) in logs {
        let Some(concepts::Created {
            parent: Some((parent, _)),
            ..
        }) = log.events.first().and_then(|e| e.event.created())
        else {
            continue;
        };
        let count = delivered.get(id).copied().unwrap_or(0);
        let expected = usize::from(finished_result(log).is_some());
        if count != expected {
            return Err(broken(
                Invariant::ChildDeliveredOnce,
                format!(
                    "{parent} holds {count} responses of its child {id}, which is {:?}",
                    log.pending_state
                ),
            ));
        }
    }
    Ok(())
}

/// The result of a finished log.
pub fn finished_result(log: &ExecutionLog) -> Option<&concepts::FinishedExecutionResult> {
    log.events.iter().find_map(|e| match &e.event {
        ExecutionEventInner::Finished { result } => Some(result),
        _ => None,
    })
}

fn check_ack(logs: &BTreeMap<ExecutionId, ExecutionLog>, ack: &Ack) -> Result<(), Broken> {
    let lost = |what: String| Err(broken(Invariant::AcknowledgedWrite, what));
    match ack {
        Ack::Created(id) => {
            if !logs.contains_key(id) {
                return lost(format!("the acknowledged creation of {id}"));
            }
        }
        Ack::Appended {
            execution_id,
            version,
            events,
        } => {
            let log = logs.get(execution_id);
            let start = version.0 as usize;
            let stored = log.map(|log| log.events.iter().skip(start).take(events.len()));
            let same = stored.is_some_and(|stored| {
                stored.map(|e| &e.event).eq(events.iter())
                    && log.is_some_and(|l| l.events.len() >= start + events.len())
            });
            if !same {
                let kinds: Vec<_> = events
                    .iter()
                    .map(ExecutionEventInner::variant_name)
                    .collect();
                return lost(format!(
                    "the acknowledged {kinds:?} of {execution_id} at version {version}"
                ));
            }
        }
        Ack::Response {
            execution_id,
            response,
        } => {
            let found = logs
                .get(execution_id)
                .is_some_and(|log| log.responses.iter().any(|r| r.event == *response));
            if !found {
                return lost(format!(
                    "the acknowledged response {response:?} to {execution_id}"
                ));
            }
        }
    }
    Ok(())
}

/// True when every execution in `logs` finished.
#[must_use]
pub fn all_finished(logs: &BTreeMap<ExecutionId, ExecutionLog>) -> bool {
    logs.values().all(|log| finished_result(log).is_some())
}

#[cfg(test)]
mod tests {
    use super::{Invariant, check, logs};
    use crate::{faults::Ack, workers};
    use concepts::{
        ClockFn, DbConnection, ExecutionEvent, ExecutionEventInner, ExecutionId, ExecutionLog,
        ExecutorId, JoinSetId, JoinSetKind, Locked, PendingState, RunId,
        SupportedFunctionReturnValue, Version, derive_pending_state,
    };
    use std::{collections::BTreeMap, sync::Arc};
    use storage_memory::MemoryStore;
    use test_utils::SimClock;
    use workflow::Client;

    fn broken(logs: &BTreeMap<ExecutionId, ExecutionLog>, acks: &[Ack]) -> Option<Invariant> {
        check(logs, acks).err().map(|broken| broken.invariant)
    }

    fn finished(clock: &SimClock) -> ExecutionEvent {
        ExecutionEvent {
            created_at: clock.now(),
            event: ExecutionEventInner::Finished {
                result: Ok(SupportedFunctionReturnValue::None),
            },
        }
    }

    /// Each invariant passes on a real log and fails on a log broken in its way.
    #[tokio::test]
    async fn each_invariant_fails_on_a_log_that_breaks_it() {
        let db: Arc<dyn DbConnection> = Arc::new(MemoryStore::new());
        let clock = SimClock::epoch();
        let client = Client::new(db.clone(), clock.clone(), workers::component());
        let id = ExecutionId::generate_at(clock.now());
        client
            .submit_with_id(id.clone(), &workers::DOUBLE, &1)
            .await
            .expect("submitted");
        let real = logs(db.as_ref()).await.expect("logs");
        assert_eq!(broken(&real, &[Ack::Created(id.clone())]), None);
        let tampered = |tamper: &dyn Fn(&mut ExecutionLog)| {
            let mut logs = real.clone();
            tamper(logs.get_mut(&id).expect("the log"));
            broken(&logs, &[])
        };
        let twice = |log: &mut ExecutionLog| {
            log.events.push(finished(&clock));
            log.events.push(finished(&clock));
        };
        assert_eq!(tampered(&twice), Some(Invariant::OneFinished));
        let locked = |run| ExecutionEvent {
            created_at: clock.now(),
            event: ExecutionEventInner::Locked(Locked {
                component_id: workers::component(),
                executor_id: ExecutorId::generate_at(clock.now()),
                run_id: run,
                lock_expires_at: clock.now(),
            }),
        };
        let (first, second) = (
            RunId::generate_at(clock.now()),
            RunId::generate_at(clock.now()),
        );
        let extended = |log: &mut ExecutionLog| {
            log.events.push(locked(first));
            log.events.push(locked(first));
            log.next_version = Version(3);
            log.pending_state = derive_pending_state(&log.events, &[]).expect("a state");
        };
        assert_eq!(tampered(&extended), None, "a run extends its own lease");
        let taken_over = |log: &mut ExecutionLog| {
            log.events.push(locked(first));
            log.events.push(locked(second));
        };
        assert_eq!(tampered(&taken_over), Some(Invariant::OneLease));
        let skipped = |log: &mut ExecutionLog| log.next_version = Version(5);
        assert_eq!(tampered(&skipped), Some(Invariant::DenseVersions));
        let later = |log: &mut ExecutionLog| {
            log.pending_state = PendingState::PendingAt {
                scheduled_at: concepts::add_saturating(clock.now(), workers_lease()),
            };
        };
        assert_eq!(tampered(&later), Some(Invariant::PendingState));
        let other = ExecutionId::generate_at(clock.now());
        assert_eq!(
            broken(&real, &[Ack::Created(other)]),
            Some(Invariant::AcknowledgedWrite)
        );
        // A finished child of `id` whose response `id` never got.
        let join_set = JoinSetId::new(JoinSetKind::Generated, "1").expect("a join set id");
        let mut child = real[&id].clone();
        child.execution_id = id.next_level(&join_set, 1);
        if let ExecutionEventInner::Created(created) = &mut child.events[0].event {
            created.parent = Some((id.clone(), join_set));
        }
        child.events.push(finished(&clock));
        child.pending_state = derive_pending_state(&child.events, &[]).expect("a state");
        let mut orphaned = real.clone();
        orphaned.insert(child.execution_id.clone(), child);
        assert_eq!(broken(&orphaned, &[]), Some(Invariant::ChildDeliveredOnce));
    }

    fn workers_lease() -> std::time::Duration {
        crate::LEASE
    }
}
