//! The one write that records how a run ended, shared by the executor and the timers watcher:
//! an event at the version the writer read, plus the parent's response when it finishes a child.

use crate::{
    error::{DbError, ValidationError},
    event::{
        ExecutionEventInner, JoinSetResponse, JoinSetResponseEvent, JoinSetResponseEventOuter,
        Version,
    },
    ids::{ExecutionId, JoinSetId},
};
use chrono::{DateTime, Utc};

/// One event appended at one version; when the event is `Finished` and the execution has a
/// parent, also the `ChildExecutionFinished` response to the parent, written in the same
/// transaction (a child that finishes, for any reason, always notifies its parent; temporary
/// outcomes never do). Written by `DbExecutor::append_outcome`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutcomeWrite {
    /// The execution the event is appended to.
    pub execution_id: ExecutionId,
    /// The version the writer read; the append is refused if the log moved on.
    pub version: Version,
    /// The time of the write: the `created_at` of the event and of the parent's response.
    pub now: DateTime<Utc>,
    /// The event.
    pub event: ExecutionEventInner,
    /// The execution's parent and the join set it belongs to, for a child
    /// (`LockedExecution::parent`, `ExpiredLock::parent`).
    pub parent: Option<(ExecutionId, JoinSetId)>,
}

impl OutcomeWrite {
    /// The write of `event` at `version`; `parent` is the execution's parent and join set.
    #[must_use]
    pub fn new(
        execution_id: ExecutionId,
        version: Version,
        now: DateTime<Utc>,
        event: ExecutionEventInner,
        parent: Option<&(ExecutionId, JoinSetId)>,
    ) -> Self {
        Self {
            execution_id,
            version,
            now,
            event,
            parent: parent.cloned(),
        }
    }

    /// The parent and the response it receives, when `event` is `Finished` and the execution
    /// has a parent; `None` otherwise.
    ///
    /// The response is derived here, so that no writer can forget it: it carries the child's
    /// id, `version` as the finished version (a `Finished` event is stored at the version it
    /// was appended at) and the result, and arrives at `now`.
    #[must_use]
    pub fn parent_response(&self) -> Option<(ExecutionId, JoinSetResponseEventOuter)> {
        match (&self.event, &self.parent) {
            (ExecutionEventInner::Finished { result }, Some((parent_id, join_set_id))) => {
                let response = JoinSetResponseEventOuter {
                    created_at: self.now,
                    event: JoinSetResponseEvent {
                        join_set_id: join_set_id.clone(),
                        event: JoinSetResponse::ChildExecutionFinished {
                            child_execution_id: self.execution_id.clone(),
                            finished_version: self.version,
                            result: result.clone(),
                        },
                    },
                };
                Some((parent_id.clone(), response))
            }
            _ => None,
        }
    }
}

/// True when a write was refused because somebody else already wrote the outcome: the version
/// moved on, or the execution is already finished. The log already says what happened, so a
/// writer that lost this race has nothing to repair.
#[must_use]
pub fn is_lost_race(err: &DbError) -> bool {
    matches!(
        err,
        DbError::VersionMismatch { .. } | DbError::Validation(ValidationError::AlreadyFinished)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{FinishedExecutionError, SupportedFunctionReturnValue};

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(secs, 0).unwrap()
    }

    fn child_of(parent: &ExecutionId) -> (ExecutionId, (ExecutionId, JoinSetId)) {
        let join_set_id: JoinSetId = "n:batch".parse().unwrap();
        (
            parent.next_level(&join_set_id, 1),
            (parent.clone(), join_set_id),
        )
    }

    #[test]
    fn finished_child_responds_to_parent_with_its_finished_version() {
        let parent_id = ExecutionId::generate_at(at(0));
        let (child_id, parent) = child_of(&parent_id);
        let result = Err(FinishedExecutionError::PermanentTimeout);
        let write = OutcomeWrite::new(
            child_id.clone(),
            Version(4),
            at(7),
            ExecutionEventInner::Finished {
                result: result.clone(),
            },
            Some(&parent),
        );
        assert_eq!(write.parent.as_ref(), Some(&parent));
        let (to, response) = write
            .parent_response()
            .expect("a finished child notifies its parent");
        assert_eq!(to, parent_id);
        assert_eq!(response.created_at, at(7));
        assert_eq!(response.event.join_set_id, parent.1);
        assert_eq!(
            response.event.event,
            JoinSetResponse::ChildExecutionFinished {
                child_execution_id: child_id,
                finished_version: Version(4),
                result,
            }
        );
    }

    #[test]
    fn temporary_outcomes_and_top_level_executions_notify_nobody() {
        let parent_id = ExecutionId::generate_at(at(0));
        let (child_id, parent) = child_of(&parent_id);
        let timed_out = ExecutionEventInner::TemporarilyTimedOut {
            backoff_expires_at: at(9),
        };
        let write = OutcomeWrite::new(child_id, Version(2), at(7), timed_out, Some(&parent));
        assert_eq!(write.parent, Some(parent));
        assert_eq!(write.parent_response(), None);

        let finished = ExecutionEventInner::Finished {
            result: Ok(SupportedFunctionReturnValue::None),
        };
        let write = OutcomeWrite::new(parent_id, Version(2), at(7), finished, None);
        assert_eq!(write.parent_response(), None);
    }

    #[test]
    fn lost_races_are_version_mismatch_and_already_finished() {
        assert!(is_lost_race(&DbError::VersionMismatch {
            appending_version: Version(2),
            expected_version: Version(3),
        }));
        assert!(is_lost_race(&DbError::Validation(
            ValidationError::AlreadyFinished
        )));
        assert!(!is_lost_race(&DbError::Closed));
        assert!(!is_lost_race(&DbError::Validation(
            ValidationError::AlreadyLocked
        )));
    }
}
