//! The generator's choices: requests, ids, versions (mostly right, sometimes wrong), events,
//! results and join sets, all drawn from the run's seed.

use super::{ID_MS, LogFacts, Run};
use crate::storage_scenarios::helpers::{component_id, join_next, join_set_create, persist};
use chrono::{DateTime, TimeDelta, Utc};
use concepts::{
    CreateRequest, DelayId, ExecutionEventInner, ExecutionId, ExecutionIdTopLevel, ExecutionLog,
    FinishedExecutionError, FinishedExecutionResult, HistoryEvent, JoinSetId, JoinSetKind,
    JoinSetRequest, Json, Locked, PendingState, PermanentFailureKind, RunId,
    SupportedFunctionReturnValue, Version,
};
use std::time::Duration;

impl Run<'_> {
    pub(super) fn create_request(&mut self, execution_id: ExecutionId) -> CreateRequest {
        let now = self.now();
        let scheduled_at = if self.rng.chance(30) {
            now - TimeDelta::milliseconds(i64::try_from(self.rng.below(1_000)).unwrap_or(0))
        } else {
            concepts::add_saturating(now, self.rng.millis(2_000))
        };
        let ffqn = self
            .rng
            .pick(&self.functions)
            .cloned()
            .expect("two functions");
        CreateRequest {
            created_at: now,
            execution_id,
            ffqn,
            params: Json(serde_json::json!([self.counter as u64, {"z": 1, "a": 2}])),
            parent: None,
            scheduled_at,
            retry_exp_backoff: Duration::from_millis(100 * (1 + self.rng.below(10))),
            max_retries: u32::try_from(self.rng.below(4)).unwrap_or(0),
            component_id: component_id(),
            metadata: concepts::ExecutionMetadata::default(),
            scheduled_by: None,
        }
    }

    pub(super) fn fresh_execution_id(&mut self) -> ExecutionId {
        ExecutionIdTopLevel::from_parts(ID_MS, self.fresh_part()).into()
    }

    pub(super) fn existing(&mut self) -> Option<ExecutionId> {
        self.rng.pick(&self.ids).cloned()
    }

    /// The log of an existing execution (for the generator's choices), or `None`; mostly of
    /// an unfinished one, so that the run does not end in a pile of "already finished".
    pub(super) async fn pick_log(&mut self) -> Option<ExecutionLog> {
        self.pick_log_among(self.ids.clone()).await
    }

    pub(super) async fn pick_log_among(&mut self, ids: Vec<ExecutionId>) -> Option<ExecutionLog> {
        let mut last = None;
        for _ in 0..4 {
            let id = self.rng.pick(&ids)?.clone();
            let log = self.db.get(&id).await.ok()?;
            if !log.pending_state.is_finished() || self.rng.chance(15) {
                last = Some(log);
                break;
            }
            last = Some(log);
        }
        if let Some(log) = &last {
            self.touch(&log.execution_id);
        }
        last
    }

    /// The right version most of the time, else a wrong one.
    pub(super) fn version_for(&mut self, log: &ExecutionLog) -> Version {
        if self.rng.chance(85) {
            log.next_version
        } else if self.rng.chance(50) || log.next_version.0 == 0 {
            Version(log.next_version.0 + 1)
        } else {
            Version(log.next_version.0 - 1)
        }
    }

    pub(super) fn fresh_run_id(&mut self) -> RunId {
        RunId::from_parts(ID_MS, self.fresh_part())
    }

    pub(super) fn random_result(&mut self) -> FinishedExecutionResult {
        match self.rng.below(5) {
            0 => Ok(SupportedFunctionReturnValue::None),
            1 => Ok(SupportedFunctionReturnValue::InfallibleOrResultOk(Json(
                serde_json::json!({"value": self.rng.below(100), "at": "end"}),
            ))),
            2 => Ok(SupportedFunctionReturnValue::FallibleResultErr(Json(
                serde_json::json!("no"),
            ))),
            3 => Err(FinishedExecutionError::PermanentTimeout),
            _ => Err(FinishedExecutionError::PermanentFailure {
                reason_inner: "boom".to_string(),
                reason_full: "activity trap: boom".to_string(),
                kind: PermanentFailureKind::ActivityTrap,
                detail: None,
            }),
        }
    }

    pub(super) fn random_join_set(&mut self, facts: &LogFacts) -> JoinSetId {
        match self.rng.pick(&facts.join_sets) {
            Some(join_set_id) if self.rng.chance(70) => join_set_id.clone(),
            _ => {
                let kind = if self.rng.chance(50) {
                    JoinSetKind::Named
                } else {
                    JoinSetKind::OneOff
                };
                JoinSetId::new(kind, format!("j{}", self.rng.below(4))).expect("legal name")
            }
        }
    }

    pub(super) fn later(&mut self, max_ms: u64) -> DateTime<Utc> {
        concepts::add_saturating(self.now(), self.rng.millis(max_ms))
    }

    pub(super) fn random_event(&mut self, log: &ExecutionLog) -> ExecutionEventInner {
        let facts = LogFacts::of(log);
        match self.rng.below(100) {
            0..=14 => persist(self.rng.below(1_000)),
            15..=21 => join_set_create(&self.random_join_set(&facts)),
            22..=35 => {
                let join_set_id = self.random_join_set(&facts);
                let delay_id = DelayId::from_parts(ID_MS, self.fresh_part());
                let expires_at = self.later(2_500);
                ExecutionEventInner::HistoryEvent {
                    event: HistoryEvent::JoinSetRequest {
                        join_set_id,
                        request: JoinSetRequest::DelayRequest {
                            delay_id,
                            expires_at,
                        },
                    },
                }
            }
            36..=51 => {
                let join_set_id = self.random_join_set(&facts);
                let run_expires_at = match self.rng.below(3) {
                    0 => self.now(),
                    1 => self.later(300),
                    _ => self.later(2_000),
                };
                join_next(&join_set_id, run_expires_at)
            }
            52..=59 => ExecutionEventInner::Unlocked {
                backoff_expires_at: self.later(1_000),
                reason: "limit".to_string(),
            },
            60..=67 => ExecutionEventInner::TemporarilyFailed {
                backoff_expires_at: self.later(1_000),
                reason_full: "activity trap: flaky".to_string(),
                reason_inner: "flaky".to_string(),
                detail: Some("detail".to_string()),
            },
            68..=77 => ExecutionEventInner::TemporarilyTimedOut {
                backoff_expires_at: self.later(1_000),
            },
            78..=82 => ExecutionEventInner::Finished {
                result: self.random_result(),
            },
            83..=95 => {
                let executor_id = *self.rng.pick(&self.executors).expect("three executors");
                let run_id = match (&log.pending_state, self.run_ids.get(&log.execution_id)) {
                    (PendingState::Locked { run_id, .. }, _) if self.rng.chance(50) => *run_id,
                    (_, Some(run_id)) if self.rng.chance(30) => *run_id,
                    _ => self.fresh_run_id(),
                };
                let lock_expires_at = if self.rng.chance(10) {
                    self.now()
                } else {
                    self.later(2_000)
                };
                ExecutionEventInner::Locked(Locked {
                    component_id: component_id(),
                    executor_id,
                    run_id,
                    lock_expires_at,
                })
            }
            _ => {
                let req = self.create_request(log.execution_id.clone());
                req.to_created_event().event
            }
        }
    }

    pub(super) fn note_lock(&mut self, execution_id: &ExecutionId, events: &[ExecutionEventInner]) {
        for event in events {
            if let ExecutionEventInner::Locked(locked) = event {
                self.run_ids.insert(execution_id.clone(), locked.run_id);
            }
        }
    }
}
