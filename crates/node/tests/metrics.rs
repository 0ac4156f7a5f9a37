//! The metrics of a known workload on every backend, read from a recording recorder
//! (`metrics-util`'s debugging recorder, installed for the test's process: the test runner
//! runs each test in a process of its own). Ten executions of an activity, two of them
//! failing once and retried, one whose lease expires while its worker hangs (the watcher
//! times it out, a retry finishes it, and the hung worker's late write is fenced), and one
//! workflow with three children: the exact counts, and a sample in every histogram.

use concepts::{DbConnection, metrics as m};
use conformance::StoreFactory;
use metrics_util::{
    CompositeKey, MetricKind,
    debugging::{DebugValue, DebuggingRecorder, Snapshotter},
};
use node::{ExecutorSettings, Node};
use std::{collections::HashMap, sync::Arc, time::Duration};
use test_utils::SimClock;
use tokio::sync::Notify;
use workflow::{ActivityCtx, Client, Function, Response, WorkflowCtx, WorkflowError};

const SAFETY: Duration = Duration::from_secs(60);

const JOB: Function<u64, u64> = Function::new("test:metrics/api.job");
const CHILD: Function<u64, u64> = Function::new("test:metrics/api.child");
const FAN: Function<u64, u64> = Function::new("test:metrics/flows.fan");

/// `n` 1 and 2 fail their first attempt; `n` 3 hangs on its first until `release`.
fn job(
    release: Arc<Notify>,
) -> impl Fn(ActivityCtx, u64) -> futures_util::future::BoxFuture<'static, Result<u64, String>>
+ Send
+ Sync
+ 'static {
    move |ctx: ActivityCtx, n: u64| {
        let release = release.clone();
        Box::pin(async move {
            match (n, ctx.attempt) {
                (1 | 2, 0) => Err(format!("{n} fails once")),
                (3, 0) => {
                    release.notified().await;
                    Ok(n)
                }
                _ => Ok(n),
            }
        })
    }
}

async fn child(_ctx: ActivityCtx, n: u64) -> Result<u64, String> {
    Ok(n)
}

async fn fan(ctx: WorkflowCtx, n: u64) -> Result<u64, WorkflowError<String>> {
    let children = ctx.join_set_named("children");
    for k in 0..n {
        children.submit(&CHILD, &k);
    }
    let mut sum = 0;
    while let Some(Response::Child(response)) = children.next().await {
        sum += response.into_result::<u64>()?;
    }
    Ok(sum)
}

/// Values by name and labels (`name{a=1,b=2}`, labels sorted).
struct Metrics(HashMap<String, (MetricKind, DebugValue)>);

impl Metrics {
    fn read(snapshotter: &Snapshotter) -> Self {
        let mut values = HashMap::new();
        for (key, _, _, value) in snapshotter.snapshot().into_vec() {
            let key: CompositeKey = key;
            let (kind, key) = key.into_parts();
            let mut labels: Vec<String> = key
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            labels.sort();
            values.insert(
                format!("{}{{{}}}", key.name(), labels.join(",")),
                (kind, value),
            );
        }
        Self(values)
    }

    fn counter(&self, name: &str, labels: &str) -> u64 {
        match self.0.get(&format!("{name}{{{labels}}}")) {
            Some((_, DebugValue::Counter(value))) => *value,
            None => 0,
            Some(other) => panic!("{name}{{{labels}}} is not a counter: {other:?}"),
        }
    }

    fn samples(&self, name: &str, labels: &str) -> usize {
        match self.0.get(&format!("{name}{{{labels}}}")) {
            Some((_, DebugValue::Histogram(samples))) => samples.len(),
            None => 0,
            Some(other) => panic!("{name}{{{labels}}} is not a histogram: {other:?}"),
        }
    }
}

fn function(f: &Function<u64, u64>) -> String {
    format!("function={}", f.ffqn().expect("a valid name"))
}

async fn a_known_workload_is_counted_exactly(factory: &dyn StoreFactory) {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder of this process");
    // Recording is on once a program says it installed its recorder.
    concepts::metrics::describe();
    let store = factory.fresh().await;
    let db: Arc<dyn DbConnection> = store.db.clone();
    let clock = SimClock::epoch();
    let lease = Duration::from_secs(10);
    let release = Arc::new(Notify::new());
    let settings = ExecutorSettings {
        lock_expiry: lease,
        ..ExecutorSettings::default()
    };
    let node = Node::builder(db.clone(), clock.clone())
        .activity(&JOB, job(release.clone()))
        .activity(&CHILD, child)
        .activity_settings(settings)
        .workflow(&FAN, fan)
        .start()
        .expect("a valid node");
    let client = Client::new(
        db.clone(),
        clock.clone(),
        concepts::ComponentId::new("test", "metrics").unwrap(),
    )
    .retries(1, Duration::ZERO);
    let mut jobs = Vec::new();
    for n in 0..10 {
        jobs.push(client.submit(&JOB, &n).await.expect("submit"));
    }
    let workflow = client.submit(&FAN, &3).await.expect("submit");
    assert_eq!(
        workflow
            .result_within(SAFETY)
            .await
            .expect("the workflow's result"),
        3
    );
    for (n, submitted) in jobs.iter().enumerate() {
        if n != 3 {
            assert_eq!(
                submitted.result_within(SAFETY).await.expect("a result"),
                n as u64
            );
        }
    }
    // The hung run's lease expires: the watcher times it out, its retry finishes it.
    clock
        .move_time_forward(lease + Duration::from_secs(1))
        .await;
    assert_eq!(jobs[3].result_within(SAFETY).await.expect("a result"), 3);
    // The hung worker's late write is fenced by the version check.
    release.notify_one();
    assert_eq!(node.shutdown(SAFETY).await.left, 0);

    let metrics = Metrics::read(&snapshotter);
    let (job, child, fan) = (function(&JOB), function(&CHILD), function(&FAN));
    assert_eq!(metrics.counter(m::EXECUTIONS_CREATED, &job), 10);
    assert_eq!(metrics.counter(m::EXECUTIONS_CREATED, &child), 3);
    assert_eq!(metrics.counter(m::EXECUTIONS_CREATED, &fan), 1);
    assert_eq!(
        metrics.counter(m::EXECUTIONS_FINISHED, &format!("{job},outcome=ok")),
        10
    );
    assert_eq!(
        metrics.counter(m::EXECUTIONS_FINISHED, &format!("{child},outcome=ok")),
        3
    );
    assert_eq!(
        metrics.counter(m::EXECUTIONS_FINISHED, &format!("{fan},outcome=ok")),
        1
    );
    assert_eq!(
        metrics.counter(m::ATTEMPTS, &format!("{job},result=finished")),
        10
    );
    assert_eq!(
        metrics.counter(m::ATTEMPTS, &format!("{job},result=temporarily_failed")),
        2
    );
    assert_eq!(metrics.counter(m::RETRIES, &job), 2);
    assert_eq!(metrics.counter(m::LEASES_EXPIRED, ""), 1);
    assert_eq!(
        metrics.counter(m::FENCED_WRITES, "operation=append_outcome"),
        1
    );
    assert_eq!(metrics.counter(m::SLEEPS_FIRED, ""), 0);
    for (name, labels) in [
        (m::SCHEDULE_TO_START, &job),
        (m::ATTEMPT_DURATION, &job),
        (m::CREATED_TO_FINISHED, &job),
        (m::EVENTS_REPLAYED, &fan),
        (m::STORE_WRITE_DURATION, &"operation=create".to_string()),
        (
            m::STORE_WRITE_DURATION,
            &"operation=lock_pending".to_string(),
        ),
        (
            m::STORE_WRITE_DURATION,
            &"operation=append_outcome".to_string(),
        ),
        (
            m::STORE_WRITE_DURATION,
            &"operation=append_batch".to_string(),
        ),
    ] {
        assert!(
            metrics.samples(name, labels) > 0,
            "no sample of {name}{{{labels}}}"
        );
    }
    db.close().await;
}

macro_rules! on_every_backend {
    ($($backend:ident: $factory:expr),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $backend() {
                test_utils::set_up();
                let factory = &$factory;
                if let Some(reason) = conformance::StoreFactory::unavailable(factory) {
                    test_utils::skip(stringify!($backend), &reason);
                    return;
                }
                a_known_workload_is_counted_exactly(factory).await;
            }
        )*
    };
}

on_every_backend!(
    memory: test_support::factories::MemoryFactory,
    sqlite: test_support::factories::SqliteFactory,
    postgres: test_support::factories::PostgresFactory,
);
