//! E2, E14, E16 and E17: the spawned executor loop, on real time: woken by notifications, held
//! by a task limiter without spinning, closed promptly, and four executors sharing one store.

use super::{
    Fixture, SAFETY, config, ffqn, json_value, ms, ok, wait_until,
    workers::{CountingWorker, ScriptedWorker, Step},
};
use crate::StoreFactory;
use concepts::{ExecutionEventInner, PendingState, SupportedFunctionReturnValue};
use executor::{ExecConfig, ExecTask};
use serde_json::json;
use std::{sync::Arc, time::Duration};
use tokio::sync::Semaphore;

/// E2: a spawned executor with a 10 s `tick_sleep` runs a new execution within 2 s: it was
/// woken by a notification, not by polling.
pub async fn e2_spawned_executor_wakes_on_notification<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    let value = json_value(json!("done"));
    let worker = Arc::new(ScriptedWorker::new(
        ffqn("e2"),
        vec![Step::Ok(value.clone())],
    ));
    let config = ExecConfig {
        tick_sleep: Duration::from_secs(10),
        ..config()
    };
    let mut handle = ExecTask::spawn_new(worker, config, f.clock.clone(), f.db.clone());
    // Let the loop find the store empty and go to sleep in `wait_for_pending`. Should it not
    // be asleep yet, a correct executor still passes; only the check gets weaker.
    wait_until("the executor ticked", || handle.tick_count() >= 1).await;
    tokio::time::sleep(ms(100)).await;

    let started = std::time::Instant::now();
    let execution_id = f.create(f.request(ffqn("e2"), 0)).await;
    let result =
        f.db.wait_for_finished_result(&execution_id, Some(SAFETY))
            .await;
    let elapsed = started.elapsed();
    assert_eq!(result.expect("finished"), ok(&value));
    assert!(
        elapsed < Duration::from_secs(2),
        "finished after {elapsed:?}: a poll, not a wake-up"
    );

    let started = std::time::Instant::now();
    handle.close().await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "close took {:?}",
        started.elapsed()
    );
}

/// E14: a task limiter of 2 permits and 20 executions: never more than 2 workers at once, all
/// finish, and the loop does not spin while the permits are taken.
pub async fn e14_task_limiter_without_spinning<F: StoreFactory>(factory: &F) {
    const EXECUTIONS: usize = 20;
    let f = Fixture::new(factory).await;
    // Each run holds its permit for 20 ms of real time: a loop that spins while the permits
    // are taken would tick thousands of times meanwhile.
    let worker = Arc::new(CountingWorker::new(ffqn("e14"), ms(20)));
    let reqs: Vec<_> = (0..EXECUTIONS).map(|_| f.request(ffqn("e14"), 0)).collect();
    let ids: Vec<_> = reqs.iter().map(|req| req.execution_id.clone()).collect();
    f.db.create_batch(reqs).await.expect("create_batch");
    let limiter = Arc::new(Semaphore::new(2));
    let config = ExecConfig {
        // Long, so that every tick but the last is driven by work (a freed permit or a due
        // execution), never by the timeout.
        tick_sleep: Duration::from_secs(10),
        lock_expiry: Duration::from_secs(60),
        task_limiter: Some(limiter.clone()),
        ..config()
    };
    let mut handle = ExecTask::spawn_new(worker.clone(), config, f.clock.clone(), f.db.clone());

    for id in &ids {
        let result = f.db.wait_for_finished_result(id, Some(SAFETY)).await;
        assert_eq!(
            result.expect("finished"),
            Ok(SupportedFunctionReturnValue::None)
        );
    }
    handle.close().await;

    let max_running = worker.max_running();
    assert!(
        max_running <= 2,
        "{max_running} workers at once with two permits"
    );
    let runs = worker.runs();
    assert_eq!(runs.len(), EXECUTIONS);
    assert!(runs.values().all(|&n| n == 1), "each ran once: {runs:?}");
    // Every tick locks at least one execution, except after a timeout (10 s, none here) and
    // the last one that finds nothing left; allow twice that.
    let ticks = handle.tick_count();
    let bound = 2 * EXECUTIONS as u64 + 2;
    assert!(
        ticks <= bound,
        "{ticks} ticks for {EXECUTIONS} executions: the loop spins"
    );
    wait_until("every permit is released", || {
        limiter.available_permits() == 2
    })
    .await;
}

/// E16: `close` returns promptly (from a wait for due executions, and from a wait for a
/// permit), and no execution is locked after it; the watcher closes promptly too.
pub async fn e16_close_is_prompt<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    let worker = Arc::new(CountingWorker::new(ffqn("e16"), Duration::ZERO));
    let config = ExecConfig {
        tick_sleep: Duration::from_secs(10),
        ..config()
    };
    let mut handle = ExecTask::spawn_new(
        worker.clone(),
        config.clone(),
        f.clock.clone(),
        f.db.clone(),
    );
    let first = f.create(f.request(ffqn("e16"), 0)).await;
    let result = f.db.wait_for_finished_result(&first, Some(SAFETY)).await;
    assert_eq!(
        result.expect("the executor runs"),
        Ok(SupportedFunctionReturnValue::None)
    );

    let started = std::time::Instant::now();
    handle.close().await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "close took {:?}",
        started.elapsed()
    );
    let ticks = handle.tick_count();
    let second = f.create(f.request(ffqn("e16"), 0)).await;
    // Nothing can be awaited for "nothing happens": give a loop that wrongly outlived `close`
    // time to lock the new execution.
    tokio::time::sleep(ms(200)).await;
    assert_eq!(handle.tick_count(), ticks, "the loop ticked after close");
    assert!(matches!(
        f.state(&second).await,
        PendingState::PendingAt { .. }
    ));
    assert_eq!(worker.runs().len(), 1);
    handle.close().await; // idempotent

    // A loop that waits for a permit closes promptly too.
    let limiter = Arc::new(Semaphore::new(1));
    let _taken = limiter.clone().try_acquire_owned().expect("a free permit");
    let config = ExecConfig {
        task_limiter: Some(limiter),
        ..config
    };
    let mut handle = ExecTask::spawn_new(worker.clone(), config, f.clock.clone(), f.db.clone());
    wait_until("the executor ticked", || handle.tick_count() >= 1).await;
    let started = std::time::Instant::now();
    handle.close().await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "close took {:?}",
        started.elapsed()
    );
    assert!(matches!(
        f.state(&second).await,
        PendingState::PendingAt { .. }
    ));

    let watcher_config = timers_watcher::TimersWatcherConfig {
        tick_sleep: Duration::from_secs(10),
        leeway: ms(0),
    };
    let mut watcher = timers_watcher::spawn_new(f.db.clone(), watcher_config, f.clock.clone());
    let started = std::time::Instant::now();
    watcher.close().await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "close took {:?}",
        started.elapsed()
    );
}

/// E17: four executors over 2,000 executions: every execution runs and finishes exactly once.
pub async fn e17_four_executors_run_each_once<F: StoreFactory>(factory: &F) {
    const EXECUTIONS: usize = 2_000;
    let f = Fixture::new(factory).await;
    let worker = Arc::new(CountingWorker::new(ffqn("e17"), Duration::ZERO));
    let reqs: Vec<_> = (0..EXECUTIONS).map(|_| f.request(ffqn("e17"), 0)).collect();
    let ids: Vec<_> = reqs.iter().map(|req| req.execution_id.clone()).collect();
    let config = ExecConfig {
        tick_sleep: ms(200),
        lock_expiry: Duration::from_secs(60),
        ..config()
    };
    let mut handles: Vec<_> = (0..4)
        .map(|_| {
            ExecTask::spawn_new(
                worker.clone(),
                config.clone(),
                f.clock.clone(),
                f.db.clone(),
            )
        })
        .collect();
    f.db.create_batch(reqs).await.expect("create_batch");

    for id in &ids {
        let result =
            f.db.wait_for_finished_result(id, Some(Duration::from_secs(60)))
                .await;
        assert_eq!(
            result.expect("finished"),
            Ok(SupportedFunctionReturnValue::None)
        );
    }
    for handle in &mut handles {
        handle.close().await;
    }
    let runs = worker.runs();
    assert_eq!(runs.len(), EXECUTIONS);
    assert!(runs.values().all(|&n| n == 1), "an execution ran twice");
    for id in &ids {
        let log = f.log(id).await;
        let locks = log
            .events
            .iter()
            .filter(|e| matches!(e.event, ExecutionEventInner::Locked(_)));
        assert_eq!(locks.count(), 1, "{id} was locked more than once");
        assert_eq!(log.events.len(), 3, "{id}: {:?}", log.events);
    }
}
