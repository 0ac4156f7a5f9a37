//! The metrics of a known workload on every backend, read from a recording recorder
//! (`metrics-util`'s debugging recorder, one for the test binary, the tests taking turns).
//! Ten executions of an activity, two of them failing once and retried, one whose lease
//! expires while its worker hangs (the watcher times it out, a retry finishes it, and the hung
//! worker's late write is fenced), one workflow with three children, and one execution fired
//! by a schedule's trigger: the exact counts of every counter, the attempts of each function,
//! the gauges sampled before and after, a sample in every histogram, and a store error.

use concepts::{
    ClockFn as _, Json,
    schedule::{
        CreateScheduleRequest, Definition, RunSettings, TriggerScheduleRequest, TriggerTicks,
    },
};
use concepts::{DbConnection, metrics as m};
use conformance::StoreFactory;
use metrics_util::{
    CompositeKey, MetricKind,
    debugging::{DebugValue, DebuggingRecorder, Snapshotter},
};
use node::{ExecutorSettings, Node};
use std::{
    collections::HashMap,
    sync::{Arc, OnceLock},
    time::Duration,
};
use test_utils::SimClock;
use tokio::sync::Notify;
use workflow::{ActivityCtx, Client, Function, Response, WorkflowCtx, WorkflowError};

const SAFETY: Duration = Duration::from_secs(60);

const JOB: Function<u64, u64> = Function::new("test:metrics/api.job");
const CHILD: Function<u64, u64> = Function::new("test:metrics/api.child");
const FAN: Function<u64, u64> = Function::new("test:metrics/flows.fan");

/// `n` 1 and 2 fail their first attempt; `n` 3 hangs on its first until `release`.
fn job_fn(
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

async fn child_fn(_ctx: ActivityCtx, n: u64) -> Result<u64, String> {
    Ok(n)
}

async fn fan_fn(ctx: WorkflowCtx, n: u64) -> Result<u64, WorkflowError<String>> {
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

/// The one recorder of this test binary (a process has one global recorder), with recording
/// on; the tests take turns ([`ONE_AT_A_TIME`]) and each drains what the one before left.
fn snapshotter() -> &'static Snapshotter {
    static RECORDER: OnceLock<Snapshotter> = OnceLock::new();
    RECORDER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder
            .install()
            .expect("the only recorder of this test binary");
        // Recording is on once a program says it installed its recorder.
        concepts::metrics::describe();
        snapshotter
    })
}

/// The tests of this binary share its recorder: one at a time.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// What was recorded since the test began, by name and labels (`name{a=1,b=2}`, labels
/// sorted): each snapshot of the debugging recorder takes the counters' increments and the
/// histograms' samples since the one before, and the gauges as they are (setting them to 0).
#[derive(Default)]
struct Recorded {
    counters: HashMap<String, u64>,
    samples: HashMap<String, usize>,
    /// The gauges of the last snapshot.
    gauges: HashMap<String, f64>,
}

impl Recorded {
    fn read(&mut self, snapshotter: &Snapshotter) {
        self.gauges.clear();
        for (key, _, _, value) in snapshotter.snapshot().into_vec() {
            let key: CompositeKey = key;
            let (kind, key) = key.into_parts();
            let mut labels: Vec<String> = key
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            labels.sort();
            let name = format!("{}{{{}}}", key.name(), labels.join(","));
            match (kind, value) {
                (MetricKind::Counter, DebugValue::Counter(value)) => {
                    *self.counters.entry(name).or_default() += value;
                }
                (MetricKind::Histogram, DebugValue::Histogram(samples)) => {
                    *self.samples.entry(name).or_default() += samples.len();
                }
                (MetricKind::Gauge, DebugValue::Gauge(value)) => {
                    self.gauges.insert(name, value.into_inner());
                }
                (kind, value) => panic!("{name}: a {kind:?} of value {value:?}"),
            }
        }
    }

    fn counter(&self, name: &str, labels: &str) -> u64 {
        let key = format!("{name}{{{labels}}}");
        assert!(
            !self.samples.contains_key(&key) && !self.gauges.contains_key(&key),
            "{key} is not a counter"
        );
        self.counters.get(&key).copied().unwrap_or(0)
    }

    fn samples(&self, name: &str, labels: &str) -> usize {
        (self.samples.get(&format!("{name}{{{labels}}}")).copied()).unwrap_or(0)
    }

    /// A gauge of the last snapshot, which must hold it.
    fn gauge(&self, name: &str, labels: &str) -> f64 {
        let key = format!("{name}{{{labels}}}");
        *self
            .gauges
            .get(&key)
            .unwrap_or_else(|| panic!("no gauge {key}"))
    }
}

fn function(f: &Function<u64, u64>) -> String {
    format!("function={}", f.ffqn().expect("a valid name"))
}

/// The due gauges of `function` in the last snapshot: count, capped, oldest age.
fn due(recorded: &Recorded, function: &str) -> (f64, f64, f64) {
    (
        recorded.gauge(m::DUE_EXECUTIONS, function),
        recorded.gauge(m::DUE_CAPPED, function),
        recorded.gauge(m::OLDEST_DUE_AGE, function),
    )
}

async fn a_known_workload_is_counted_exactly(factory: &dyn StoreFactory) {
    let _alone = ONE_AT_A_TIME.lock().await;
    let snapshotter = snapshotter();
    let store = factory.fresh().await;
    let db: Arc<dyn DbConnection> = store.db.clone();
    // What an earlier test of this binary left is not this one's.
    snapshotter.snapshot();
    let mut recorded = Recorded::default();
    let clock = SimClock::epoch();
    let lease = Duration::from_secs(10);
    let release = Arc::new(Notify::new());
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
    let functions = [&JOB, &CHILD, &FAN].map(|f| f.ffqn().expect("a valid name"));
    let (job, child, fan) = (function(&JOB), function(&CHILD), function(&FAN));

    // Before any executor runs, 5 s later: ten jobs and the workflow are due since 0 s, the
    // jobs counted up to the cap of 4.
    clock.move_time_forward(Duration::from_secs(5)).await;
    node::sampler::sample(db.as_ref(), clock.now(), &functions, 4).await;
    recorded.read(snapshotter);
    assert_eq!(due(&recorded, &job), (4.0, 1.0, 5.0), "capped at 4");
    assert_eq!(due(&recorded, &fan), (1.0, 0.0, 5.0));
    assert_eq!(due(&recorded, &child), (0.0, 0.0, 0.0));

    let settings = ExecutorSettings {
        lock_expiry: lease,
        ..ExecutorSettings::default()
    };
    let node = Node::builder(db.clone(), clock.clone())
        .activity(&JOB, job_fn(release.clone()))
        .activity(&CHILD, child_fn)
        .activity_settings(settings)
        .workflow(&FAN, fan_fn)
        .start()
        .expect("a valid node");
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
    // A schedule of the child function, triggered by hand: its execution counts as created.
    let definition = Definition::new(
        "metrics-child".parse().expect("a name"),
        functions[1].clone(),
        Json(serde_json::json!(7)),
        "every 1h".parse().expect("a spec"),
    );
    let settings = RunSettings {
        component_id: concepts::ComponentId::new("test", "metrics").unwrap(),
        max_retries: 0,
        retry_exp_backoff: Duration::ZERO,
    };
    let now = clock.now();
    let schedule = CreateScheduleRequest {
        definition,
        settings,
        now,
    };
    db.create_schedule(schedule).await.expect("a schedule");
    let trigger = TriggerScheduleRequest {
        name: "metrics-child".parse().expect("a name"),
        ticks: TriggerTicks::Now,
        now,
    };
    let fired = db.trigger_schedule(trigger).await.expect("a trigger").fired;
    assert_eq!(fired.len(), 1);
    let result = db.wait_for_finished_result(&fired[0], Some(SAFETY)).await;
    assert!(result.expect("the triggered run").is_ok());
    // The hung run's lease expires: the watcher times it out, its retry finishes it.
    clock
        .move_time_forward(lease + Duration::from_secs(1))
        .await;
    assert_eq!(jobs[3].result_within(SAFETY).await.expect("a result"), 3);
    // The hung worker's late write is fenced by the version check.
    release.notify_one();
    let components: Vec<String> = (node.executors().iter())
        .map(|executor| format!("component={}", executor.component_id))
        .collect();
    assert_eq!(node.shutdown(SAFETY).await.left, 0);
    // Nothing is due any more.
    node::sampler::sample(db.as_ref(), clock.now(), &functions, 4).await;
    // A write the store refuses as closed: a store error, not retriable.
    db.close().await;
    let refused = client.submit(&JOB, &99).await;
    assert!(refused.is_err(), "a closed store creates nothing");
    recorded.read(snapshotter);

    for function in [&job, &child, &fan] {
        assert_eq!(due(&recorded, function), (0.0, 0.0, 0.0), "{function}");
    }
    assert_eq!(
        components.len(),
        2,
        "an activity executor and a workflow executor"
    );
    for component in &components {
        assert_eq!(recorded.gauge(m::RUNS_IN_FLIGHT, component), 0.0, "drained");
        assert_eq!(recorded.gauge(m::FREE_SLOTS, component), 0.0, "drained");
    }
    let counter = |name, labels: String| recorded.counter(name, &labels);
    assert_eq!(counter(m::EXECUTIONS_CREATED, job.clone()), 10);
    assert_eq!(
        counter(m::EXECUTIONS_CREATED, child.clone()),
        3 + 1,
        "one fired by its schedule"
    );
    assert_eq!(counter(m::EXECUTIONS_CREATED, fan.clone()), 1);
    for (function, ok) in [(&job, 10), (&child, 4), (&fan, 1)] {
        assert_eq!(
            counter(m::EXECUTIONS_FINISHED, format!("{function},outcome=ok")),
            ok
        );
        for outcome in [
            "error",
            "timeout",
            "unhandled_child_error",
            "failed",
            "cancelled",
        ] {
            let labels = format!("{function},outcome={outcome}");
            assert_eq!(
                counter(m::EXECUTIONS_FINISHED, labels),
                0,
                "{function} {outcome}"
            );
        }
    }
    // Every attempt once, by how it ended: the jobs' two failures and the expired lease
    // (whose worker's late write was fenced) besides their ten finishes; the workflow's one
    // run, which waited for its children warm and finished.
    for (function, expected) in [
        (&job, [10, 2, 0, 0, 0, 1]),
        (&child, [4, 0, 0, 0, 0, 0]),
        (&fan, [1, 0, 0, 0, 0, 0]),
    ] {
        let results = [
            "finished",
            "temporarily_failed",
            "timed_out",
            "unlocked",
            "by_worker",
            "lease_expired",
        ];
        let attempts =
            results.map(|result| counter(m::ATTEMPTS, format!("{function},result={result}")));
        assert_eq!(attempts, expected, "{function}: {results:?}");
    }
    assert_eq!(
        counter(m::RETRIES, job.clone()),
        2 + 1,
        "two failures and the expired lease"
    );
    assert_eq!(counter(m::RETRIES, child.clone()), 0);
    assert_eq!(counter(m::LEASES_EXPIRED, String::new()), 1);
    assert_eq!(
        counter(m::FENCED_WRITES, "operation=append_outcome".into()),
        1
    );
    assert_eq!(counter(m::SLEEPS_FIRED, String::new()), 0);
    assert_eq!(counter(m::EXECUTIONS_CANCELLED, String::new()), 0);
    let errors = |operation: &str, retriable: bool| {
        counter(
            m::STORE_ERRORS,
            format!("operation={operation},retriable={retriable}"),
        )
    };
    assert_eq!(errors("create", false), 1, "the write after the close");
    for operation in [
        "create",
        "lock_pending",
        "append_outcome",
        "append_batch",
        "schedule",
    ] {
        assert_eq!(errors(operation, true), 0, "{operation}");
        if operation != "create" {
            assert_eq!(errors(operation, false), 0, "{operation}");
        }
    }
    for (name, labels) in [
        (m::SCHEDULE_TO_START, &job),
        (m::ATTEMPT_DURATION, &job),
        (m::ATTEMPT_DURATION, &child),
        (m::ATTEMPT_DURATION, &fan),
        (m::CREATED_TO_FINISHED, &job),
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
        (m::STORE_WRITE_DURATION, &"operation=schedule".to_string()),
    ] {
        assert!(
            recorded.samples(name, labels) > 0,
            "no sample of {name}{{{labels}}}"
        );
    }
    assert_eq!(recorded.samples(m::EVENTS_REPLAYED, &fan), 1, "one run");
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
