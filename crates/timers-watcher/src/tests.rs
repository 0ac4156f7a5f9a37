//! The watcher's decisions, without a database.

use super::*;
use concepts::{DelayId, ExecutionId, JoinSetId, JoinSetResponse, Version};

const BACKOFF: Duration = Duration::from_secs(1);

fn now() -> DateTime<Utc> {
    DateTime::from_timestamp(1_000, 0).unwrap()
}

fn expired_child_lock(temporary_event_count: u32, max_retries: u32) -> ExpiredLock {
    let parent = ExecutionId::generate_at(now());
    let join_set_id: JoinSetId = "n:batch".parse().unwrap();
    ExpiredLock {
        execution_id: parent.next_level(&join_set_id, 1),
        ffqn: concepts::FunctionFqn::new("test:watcher/ifc", "child").unwrap(),
        executor_id: concepts::ExecutorId::from_parts(0, 1),
        next_version: Version(3),
        temporary_event_count,
        max_retries,
        retry_exp_backoff: BACKOFF,
        parent: Some((parent, join_set_id)),
        lock_expires_at: now(),
    }
}

#[test]
fn expired_lease_with_a_retry_left_times_out_temporarily() {
    let lock = expired_child_lock(1, 2);
    let write = expired_lock_write(&lock, now());
    assert_eq!(write.execution_id, lock.execution_id);
    assert_eq!(write.version, Version(3));
    assert_eq!(
        write.event,
        ExecutionEventInner::TemporarilyTimedOut {
            backoff_expires_at: add_saturating(now(), BACKOFF * 2)
        }
    );
    assert_eq!(
        write.parent_response(),
        None,
        "temporary outcomes never notify the parent"
    );
}

#[test]
fn expired_lease_without_a_retry_is_a_permanent_timeout_that_notifies_the_parent() {
    let lock = expired_child_lock(2, 2);
    let write = expired_lock_write(&lock, now());
    let result = Err(FinishedExecutionError::PermanentTimeout);
    assert_eq!(write.version, Version(3));
    assert_eq!(
        write.event,
        ExecutionEventInner::Finished {
            result: result.clone()
        }
    );
    let (parent, response) = write.parent_response().expect("the parent is notified");
    assert_eq!(
        Some((parent, response.event.join_set_id.clone())),
        lock.parent
    );
    assert_eq!(
        response.event.event,
        JoinSetResponse::ChildExecutionFinished {
            child_execution_id: lock.execution_id,
            finished_version: Version(3),
            result,
        }
    );
}

#[test]
fn expired_delay_is_delivered_to_its_join_set() {
    let delay = ExpiredDelay {
        execution_id: ExecutionId::generate_at(now()),
        join_set_id: "o:sleep".parse().unwrap(),
        delay_id: DelayId::generate_at(now()),
        expires_at: now(),
    };
    let response = delay_response(&delay);
    assert_eq!(response.join_set_id, delay.join_set_id);
    assert_eq!(
        response.event,
        JoinSetResponse::DelayFinished {
            delay_id: delay.delay_id
        }
    );
}
