//! The pending state of an execution: its reference derivation from the log, the incremental
//! transitions backends use to keep a state index, and the rules for appending.

use crate::{
    error::{AppendRefused, ValidationError},
    event::{
        ExecutionEvent, ExecutionEventInner, HistoryEvent, JoinSetResponseEventOuter, Locked,
        ResultKind, Version,
    },
    ids::{ExecutorId, JoinSetId, RunId},
};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Where an execution stands, derived from its log and its responses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum PendingState {
    /// Due at `scheduled_at` (or already due).
    PendingAt {
        /// When it becomes due.
        #[serde(with = "crate::time::rfc3339")]
        scheduled_at: DateTime<Utc>,
    },
    /// An executor holds it.
    Locked {
        /// The lease holder.
        executor_id: ExecutorId,
        /// The run.
        run_id: RunId,
        /// When the lease expires.
        #[serde(with = "crate::time::rfc3339")]
        lock_expires_at: DateTime<Utc>,
    },
    /// Awaiting the next response of a join set.
    BlockedByJoinSet {
        /// The join set it waits on.
        join_set_id: JoinSetId,
        /// The `run_expires_at` of the `JoinNext`.
        #[serde(with = "crate::time::rfc3339")]
        lock_expires_at: DateTime<Utc>,
        /// True when the join set is being closed.
        closing: bool,
    },
    /// Terminal.
    Finished {
        /// The version of the `Finished` event.
        version: Version,
        /// When it finished.
        #[serde(with = "crate::time::rfc3339")]
        finished_at: DateTime<Utc>,
        /// What kind of result it has.
        result_kind: ResultKind,
    },
}

/// The `backoff_expires_at` of an `Unlocked` event that parks an execution: a time no clock
/// reaches, so that no executor locks it by itself. A worker parks an execution when running it
/// again cannot get further until something changes (a workflow whose replay diverges from
/// its log: only other code, or other responses, can change that); a probe that finds it can
/// go on now unlocks it again, due at once ([`crate::ExecutionLog::unlock_now`]). Parking
/// writes one event, however long it lasts.
/// It is 9999-12-31T00:00:00Z, which every backend stores.
pub const PARKED_UNTIL: DateTime<Utc> = match DateTime::from_timestamp(253_402_214_400, 0) {
    Some(at) => at,
    None => panic!("9999-12-31 is a representable time"),
};

/// What a parked execution waits for, and what an operator can do: the one sentence that
/// `show`, the HTTP API and the web UI print beside the reason it was parked.
pub const PARKED_EXPLAINED: &str = "no executor locks it until a probe finds that the code \
    replays its log without diverging (each node probes at its start, then with pauses growing \
    to five minutes); deploy code that agrees with its log, or cancel it";

/// The variant of a [`PendingState`], for filters and tables.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    derive_more::Display,
)]
pub enum PendingStateKind {
    /// [`PendingState::PendingAt`].
    PendingAt,
    /// [`PendingState::Locked`].
    Locked,
    /// [`PendingState::BlockedByJoinSet`].
    BlockedByJoinSet,
    /// [`PendingState::Finished`].
    Finished,
}

impl std::str::FromStr for PendingStateKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().replace(['_', '-'], "").as_str() {
            "pendingat" | "pending" => Ok(Self::PendingAt),
            "locked" => Ok(Self::Locked),
            "blockedbyjoinset" | "blocked" => Ok(Self::BlockedByJoinSet),
            "finished" => Ok(Self::Finished),
            _ => Err(format!(
                "unknown state `{s}` (expected one of: pending, locked, blocked, finished)"
            )),
        }
    }
}

impl PendingState {
    /// The variant.
    #[must_use]
    pub fn kind(&self) -> PendingStateKind {
        match self {
            Self::PendingAt { .. } => PendingStateKind::PendingAt,
            Self::Locked { .. } => PendingStateKind::Locked,
            Self::BlockedByJoinSet { .. } => PendingStateKind::BlockedByJoinSet,
            Self::Finished { .. } => PendingStateKind::Finished,
        }
    }

    /// True when finished.
    #[must_use]
    pub fn is_finished(&self) -> bool {
        matches!(self, Self::Finished { .. })
    }

    /// `Some(scheduled_at)` when pending.
    #[must_use]
    pub fn pending_at(&self) -> Option<DateTime<Utc>> {
        match self {
            Self::PendingAt { scheduled_at } => Some(*scheduled_at),
            _ => None,
        }
    }

    /// True when parked: pending at [`PARKED_UNTIL`], due only once unlocked again.
    #[must_use]
    pub fn is_parked(&self) -> bool {
        self.pending_at() == Some(PARKED_UNTIL)
    }

    /// `Some(lock_expires_at)` while locked or blocked by a join set (when the run that waits
    /// gives up its lease).
    #[must_use]
    pub fn lock_expires_at(&self) -> Option<DateTime<Utc>> {
        match self {
            Self::Locked {
                lock_expires_at, ..
            }
            | Self::BlockedByJoinSet {
                lock_expires_at, ..
            } => Some(*lock_expires_at),
            _ => None,
        }
    }

    /// `Some(finished_at)` when finished.
    #[must_use]
    pub fn finished_at(&self) -> Option<DateTime<Utc>> {
        match self {
            Self::Finished { finished_at, .. } => Some(*finished_at),
            _ => None,
        }
    }

    /// Checks the locking rules for appending `Locked` at `now`.
    ///
    /// A due `PendingAt` can be locked; the same executor and run can extend its own lease;
    /// everything else is refused. An expired lease is never taken over: the timers watcher
    /// resolves it first.
    pub fn can_lock(
        &self,
        now: DateTime<Utc>,
        executor_id: ExecutorId,
        run_id: RunId,
        lock_expires_at: DateTime<Utc>,
    ) -> Result<(), ValidationError> {
        if lock_expires_at <= now {
            return Err(ValidationError::InvalidExpiryDate {
                lock_expires_at,
                now,
            });
        }
        match self {
            Self::PendingAt { scheduled_at } if *scheduled_at <= now => Ok(()),
            Self::PendingAt { scheduled_at } => Err(ValidationError::NotYetPending {
                scheduled_at: *scheduled_at,
            }),
            Self::Locked {
                executor_id: held_by,
                run_id: held_run,
                ..
            } if *held_by == executor_id && *held_run == run_id => Ok(()),
            Self::Locked { .. } => Err(ValidationError::AlreadyLocked),
            Self::BlockedByJoinSet { join_set_id, .. } => Err(ValidationError::BlockedByJoinSet {
                join_set_id: join_set_id.clone(),
            }),
            Self::Finished { .. } => Err(ValidationError::AlreadyFinished),
        }
    }
}

/// What a backend's state index holds for one execution: enough to validate an append and to
/// compute the next state without reading the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutionState {
    /// The version the next append must carry.
    pub next_version: Version,
    /// The current pending state.
    pub pending_state: PendingState,
}

impl ExecutionState {
    /// Validates appending `event` at `appending_version`.
    ///
    /// Order of checks: a finished execution refuses everything ("already finished"), then the
    /// version must match, then `Created` is refused (only `create` writes it), then `Locked`
    /// must pass the locking rules at `now`, the time of the append.
    pub fn validate_append(
        &self,
        appending_version: Version,
        now: DateTime<Utc>,
        event: &ExecutionEventInner,
    ) -> Result<(), AppendRefused> {
        if self.pending_state.is_finished() {
            return Err(ValidationError::AlreadyFinished.into());
        }
        if appending_version != self.next_version {
            return Err(AppendRefused::VersionMismatch {
                appending_version,
                expected_version: self.next_version,
            });
        }
        match event {
            ExecutionEventInner::Created(_) => Err(ValidationError::CreatedEventAppended.into()),
            ExecutionEventInner::Locked(Locked {
                executor_id,
                run_id,
                lock_expires_at,
                ..
            }) => self
                .pending_state
                .can_lock(now, *executor_id, *run_id, *lock_expires_at)
                .map_err(AppendRefused::Invalid),
            _ => Ok(()),
        }
    }

    /// The state after `event` was appended at `self.next_version` (already validated).
    ///
    /// `nth_response_created_at` is asked only for a `JoinNext` on join set J: it must return
    /// the `created_at` of the n-th response for J in arrival order, where n is the number of
    /// `JoinNext` events for J in the log including this one, or `None` if there are fewer.
    #[must_use]
    pub fn after_append(
        &self,
        event: &ExecutionEvent,
        nth_response_created_at: impl FnOnce(&JoinSetId) -> Option<DateTime<Utc>>,
    ) -> ExecutionState {
        let version = self.next_version;
        let pending_state = match &event.event {
            ExecutionEventInner::Created(created) => PendingState::PendingAt {
                scheduled_at: created.scheduled_at,
            },
            ExecutionEventInner::Locked(locked) => PendingState::Locked {
                executor_id: locked.executor_id,
                run_id: locked.run_id,
                lock_expires_at: locked.lock_expires_at,
            },
            ExecutionEventInner::Unlocked {
                backoff_expires_at, ..
            }
            | ExecutionEventInner::TemporarilyFailed {
                backoff_expires_at, ..
            }
            | ExecutionEventInner::TemporarilyTimedOut { backoff_expires_at } => {
                PendingState::PendingAt {
                    scheduled_at: *backoff_expires_at,
                }
            }
            ExecutionEventInner::Finished { result } => {
                return ExecutionState {
                    next_version: version,
                    pending_state: PendingState::Finished {
                        version,
                        finished_at: event.created_at,
                        result_kind: ResultKind::of(result),
                    },
                };
            }
            ExecutionEventInner::HistoryEvent {
                event:
                    HistoryEvent::JoinNext {
                        join_set_id,
                        run_expires_at,
                        closing,
                    },
            } => match nth_response_created_at(join_set_id) {
                Some(arrived_at) => PendingState::PendingAt {
                    scheduled_at: (*run_expires_at).max(arrived_at),
                },
                None => PendingState::BlockedByJoinSet {
                    join_set_id: join_set_id.clone(),
                    lock_expires_at: *run_expires_at,
                    closing: *closing,
                },
            },
            ExecutionEventInner::HistoryEvent { .. } => self.pending_state.clone(),
        };
        ExecutionState {
            next_version: Version(version.0.saturating_add(1)),
            pending_state,
        }
    }

    /// The state after a response for `join_set_id` arrived at `created_at`.
    ///
    /// `responses_for_join_set` counts the responses for that join set including this one;
    /// `join_next_count` counts the `JoinNext` events for it in the log.
    #[must_use]
    pub fn after_response(
        &self,
        join_set_id: &JoinSetId,
        created_at: DateTime<Utc>,
        responses_for_join_set: usize,
        join_next_count: usize,
    ) -> ExecutionState {
        let pending_state = match &self.pending_state {
            PendingState::BlockedByJoinSet {
                join_set_id: blocked_on,
                lock_expires_at,
                ..
            } if blocked_on == join_set_id && responses_for_join_set >= join_next_count => {
                PendingState::PendingAt {
                    scheduled_at: (*lock_expires_at).max(created_at),
                }
            }
            other => other.clone(),
        };
        ExecutionState {
            next_version: self.next_version,
            pending_state,
        }
    }
}

/// The reference derivation of the pending state from a log and its responses.
///
/// Reads the log newest event first and stops at the first decisive event. Returns `None` for
/// an empty log. Every backend's stored state must always equal this.
#[must_use]
pub fn derive_pending_state(
    events: &[ExecutionEvent],
    responses: &[JoinSetResponseEventOuter],
) -> Option<PendingState> {
    for (idx, event) in events.iter().enumerate().rev() {
        match &event.event {
            ExecutionEventInner::Finished { result } => {
                return Some(PendingState::Finished {
                    version: Version(u32::try_from(idx).unwrap_or(u32::MAX)),
                    finished_at: event.created_at,
                    result_kind: ResultKind::of(result),
                });
            }
            ExecutionEventInner::Locked(locked) => {
                return Some(PendingState::Locked {
                    executor_id: locked.executor_id,
                    run_id: locked.run_id,
                    lock_expires_at: locked.lock_expires_at,
                });
            }
            ExecutionEventInner::TemporarilyFailed {
                backoff_expires_at, ..
            }
            | ExecutionEventInner::TemporarilyTimedOut { backoff_expires_at }
            | ExecutionEventInner::Unlocked {
                backoff_expires_at, ..
            } => {
                return Some(PendingState::PendingAt {
                    scheduled_at: *backoff_expires_at,
                });
            }
            ExecutionEventInner::HistoryEvent {
                event:
                    HistoryEvent::JoinNext {
                        join_set_id,
                        run_expires_at,
                        closing,
                    },
            } => {
                let n = count_join_next(events, join_set_id);
                let nth = responses
                    .iter()
                    .filter(|r| r.event.join_set_id == *join_set_id)
                    .nth(n.saturating_sub(1));
                return Some(match nth {
                    Some(response) => PendingState::PendingAt {
                        scheduled_at: (*run_expires_at).max(response.created_at),
                    },
                    None => PendingState::BlockedByJoinSet {
                        join_set_id: join_set_id.clone(),
                        lock_expires_at: *run_expires_at,
                        closing: *closing,
                    },
                });
            }
            ExecutionEventInner::HistoryEvent { .. } => {}
            ExecutionEventInner::Created(created) => {
                return Some(PendingState::PendingAt {
                    scheduled_at: created.scheduled_at,
                });
            }
        }
    }
    None
}

/// A run that keeps its execution to itself by waiting warm (§8 of the semantics): the
/// execution's state comes from the run's last `JoinNext`, which holds it until the run's
/// deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WarmRun {
    /// The executor whose run wrote the `JoinNext`.
    pub executor_id: ExecutorId,
    /// The `JoinNext`'s `run_expires_at`: until then nobody else locks the execution.
    pub run_expires_at: DateTime<Utc>,
}

/// The warm run that keeps the execution with log `events` and state `state` waiting at `now`:
/// the state is `BlockedByJoinSet`, or `PendingAt` the deadline of the run's last `JoinNext`,
/// and that deadline is after `now`. `None` when the execution is due, locked, finished or
/// waiting for something else (a backoff, its schedule, a response that arrives after the
/// deadline).
#[must_use]
pub fn warm_run(
    events: &[ExecutionEvent],
    state: &PendingState,
    now: DateTime<Utc>,
) -> Option<WarmRun> {
    let mut newest_first = events.iter().rev().map(|event| &event.event);
    let run_expires_at = newest_first.find_map(|event| match event {
        ExecutionEventInner::HistoryEvent {
            event: HistoryEvent::JoinNext { run_expires_at, .. },
        } => Some(Some(*run_expires_at)),
        ExecutionEventInner::HistoryEvent { .. } => None,
        _ => Some(None),
    })??;
    let held = match *state {
        PendingState::BlockedByJoinSet {
            lock_expires_at, ..
        } => lock_expires_at == run_expires_at,
        PendingState::PendingAt { scheduled_at } => scheduled_at == run_expires_at,
        PendingState::Locked { .. } | PendingState::Finished { .. } => false,
    };
    if !held || run_expires_at <= now {
        return None;
    }
    // The run that wrote the `JoinNext` locked the execution last.
    let executor_id = newest_first.find_map(|event| match event {
        ExecutionEventInner::Locked(locked) => Some(Some(locked.executor_id)),
        ExecutionEventInner::HistoryEvent { .. } => None,
        _ => Some(None),
    })??;
    Some(WarmRun {
        executor_id,
        run_expires_at,
    })
}

/// The number of `JoinNext` events for `join_set_id` in `events`.
#[must_use]
pub fn count_join_next(events: &[ExecutionEvent], join_set_id: &JoinSetId) -> usize {
    events
        .iter()
        .filter(|e| {
            matches!(&e.event, ExecutionEventInner::HistoryEvent {
                event: HistoryEvent::JoinNext { join_set_id: j, .. }
            } if j == join_set_id)
        })
        .count()
}

/// The number of `TemporarilyFailed` and `TemporarilyTimedOut` events in `events`.
#[must_use]
pub fn temporary_event_count(events: &[ExecutionEvent]) -> u32 {
    u32::try_from(
        events
            .iter()
            .filter(|e| e.event.is_temporary_event())
            .count(),
    )
    .unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests;
