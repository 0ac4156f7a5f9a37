//! The operations of a run, one method each: creates, locks, appends and batches, children,
//! responses, and what the timers watcher does; each records its result in the dump.

use super::{ID_MS, LogFacts, MAX_EXECUTIONS, Run, canonical::timer_key};
use crate::storage_scenarios::helpers::{
    append, child_execution_request, component_id, delay_finished, join_next, join_set_create, lock,
};
use concepts::{
    AppendBatchRequest, DelayId, ExecutionEventInner, ExpiredTimer, FinishedExecutionError,
    FunctionFqn, JoinSetResponse, JoinSetResponseEvent, LockPendingRequest, OutcomeWrite,
    PendingState, Version, retry,
};
use std::{sync::Arc, time::Duration};

impl Run<'_> {
    pub(super) async fn create(&mut self) {
        let duplicate = self.ids.len() >= MAX_EXECUTIONS || (self.rng.chance(10));
        let id = match (duplicate, self.existing()) {
            (true, Some(id)) => id,
            _ => self.fresh_execution_id(),
        };
        let req = self.create_request(id.clone());
        self.touch(&id);
        let result = self.db.create(req.clone()).await;
        if result.is_ok() {
            self.ids.push(id.clone());
        }
        let what = format!(
            "create {id} {} scheduled {:?} retries {} backoff {:?}",
            req.ffqn, req.scheduled_at, req.max_retries, req.retry_exp_backoff
        );
        self.record(&what, &result);
    }

    pub(super) async fn create_batch(&mut self) {
        let room = MAX_EXECUTIONS.saturating_sub(self.ids.len());
        let count = self.rng.index(3) + 1;
        let mut reqs = Vec::new();
        for _ in 0..count.min(room) {
            let id = self.fresh_execution_id();
            reqs.push(self.create_request(id));
        }
        if (reqs.is_empty() || self.rng.chance(20))
            && let Some(id) = self.existing()
        {
            let at = self.rng.index(reqs.len() + 1);
            let req = self.create_request(id);
            reqs.insert(at, req);
        }
        let ids: Vec<_> = reqs.iter().map(|r| r.execution_id.clone()).collect();
        self.touched.extend(ids.iter().cloned());
        let result = self.db.create_batch(reqs).await;
        if result.is_ok() {
            self.ids.extend(ids.iter().cloned());
        }
        self.record(&format!("create_batch {ids:?}"), &result);
    }

    pub(super) async fn lock_pending(&mut self) {
        let now = self.now();
        let batch_size = self.rng.index(4) + 1;
        let ffqns: Arc<[FunctionFqn]> = match self.rng.below(3) {
            0 => Arc::from([self.functions[0].clone()]),
            1 => Arc::from([self.functions[1].clone()]),
            _ => Arc::from(self.functions.clone()),
        };
        let executor_id = *self.rng.pick(&self.executors).expect("three executors");
        let lease = if self.rng.chance(5) {
            Duration::ZERO
        } else {
            Duration::from_millis(500 + self.rng.below(2_500))
        };
        let expiry = concepts::add_saturating(now, lease);
        let result = self
            .db
            .lock_pending(LockPendingRequest {
                batch_size,
                pending_at_or_sooner: now,
                ffqns: ffqns.clone(),
                now,
                component_id: component_id(),
                executor_id,
                lock_expires_at: expiry,
            })
            .await;
        if let Ok(locked) = &result {
            for l in locked {
                self.touched.push(l.execution_id.clone());
                self.run_ids
                    .insert(l.execution_id.clone(), l.locked_event.run_id);
            }
        }
        let what = format!("lock_pending {batch_size} {ffqns:?} by {executor_id} until {expiry:?}");
        self.record(&what, &result);
    }

    pub(super) async fn lock(&mut self) {
        let Some(log) = self.pick_log().await else {
            return self.create().await;
        };
        let now = self.now();
        let version = self.version_for(&log);
        let (executor_id, run_id) = match (&log.pending_state, self.rng.chance(60)) {
            (
                PendingState::Locked {
                    executor_id,
                    run_id,
                    ..
                },
                true,
            ) => (*executor_id, *run_id),
            _ => {
                let executor_id = *self.rng.pick(&self.executors).expect("three executors");
                let run_id = match self.run_ids.get(&log.execution_id) {
                    Some(run_id) if self.rng.chance(50) => *run_id,
                    _ => self.fresh_run_id(),
                };
                (executor_id, run_id)
            }
        };
        let lease = if self.rng.chance(5) {
            Duration::ZERO
        } else {
            Duration::from_millis(500 + self.rng.below(2_500))
        };
        let expiry = concepts::add_saturating(now, lease);
        let id = log.execution_id.clone();
        // A lock of one execution (or a lease extension) is an append of one `Locked` event.
        let result = lock(self.db, now, &id, run_id, version, executor_id, expiry).await;
        if result.is_ok() {
            self.run_ids.insert(id.clone(), run_id);
        }
        let what = format!("lock {id} at {version} by {executor_id} run {run_id} until {expiry:?}");
        self.record(&what, &result);
    }

    pub(super) async fn append(&mut self) {
        let Some(log) = self.pick_log().await else {
            return self.create().await;
        };
        let version = self.version_for(&log);
        let event = self.random_event(&log);
        let id = log.execution_id.clone();
        let what = format!("append {id} at {version} {event:?}");
        let result = append(self.db, &id, version, self.now(), event.clone()).await;
        if result.is_ok() {
            self.note_lock(&id, &[event]);
        }
        self.record(&what, &result);
    }

    pub(super) async fn append_batch(&mut self) {
        let Some(log) = self.pick_log().await else {
            return self.create().await;
        };
        let version = self.version_for(&log);
        let count = self.rng.index(3) + 1;
        let batch: Vec<_> = (0..count).map(|_| self.random_event(&log)).collect();
        let id = log.execution_id.clone();
        let what = format!("append_batch {id} at {version} {batch:?}");
        let result = self
            .db
            .append_batch(AppendBatchRequest {
                execution_id: id.clone(),
                version,
                now: self.now(),
                events: batch.clone(),
                children: Vec::new(),
                leases: Vec::new(),
                answers: Vec::new(),
            })
            .await;
        if result.is_ok() {
            self.note_lock(&id, &batch);
        }
        self.record(&what, &result);
    }

    pub(super) async fn create_children(&mut self) {
        let Some(log) = self.pick_log().await else {
            return self.create().await;
        };
        if self.ids.len() + 2 > MAX_EXECUTIONS {
            return self.append().await;
        }
        let facts = LogFacts::of(&log);
        let parent = log.execution_id.clone();
        let version = self.version_for(&log);
        let join_set_id = self.random_join_set(&facts);
        let mut batch = Vec::new();
        if !facts.join_sets.contains(&join_set_id) {
            batch.push(join_set_create(&join_set_id));
        }
        let already = facts
            .children
            .iter()
            .filter(|(j, _)| *j == join_set_id)
            .count() as u64;
        let count = self.rng.below(2) + 1;
        let mut reqs = Vec::new();
        for idx in already + 1..=already + count {
            let child = parent.next_level(&join_set_id, idx);
            batch.push(child_execution_request(&join_set_id, &child));
            let mut req = self.create_request(child);
            req.parent = Some((parent.clone(), join_set_id.clone()));
            req.scheduled_by = Some(parent.clone());
            reqs.push(req);
        }
        if self.rng.chance(50) {
            let run_expires_at = if self.rng.chance(50) {
                self.now()
            } else {
                self.later(1_500)
            };
            batch.push(join_next(&join_set_id, run_expires_at));
        }
        let children: Vec<_> = reqs.iter().map(|r| r.execution_id.clone()).collect();
        self.touched.extend(children.iter().cloned());
        let what = format!("create_children of {parent} at {version} {batch:?}");
        let result = self
            .db
            .append_batch(AppendBatchRequest {
                execution_id: parent.clone(),
                version,
                now: self.now(),
                events: batch,
                children: reqs,
                leases: Vec::new(),
                answers: Vec::new(),
            })
            .await;
        if result.is_ok() {
            self.ids.extend(children);
        }
        self.record(&what, &result);
    }

    pub(super) async fn append_response(&mut self) {
        let Some(log) = self.pick_log().await else {
            return self.create().await;
        };
        let facts = LogFacts::of(&log);
        let id = log.execution_id.clone();
        let response = match self.rng.below(3) {
            0 if !facts.delays.is_empty() => {
                let (join_set_id, delay_id) =
                    self.rng.pick(&facts.delays).cloned().expect("not empty");
                delay_finished(&join_set_id, delay_id)
            }
            1 if !facts.children.is_empty() => {
                let (join_set_id, child) =
                    self.rng.pick(&facts.children).cloned().expect("not empty");
                let finished_version = Version(u32::try_from(self.rng.below(5)).unwrap_or(0) + 1);
                JoinSetResponseEvent {
                    join_set_id,
                    event: JoinSetResponse::ChildExecutionFinished {
                        child_execution_id: child,
                        finished_version,
                        result: self.random_result(),
                    },
                }
            }
            _ => {
                let join_set_id = self.random_join_set(&facts);
                delay_finished(&join_set_id, DelayId::from_parts(ID_MS, self.fresh_part()))
            }
        };
        let what = format!("append_response {id} {response:?}");
        let result = self.db.append_response(self.now(), &id, response).await;
        self.record(&what, &result);
    }

    pub(super) async fn respond_to_parent(&mut self) {
        let children: Vec<_> = self
            .ids
            .iter()
            .filter(|id| !id.is_top_level())
            .cloned()
            .collect();
        let Some(log) = self.pick_log_among(children).await else {
            return self.append().await;
        };
        let child = log.execution_id.clone();
        let Some(parent) = child.split_to_parent() else {
            return self.append().await;
        };
        self.touch(&parent.0);
        let version = self.version_for(&log);
        let finished = ExecutionEventInner::Finished {
            result: self.random_result(),
        };
        let what = format!(
            "respond_to_parent {child} at {version} {finished:?} to {}",
            parent.0
        );
        let write = OutcomeWrite::new(child, version, self.now(), finished, Some(&parent));
        let outcome = self.db.append_outcome(write).await;
        self.record(&what, &outcome);
    }

    /// What the timers watcher does at `now`: time out expired leases (retry or permanent,
    /// notifying the parent), deliver expired delays.
    pub(super) async fn watcher(&mut self) {
        let now = self.now();
        let timers = self.db.get_expired_timers(now).await.map(|mut timers| {
            timers.sort_by_key(timer_key);
            timers
        });
        self.record("get_expired_timers", &timers);
        let Ok(timers) = timers else { return };
        for timer in timers {
            match timer {
                ExpiredTimer::Lock(lock) => {
                    let id = lock.execution_id.clone();
                    self.touch(&id);
                    if let Some((parent, _)) = &lock.parent {
                        self.touch(parent);
                    }
                    let (event, what) = match retry::retry_backoff(
                        lock.temporary_event_count,
                        lock.max_retries,
                        lock.retry_exp_backoff,
                    ) {
                        Some(backoff) => {
                            let event = ExecutionEventInner::TemporarilyTimedOut {
                                backoff_expires_at: concepts::add_saturating(now, backoff),
                            };
                            let what = format!(
                                "watcher: time out {id} at {} {event:?}",
                                lock.next_version
                            );
                            (event, what)
                        }
                        None => {
                            let event = ExecutionEventInner::Finished {
                                result: Err(FinishedExecutionError::PermanentTimeout),
                            };
                            let what = format!(
                                "watcher: permanent timeout of {id} at {}",
                                lock.next_version
                            );
                            (event, what)
                        }
                    };
                    // Like the timers watcher: the parent is notified when the child finishes.
                    let write =
                        OutcomeWrite::new(id, lock.next_version, now, event, lock.parent.as_ref());
                    let result = self.db.append_outcome(write).await;
                    self.record(&what, &result);
                }
                ExpiredTimer::Delay(delay) => {
                    self.touch(&delay.execution_id);
                    let what = format!(
                        "watcher: deliver {} to {}",
                        delay.delay_id, delay.execution_id
                    );
                    let result = self
                        .db
                        .append_response(
                            now,
                            &delay.execution_id,
                            delay_finished(&delay.join_set_id, delay.delay_id),
                        )
                        .await;
                    self.record(&what, &result);
                }
            }
            // Each of the watcher's writes is an operation of its own.
            self.check_touched(false).await;
        }
    }
}
