//! The waiter hub: in-process notifications for every backend. A waiter registers, checks the
//! store, and only then waits; a committed write's [`Wakeup`]s wake the waiters they concern;
//! a waiter that leaves, however it leaves, removes its registration. A waiter woken by a
//! committed plan of this process is handed what it waits for with the wake-up (a finish's
//! result, the responses from the one it waits for on), so it reads nothing.

use super::{
    plan::{ExecutionChange, PlannedResponse, Wakeup, WritePlan},
    snapshot::FastHash,
};
use crate::{
    DbError, ExecutionEventInner, ExecutionId, FinishedExecutionResult, FunctionFqn,
    JoinSetResponseEventOuter, add_saturating,
};
use chrono::{DateTime, Utc};
use std::{
    collections::HashMap,
    future::Future,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::Duration,
};
use tokio::sync::Notify;

/// The number of registered waiters of each kind (for tests: registries must shrink).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WaiterCounts {
    /// `wait_for_pending` callers.
    pub pending: usize,
    /// `subscribe_to_next_responses` callers.
    pub responses: usize,
    /// `wait_for_finished_result` callers.
    pub finished: usize,
}

/// What a `wait_for_pending` caller waits for: executions of its functions due at or before
/// its present, a time that moves on with the time it has waited, so that work another writer
/// makes due at that writer's later present wakes it too.
#[derive(Debug)]
struct PendingWaiter {
    ffqns: Arc<[FunctionFqn]>,
    pending_at_or_sooner: DateTime<Utc>,
    since: tokio::time::Instant,
    waiter: Arc<Waiter>,
}

/// One registered waiter: how it is woken, and what a committed plan handed it.
#[derive(Debug, Default)]
struct Waiter {
    notify: Notify,
    /// A waiter of responses: the index of the first one it waits for.
    from_idx: u64,
    handed: Mutex<Handed>,
}

/// What a waiter was handed with its wake-ups.
#[derive(Debug, Default)]
enum Handed {
    #[default]
    Nothing,
    Finished(FinishedExecutionResult),
    /// The responses from the waiter's `from_idx` on, without a gap.
    Responses(Vec<JoinSetResponseEventOuter>),
}

impl Waiter {
    fn handed(&self) -> MutexGuard<'_, Handed> {
        self.handed.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn hand_finished(&self, change: &ExecutionChange) {
        let result = change
            .events
            .iter()
            .find_map(|(_, event)| match &event.event {
                ExecutionEventInner::Finished { result } => Some(result),
                _ => None,
            });
        if let Some(result) = result {
            *self.handed() = Handed::Finished(result.clone());
        }
    }

    /// Adds the `planned` responses that continue what the waiter has: from the index it waits
    /// for next, in order, without a gap; none when that index is not among them (the waiter
    /// then reads the store).
    fn hand_responses(&self, planned: &[PlannedResponse]) {
        let mut handed = self.handed();
        let have = match &*handed {
            Handed::Responses(responses) => responses.len() as u64,
            _ => 0,
        };
        let next = self.from_idx + have;
        let Some(start) = planned.iter().position(|p| p.idx == next) else {
            return;
        };
        let more: Vec<_> = (next..)
            .zip(&planned[start..])
            .take_while(|(idx, p)| p.idx == *idx)
            .map(|(_, p)| p.response.clone())
            .collect();
        match &mut *handed {
            Handed::Responses(responses) => responses.extend(more),
            other => *other = Handed::Responses(more),
        }
    }

    fn take_finished(&self) -> Option<FinishedExecutionResult> {
        match std::mem::take(&mut *self.handed()) {
            Handed::Finished(result) => Some(result),
            _ => None,
        }
    }

    fn take_responses(&self) -> Option<Vec<JoinSetResponseEventOuter>> {
        match std::mem::take(&mut *self.handed()) {
            Handed::Responses(responses) => Some(responses),
            _ => None,
        }
    }
}

impl PendingWaiter {
    fn covers(&self, at: DateTime<Utc>) -> bool {
        at <= add_saturating(self.pending_at_or_sooner, self.since.elapsed())
    }
}

type ExecutionWaiters = HashMap<ExecutionId, Vec<(u64, Arc<Waiter>)>, FastHash>;

#[derive(Debug, Default)]
struct Registry {
    closed: bool,
    next_id: u64,
    pending: HashMap<u64, PendingWaiter, FastHash>,
    responses: ExecutionWaiters,
    finished: ExecutionWaiters,
}

impl Registry {
    fn next_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        id
    }
}

/// Every waiter of one store, by kind. Cheap to share behind an `Arc`; a backend owns one.
#[derive(Debug, Default)]
pub struct WaiterHub {
    registry: Mutex<Registry>,
}

/// Which registration a [`Registration`] removes.
#[derive(Debug)]
enum Key {
    Pending(u64),
    Responses(ExecutionId, u64),
    Finished(ExecutionId, u64),
}

/// A registered waiter; dropping it removes the registration.
#[derive(Debug)]
struct Registration<'h> {
    hub: &'h WaiterHub,
    key: Key,
    waiter: Arc<Waiter>,
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        let mut registry = self.hub.lock();
        match &self.key {
            Key::Pending(id) => {
                registry.pending.remove(id);
            }
            Key::Responses(execution_id, id) => {
                unregister(&mut registry.responses, execution_id, *id)
            }
            Key::Finished(execution_id, id) => {
                unregister(&mut registry.finished, execution_id, *id)
            }
        }
    }
}

fn unregister(waiters: &mut ExecutionWaiters, execution_id: &ExecutionId, id: u64) {
    if let Some(entries) = waiters.get_mut(execution_id) {
        entries.retain(|(entry_id, _)| *entry_id != id);
        if entries.is_empty() {
            waiters.remove(execution_id);
        }
    }
}

/// Hands each of the `waiters` of `execution_id` what a committed plan did to it (`change`,
/// looked up only when someone waits), by `hand`, then wakes them.
fn hand_and_wake<'c>(
    waiters: &ExecutionWaiters,
    execution_id: &ExecutionId,
    change: impl FnOnce() -> Option<&'c ExecutionChange>,
    hand: impl Fn(&Waiter, &ExecutionChange),
) {
    // One lookup, and none when nobody waits for anything of this kind (the usual case):
    // every finished execution and every response comes here.
    if waiters.is_empty() {
        return;
    }
    let Some(entries) = waiters.get(execution_id) else {
        return;
    };
    if let Some(change) = change() {
        for (_, waiter) in entries {
            hand(waiter, change);
        }
    }
    for (_, waiter) in entries {
        // A permit is kept when the waiter is not waiting yet: no wake-up is lost.
        waiter.notify.notify_one();
    }
}

impl WaiterHub {
    /// A hub with no waiters.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Registry> {
        // Every section leaves the registry consistent, so a poisoned lock is still usable.
        self.registry.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Wakes the waiters that committed writes concern. Call it only after the commit.
    pub fn deliver(&self, wakeups: &[Wakeup]) {
        self.deliver_with(wakeups.iter().map(|wakeup| (wakeup, None)));
    }

    /// Wakes the waiters that the committed `plans` concern, as [`WaiterHub::deliver`] does
    /// with their wake-ups, and hands each what its plan stored: a waiter of a finish the
    /// result, a waiter of responses the new ones from the index it waits for (cloned only
    /// for someone who waits). The plans' responses must carry their stored places. Call it
    /// only after the commit. The plans of one group commit are delivered together, under one
    /// lock of the registry.
    pub fn deliver_plans<'p>(&self, plans: impl IntoIterator<Item = &'p WritePlan>) {
        let wakeups = (plans.into_iter())
            .flat_map(|plan| plan.wakeups.iter().map(move |wakeup| (wakeup, Some(plan))));
        self.deliver_with(wakeups);
    }

    /// Delivers each wake-up, with the plan it came from when there is one.
    fn deliver_with<'p>(&self, wakeups: impl Iterator<Item = (&'p Wakeup, Option<&'p WritePlan>)>) {
        let mut wakeups = wakeups.peekable();
        if wakeups.peek().is_none() {
            return;
        }
        let registry = self.lock();
        // Many wake-ups of one write concern the same function: test each waiter once, with
        // the earliest due time of each of its functions (none when nobody waits for pending
        // work, as while a batch is submitted before any executor runs).
        let pending_waiters = !registry.pending.is_empty();
        let mut earliest: HashMap<&FunctionFqn, DateTime<Utc>, FastHash> = HashMap::default();
        for (wakeup, plan) in wakeups {
            let change_of = |id: &ExecutionId| {
                (plan?.changes.iter()).find(|change| change.row.execution_id == *id)
            };
            match wakeup {
                Wakeup::Pending { .. } if !pending_waiters => {}
                Wakeup::Pending { ffqn, at } => {
                    earliest
                        .entry(ffqn)
                        .and_modify(|t| *t = (*t).min(*at))
                        .or_insert(*at);
                }
                Wakeup::Responses(id) => {
                    let hand = |waiter: &Waiter, change: &ExecutionChange| {
                        waiter.hand_responses(&change.responses);
                    };
                    hand_and_wake(&registry.responses, id, || change_of(id), hand);
                }
                Wakeup::Finished(id) => {
                    let hand = Waiter::hand_finished;
                    hand_and_wake(&registry.finished, id, || change_of(id), hand);
                }
            }
        }
        if earliest.is_empty() {
            return;
        }
        for waiter in registry.pending.values() {
            if waiter
                .ffqns
                .iter()
                .filter_map(|ffqn| earliest.get(ffqn))
                .any(|at| waiter.covers(*at))
            {
                waiter.waiter.notify.notify_one();
            }
        }
    }

    /// Wakes every waiter once: something may have been missed (a notification channel that
    /// reconnected, say).
    pub fn wake_everyone(&self) {
        let registry = self.lock();
        for waiter in registry.pending.values() {
            waiter.waiter.notify.notify_one();
        }
        for entries in registry
            .responses
            .values()
            .chain(registry.finished.values())
        {
            for (_, waiter) in entries {
                waiter.notify.notify_one();
            }
        }
    }

    /// Releases every waiter and refuses new ones: waits return at once, with
    /// [`DbError::Closed`] where they return a result. Idempotent: returns true for the call
    /// that closed it, so that a backend shuts down once.
    pub fn close(&self) -> bool {
        let mut registry = self.lock();
        let first = !registry.closed;
        registry.closed = true;
        drop(registry);
        self.wake_everyone();
        first
    }

    /// [`DbError::Closed`] once [`WaiterHub::close`] was called: a backend closes its hub with
    /// the store, so the hub's flag is the store's.
    pub fn ensure_open(&self) -> Result<(), DbError> {
        if self.is_closed() {
            Err(DbError::Closed)
        } else {
            Ok(())
        }
    }

    /// True once [`WaiterHub::close`] was called.
    #[must_use]
    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// The number of registered waiters.
    #[must_use]
    pub fn counts(&self) -> WaiterCounts {
        let registry = self.lock();
        WaiterCounts {
            pending: registry.pending.len(),
            responses: registry.responses.values().map(Vec::len).sum(),
            finished: registry.finished.values().map(Vec::len).sum(),
        }
    }

    fn register_pending(
        &self,
        pending_at_or_sooner: DateTime<Utc>,
        ffqns: Arc<[FunctionFqn]>,
    ) -> Option<Registration<'_>> {
        let mut registry = self.lock();
        if registry.closed {
            return None;
        }
        let id = registry.next_id();
        let waiter = Arc::new(Waiter::default());
        registry.pending.insert(
            id,
            PendingWaiter {
                ffqns,
                pending_at_or_sooner,
                since: tokio::time::Instant::now(),
                waiter: Arc::clone(&waiter),
            },
        );
        Some(Registration {
            hub: self,
            key: Key::Pending(id),
            waiter,
        })
    }

    /// Registers a waiter of `execution_id`'s finish, or of its responses from `from_idx` on.
    fn register_execution(
        &self,
        execution_id: &ExecutionId,
        finished: bool,
        from_idx: u64,
    ) -> Option<Registration<'_>> {
        let mut registry = self.lock();
        if registry.closed {
            return None;
        }
        let id = registry.next_id();
        let waiter = Arc::new(Waiter {
            from_idx,
            ..Waiter::default()
        });
        let waiters = if finished {
            &mut registry.finished
        } else {
            &mut registry.responses
        };
        waiters
            .entry(execution_id.clone())
            .or_default()
            .push((id, Arc::clone(&waiter)));
        let key = if finished {
            Key::Finished(execution_id.clone(), id)
        } else {
            Key::Responses(execution_id.clone(), id)
        };
        Some(Registration {
            hub: self,
            key,
            waiter,
        })
    }

    /// `wait_for_pending`: registers, then awaits `is_due` (the backend's check whether an
    /// execution of `ffqns` is due at `pending_at_or_sooner`); returns at once if it is, else
    /// when a delivered wake-up concerns this waiter, or after `max_wait`, or on close. A check
    /// that fails is logged and waited out like a `false` (the caller polls again after
    /// `max_wait` at the latest); a closed store returns at once.
    pub async fn wait_for_pending(
        &self,
        pending_at_or_sooner: DateTime<Utc>,
        ffqns: Arc<[FunctionFqn]>,
        max_wait: Duration,
        is_due: impl Future<Output = Result<bool, DbError>>,
    ) {
        let Some(registration) = self.register_pending(pending_at_or_sooner, ffqns) else {
            return;
        };
        let due = is_due.await.unwrap_or_else(|err| {
            if !matches!(err, DbError::Closed) {
                tracing::warn!(error = %err, "wait_for_pending could not check for due executions");
            }
            matches!(err, DbError::Closed)
        });
        if due || self.is_closed() {
            return;
        }
        // Woken, closed or timed out: all mean "look again".
        let _ = tokio::time::timeout(max_wait, registration.waiter.notify.notified()).await;
    }

    /// `subscribe_to_next_responses`: registers, then runs `check` (the backend's read of the
    /// responses from `from_idx` on) until it returns something, waiting for a wake-up of
    /// `execution_id`'s responses between two checks. A wake-up that hands the responses from
    /// `from_idx` on ([`WaiterHub::deliver_plans`]) answers without a check.
    pub async fn wait_for_responses<F, Fut>(
        &self,
        execution_id: &ExecutionId,
        from_idx: usize,
        check: F,
    ) -> Result<Vec<JoinSetResponseEventOuter>, DbError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Option<Vec<JoinSetResponseEventOuter>>, DbError>>,
    {
        let from_idx = u64::try_from(from_idx).unwrap_or(u64::MAX);
        let registration = self.register_execution(execution_id, false, from_idx);
        self.check_and_wait(registration, check, None, Waiter::take_responses)
            .await
    }

    /// `wait_for_finished_result`: as [`WaiterHub::wait_for_responses`] for the finish of
    /// `execution_id`, and [`DbError::Timeout`] once `timeout` has passed without a wake-up
    /// that found it finished (`None` waits forever). The timeout bounds the waiting, never a
    /// check: an execution that has finished is reported even with a zero timeout, however
    /// long the backend's read takes. A wake-up that hands the result
    /// ([`WaiterHub::deliver_plans`]) answers without a check.
    pub async fn wait_for_finished<F, Fut>(
        &self,
        execution_id: &ExecutionId,
        timeout: Option<Duration>,
        check: F,
    ) -> Result<FinishedExecutionResult, DbError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Option<FinishedExecutionResult>, DbError>>,
    {
        let registration = self.register_execution(execution_id, true, 0);
        let deadline = timeout.map(tokio::time::sleep);
        self.check_and_wait(registration, check, deadline, Waiter::take_finished)
            .await
    }

    /// Checks, then waits for a wake-up (until `deadline`, when given), and again, unless the
    /// wake-up `handed` something.
    async fn check_and_wait<T, F, Fut>(
        &self,
        registration: Option<Registration<'_>>,
        mut check: F,
        deadline: Option<tokio::time::Sleep>,
        handed: impl Fn(&Waiter) -> Option<T>,
    ) -> Result<T, DbError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Option<T>, DbError>>,
    {
        let Some(registration) = registration else {
            return Err(DbError::Closed);
        };
        let mut deadline = std::pin::pin!(deadline);
        let waiter = &registration.waiter;
        loop {
            if let Some(found) = check().await? {
                return Ok(found);
            }
            if self.is_closed() {
                return Err(DbError::Closed);
            }
            match deadline.as_mut().as_pin_mut() {
                Some(deadline) => tokio::select! {
                    biased;
                    () = waiter.notify.notified() => {}
                    () = deadline => return Err(DbError::Timeout),
                },
                None => waiter.notify.notified().await,
            }
            if let Some(found) = handed(waiter) {
                return Ok(found);
            }
        }
    }
}
