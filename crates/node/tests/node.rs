//! A node on every backend (memory, SQLite, PostgreSQL; the stores of test-support's
//! factories): an activity and a workflow that sleeps durably both finish (the workflow's child
//! created locked by the node's activity executor), the retention task
//! removes what its retention says, and a drain finishes a run inside its deadline and leaves
//! one past it to its lease, which a second node takes up once the lease expired, or at once
//! when it restarts under the same identity.

use concepts::{
    ClockFn, ComponentId, DbConnection, DbError, ExecutionEventInner, ExecutionId, JoinSetResponse,
    PendingStateKind, Version,
};
use conformance::StoreFactory;
use executor::Now;
use node::{DrainReport, ExecutorSettings, Node};
use std::{sync::Arc, time::Duration};
use test_utils::SimClock;
use timers_watcher::PrunerConfig;
use tokio::sync::mpsc;
use workflow::{ActivityCtx, Client, Function, WorkflowCtx, WorkflowError};

/// The bound of every wait that should end much sooner; reaching it fails the test.
const SAFETY: Duration = Duration::from_secs(60);

const DOUBLE: Function<u64, u64> = Function::new("test:node/api.double");
const NAP_THEN_DOUBLE: Function<u64, u64> = Function::new("test:node/flows.nap-then-double");
/// Sleeps its parameter in milliseconds on the first attempt; returns it at once after that.
const WORK: Function<u64, u64> = Function::new("test:node/api.work");

async fn double(_ctx: ActivityCtx, n: u64) -> Result<u64, String> {
    Ok(n * 2)
}

async fn nap_then_double(ctx: WorkflowCtx, n: u64) -> Result<u64, WorkflowError<String>> {
    ctx.sleep(Duration::from_millis(200)).await;
    Ok(ctx.call(&DOUBLE, &n).await?)
}

fn component() -> ComponentId {
    ComponentId::new("test", "node").unwrap()
}

/// A store of `factory`; the guard keeps its file or database alive.
async fn fresh(factory: &dyn StoreFactory) -> (Arc<dyn DbConnection>, conformance::TestStore) {
    let store = factory.fresh().await;
    (store.db.clone(), store)
}

async fn an_activity_and_a_sleeping_workflow_finish(factory: &dyn StoreFactory) {
    let (db, _guard) = fresh(factory).await;
    let node = Node::builder(db.clone(), Now)
        .activity(&DOUBLE, double)
        .workflow(&NAP_THEN_DOUBLE, nap_then_double)
        .start()
        .expect("a valid node");
    let client = Client::new(db.clone(), Now, component());

    let doubled = client.submit(&DOUBLE, &2).await.expect("submit");
    assert_eq!(doubled.result_within(SAFETY).await.expect("result"), 4);
    let workflow = client.submit(&NAP_THEN_DOUBLE, &21).await.expect("submit");
    assert_eq!(workflow.result_within(SAFETY).await.expect("result"), 42);
    // Only the node's timers watcher delivers the end of a durable sleep.
    let log = db.get(workflow.execution_id()).await.expect("the log");
    assert!(
        log.responses
            .iter()
            .any(|response| matches!(response.event.event, JoinSetResponse::DelayFinished { .. })),
        "{:?}",
        log.responses
    );
    // The workflow's child was created locked by the node's activity executor, idle and so
    // with a permit free, in the workflow's own write: its lease at version 1 bears the
    // `Created` event's time, and its outcome follows at version 2.
    let child = (log.responses.iter())
        .find_map(|response| match &response.event.event {
            JoinSetResponse::ChildExecutionFinished {
                child_execution_id,
                finished_version,
                ..
            } => Some((child_execution_id.clone(), *finished_version)),
            JoinSetResponse::DelayFinished { .. } => None,
        })
        .expect("the child's response");
    assert_eq!(child.1, Version(2), "Created, Locked, Finished");
    let child_log = db.get(&child.0).await.expect("the child's log");
    let activities = (node.executors().iter())
        .find(|info| info.functions.contains(&DOUBLE.ffqn().expect("an FQN")))
        .expect("the activity executor");
    match &child_log.events[1].event {
        ExecutionEventInner::Locked(locked) => {
            assert_eq!(locked.executor_id, activities.executor_id);
        }
        other => panic!("the child's first lease is not at version 1: {other:?}"),
    }
    assert_eq!(
        child_log.events[1].created_at, child_log.events[0].created_at,
        "locked in the write that created it"
    );

    let report = node.shutdown(SAFETY).await;
    assert_eq!(report.left, 0);
    db.close().await;
}

async fn the_retention_task_removes_what_finished_before_its_retention(factory: &dyn StoreFactory) {
    let (db, _guard) = fresh(factory).await;
    let clock = SimClock::epoch();
    let pruner = PrunerConfig {
        retention: Duration::from_secs(3_600),
        interval: Duration::from_millis(10),
        batch: 10,
    };
    let node = Node::builder(db.clone(), clock.clone())
        .activity(&DOUBLE, double)
        .pruner(pruner)
        .start()
        .expect("a valid node");
    let client = Client::new(db.clone(), clock.clone(), component());
    let old = client.submit(&DOUBLE, &1).await.expect("submit");
    old.result_within(SAFETY).await.expect("result");
    clock
        .move_time_forward(Duration::from_secs(2 * 3_600))
        .await;
    let recent = client.submit(&DOUBLE, &2).await.expect("submit");
    recent.result_within(SAFETY).await.expect("result");

    // The retention task says nothing when it deleted something: read until it did.
    let gone = tokio::time::timeout(SAFETY, async {
        while db.get(old.execution_id()).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(gone.is_ok(), "{} was not pruned", old.execution_id());
    assert!(matches!(
        db.get(old.execution_id()).await,
        Err(DbError::NotFound(_))
    ));
    let kept = db.get(recent.execution_id()).await.expect("kept");
    assert_eq!(kept.pending_state.kind(), PendingStateKind::Finished);

    node.shutdown(SAFETY).await;
    db.close().await;
}

/// The activity of [`WORK`], telling `started` about each run.
fn work(
    started: mpsc::UnboundedSender<ExecutionId>,
) -> impl Fn(ActivityCtx, u64) -> std::pin::Pin<Box<dyn Future<Output = Result<u64, String>> + Send>>
+ Send
+ Sync
+ 'static {
    move |ctx: ActivityCtx, millis: u64| {
        let started = started.clone();
        Box::pin(async move {
            let _ = started.send(ctx.execution_id.clone());
            if ctx.attempt == 0 {
                tokio::time::sleep(Duration::from_millis(millis)).await;
            }
            Ok(millis)
        })
    }
}

async fn a_drain_finishes_what_it_can_and_leaves_the_rest_to_a_later_node(
    factory: &dyn StoreFactory,
) {
    let (db, _guard) = fresh(factory).await;
    // The leases are judged on this clock, which stands still: whatever the drain takes, the
    // run it leaves stays locked until the clock is moved past its lease.
    let clock = SimClock::epoch();
    let lease = Duration::from_secs(60);
    let settings = ExecutorSettings {
        lock_expiry: lease,
        ..ExecutorSettings::default()
    };
    let (started, mut runs) = mpsc::unbounded_channel();
    let first = Node::builder(db.clone(), clock.clone())
        .activity(&WORK, work(started.clone()))
        .activity_settings(settings.clone())
        .start()
        .expect("a valid node");
    // One retry, due at once: the timeout of the lease left behind is retried.
    let client = Client::new(db.clone(), clock.clone(), component()).retries(1, Duration::ZERO);
    let quick = client.submit(&WORK, &100).await.expect("submit");
    let endless = client.submit(&WORK, &3_600_000).await.expect("submit");
    for _ in 0..2 {
        runs.recv().await.expect("a run started");
    }

    let report = first.shutdown(Duration::from_secs(3)).await;

    assert_eq!(
        report,
        DrainReport {
            finished: 1,
            left: 1,
            background_aborted: 0
        }
    );
    assert_eq!(quick.result_within(SAFETY).await.expect("result"), 100);
    let left = db.get(endless.execution_id()).await.expect("the log");
    assert_eq!(left.pending_state.kind(), PendingStateKind::Locked);

    // Past its lease, a second node's watcher times it out and its executor runs it again.
    clock
        .move_time_forward(lease + Duration::from_secs(1))
        .await;
    let second = Node::builder(db.clone(), clock.clone())
        .activity(&WORK, work(started))
        .activity_settings(settings)
        .start()
        .expect("a valid node");
    assert_eq!(
        endless.result_within(SAFETY).await.expect("result"),
        3_600_000
    );
    let log = db.get(endless.execution_id()).await.expect("the log");
    assert!(
        log.events
            .iter()
            .any(|event| matches!(event.event, ExecutionEventInner::TemporarilyTimedOut { .. })),
        "{:?}",
        log.events
    );
    let last_lock = log
        .events
        .iter()
        .rev()
        .find_map(|event| match &event.event {
            ExecutionEventInner::Locked(locked) => Some(locked.executor_id),
            _ => None,
        })
        .expect("locked");
    assert_eq!(last_lock, second.executors()[0].executor_id);
    assert_eq!(second.shutdown(SAFETY).await.left, 0);
    db.close().await;
}

async fn a_node_restarted_under_its_identity_takes_back_its_leases_at_once(
    factory: &dyn StoreFactory,
) {
    let (db, _guard) = fresh(factory).await;
    // The clock moves one second between the two processes and no further: the first
    // node's lease never expires, so only the second node's taking back can let the run
    // left behind go on.
    let clock = SimClock::epoch();
    let settings = ExecutorSettings {
        lock_expiry: Duration::from_secs(60),
        ..ExecutorSettings::default()
    };
    let (started, mut runs) = mpsc::unbounded_channel();
    let node = |started| {
        Node::builder(db.clone(), clock.clone())
            .identity("worker-1")
            .activity(&WORK, work(started))
            .activity_settings(settings.clone())
            .start()
            .expect("a valid node")
    };
    let first = node(started.clone());
    let first_executor = first.executors()[0].executor_id;
    let client = Client::new(db.clone(), clock.clone(), component()).retries(1, Duration::ZERO);
    let endless = client.submit(&WORK, &3_600_000).await.expect("submit");
    runs.recv().await.expect("a run started");
    assert_eq!(first.shutdown(Duration::ZERO).await.left, 1);
    clock.move_time_forward_sync(Duration::from_secs(1));

    let second = node(started);
    assert_eq!(second.executors()[0].executor_id, first_executor);
    assert_eq!(
        endless.result_within(SAFETY).await.expect("result"),
        3_600_000
    );
    let log = db.get(endless.execution_id()).await.expect("the log");
    let timed_out: Vec<_> = log
        .events
        .iter()
        .filter_map(|event| match event.event {
            ExecutionEventInner::TemporarilyTimedOut { backoff_expires_at } => {
                Some(backoff_expires_at)
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        timed_out,
        vec![clock.now()],
        "due at the restart: {:?}",
        log.events
    );
    assert_eq!(second.shutdown(SAFETY).await.left, 0);

    let other = Node::builder(db.clone(), clock.clone())
        .identity("worker-2")
        .activity(&WORK, |_ctx: ActivityCtx, n: u64| async move {
            Ok::<_, String>(n)
        })
        .start()
        .expect("a valid node");
    assert_ne!(other.executors()[0].executor_id, first_executor);
    other.shutdown(SAFETY).await;
    db.close().await;
}

/// One test per scenario and backend; a backend that cannot run here (no PostgreSQL server)
/// follows the skip rule of `test-utils`.
macro_rules! on_every_backend {
    ($($scenario:ident),* $(,)?) => {
        on_every_backend!(@backend memory, test_support::factories::MemoryFactory; $($scenario),*);
        on_every_backend!(@backend sqlite, test_support::factories::SqliteFactory; $($scenario),*);
        on_every_backend!(@backend postgres, test_support::factories::PostgresFactory; $($scenario),*);
    };
    (@backend $backend:ident, $factory:expr; $($scenario:ident),*) => {
        mod $backend {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $scenario() {
                    test_utils::set_up();
                    let factory = &$factory;
                    if let Some(reason) = conformance::StoreFactory::unavailable(factory) {
                        test_utils::skip(stringify!($scenario), &reason);
                        return;
                    }
                    super::$scenario(factory).await;
                }
            )*
        }
    };
}

on_every_backend!(
    an_activity_and_a_sleeping_workflow_finish,
    the_retention_task_removes_what_finished_before_its_retention,
    a_drain_finishes_what_it_can_and_leaves_the_rest_to_a_later_node,
    a_node_restarted_under_its_identity_takes_back_its_leases_at_once,
);
