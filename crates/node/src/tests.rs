//! The builder's checks (each mistake refused with its own error, nothing started), what a
//! started node lists, and its background tasks on tokio's paused clock.

use super::*;
use async_trait::async_trait;
use concepts::{ComponentId, DbConnection, FunctionFqn, PendingState};
use executor::{Now, Worker, WorkerContext, WorkerResult};
use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};
use timers_watcher::{PrunerConfig, PrunerConfigError, TimersWatcherConfig};
use workflow::{ActivityCtx, Function, WorkflowCtx, WorkflowError};

const ECHO: Function<u64, u64> = Function::new("test:node/api.echo");
const OTHER: Function<u64, u64> = Function::new("test:node/api.other");
const FLOW: Function<u64, u64> = Function::new("test:node/flows.flow");

async fn echo(_ctx: ActivityCtx, n: u64) -> Result<u64, String> {
    Ok(n)
}

async fn flow(_ctx: WorkflowCtx, n: u64) -> Result<u64, WorkflowError<String>> {
    Ok(n)
}

/// A hand-written worker of the given functions (it never runs here).
struct Exporting(Vec<FunctionFqn>);

#[async_trait]
impl Worker for Exporting {
    async fn run(&self, ctx: WorkerContext) -> WorkerResult {
        WorkerResult::Ok(concepts::SupportedFunctionReturnValue::None, ctx.version)
    }

    fn exported_functions(&self) -> &[FunctionFqn] {
        &self.0
    }
}

fn exporting(names: &[&str]) -> Arc<dyn Worker> {
    Arc::new(Exporting(
        names.iter().map(|name| name.parse().unwrap()).collect(),
    ))
}

async fn store() -> Arc<dyn DbConnection> {
    conformance::StoreFactory::fresh(&test_support::factories::MemoryFactory)
        .await
        .db
}

async fn builder() -> NodeBuilder<Now> {
    Node::builder(store().await, Now)
}

/// The error `start` refuses `builder` with.
fn refused(builder: NodeBuilder<Now>) -> NodeError {
    match builder.start() {
        Ok(_) => panic!("the node started"),
        Err(err) => err,
    }
}

#[tokio::test]
async fn a_function_registered_twice_is_refused_wherever_it_was_registered() {
    let twice = refused(builder().await.activity(&ECHO, echo).activity(&ECHO, echo));
    assert_eq!(
        twice,
        NodeError::DuplicateFunction {
            function: ECHO.name().to_string()
        }
    );
    assert!(
        twice.to_string().starts_with(
            "test:node/api.echo is registered twice on this node: each function runs on one \
             worker, so register it once"
        ),
        "{twice}"
    );
    // As an activity and as a workflow, or on the node and on a worker of its own.
    let both = refused(builder().await.activity(&ECHO, echo).workflow(&ECHO, flow));
    assert!(
        matches!(both, NodeError::DuplicateFunction { .. }),
        "{both}"
    );
    let on_a_worker = refused(
        builder()
            .await
            .activity(&ECHO, echo)
            .worker(exporting(&[ECHO.name()]), ExecutorSettings::default()),
    );
    assert!(
        matches!(on_a_worker, NodeError::DuplicateFunction { .. }),
        "{on_a_worker}"
    );
    let on_two_workers = refused(
        builder()
            .await
            .worker(exporting(&[OTHER.name()]), ExecutorSettings::default())
            .worker(exporting(&[OTHER.name()]), ExecutorSettings::default()),
    );
    assert_eq!(
        on_two_workers,
        NodeError::DuplicateFunction {
            function: OTHER.name().to_string()
        }
    );
}

#[tokio::test]
async fn a_zero_concurrency_is_refused() {
    let err = refused(builder().await.activity(&ECHO, echo).concurrency(0));
    assert_eq!(err, NodeError::ZeroConcurrency);
    assert!(err.to_string().contains("concurrency is 0"), "{err}");
    let own = ExecutorSettings {
        concurrency: Some(0),
        ..ExecutorSettings::default()
    };
    let err = refused(builder().await.activity(&ECHO, echo).activity_settings(own));
    assert_eq!(
        err,
        NodeError::ZeroWorkerConcurrency {
            worker: "the node's activities (component activity:default)".to_string()
        }
    );
}

#[tokio::test]
async fn executor_settings_that_cannot_work_are_refused_naming_the_worker() {
    let component: ComponentId = "payments:charges".parse().unwrap();
    let cases = [
        (
            ExecutorSettings {
                lock_expiry: Duration::ZERO,
                ..ExecutorSettings::default()
            },
            "lock expiry",
        ),
        (
            ExecutorSettings {
                batch_size: 0,
                ..ExecutorSettings::default()
            },
            "batch size",
        ),
        (
            ExecutorSettings {
                tick_sleep: Duration::ZERO,
                ..ExecutorSettings::default()
            },
            "tick sleep",
        ),
    ];
    for (settings, what) in cases {
        let settings = ExecutorSettings {
            component_id: Some(component.clone()),
            ..settings
        };
        let err = refused(
            builder()
                .await
                .activity(&ECHO, echo)
                .worker(exporting(&[OTHER.name()]), settings),
        );
        let message = err.to_string();
        assert!(
            message.starts_with(&format!(
                "the {what} of worker 1 (component payments:charges) is 0"
            )),
            "{message}"
        );
    }
    let err = refused(
        builder()
            .await
            .worker(exporting(&[]), ExecutorSettings::default()),
    );
    assert_eq!(
        err,
        NodeError::NoFunctions {
            worker: "worker 1 (component worker:default)".to_string()
        }
    );
}

#[tokio::test]
async fn a_watcher_or_retention_task_that_cannot_work_is_refused() {
    let no_tick = TimersWatcherConfig {
        tick_sleep: Duration::ZERO,
        leeway: Duration::ZERO,
    };
    let err = refused(
        builder()
            .await
            .activity(&ECHO, echo)
            .timers_watcher(no_tick),
    );
    assert_eq!(err, NodeError::ZeroWatcherTick);
    let zero_batch = PrunerConfig {
        retention: Duration::from_secs(60),
        interval: Duration::from_secs(60),
        batch: 0,
    };
    let err = refused(builder().await.activity(&ECHO, echo).pruner(zero_batch));
    assert_eq!(err, NodeError::Pruner(PrunerConfigError::ZeroBatch));
    assert!(
        err.to_string()
            .starts_with("the retention task: the pruner's batch is 0"),
        "{err}"
    );
}

#[tokio::test]
async fn a_node_with_nothing_to_run_is_refused_and_a_watcher_alone_is_something() {
    let err = refused(builder().await.without_timers_watcher());
    assert_eq!(err, NodeError::NothingToRun);
    let watcher = builder()
        .await
        .start()
        .expect("a node of the watcher alone");
    assert!(watcher.executors().is_empty());
    assert!(watcher.runs_timers_watcher());
    assert_eq!(
        watcher.shutdown(Duration::from_secs(1)).await,
        DrainReport::default()
    );
    let retention = builder()
        .await
        .without_timers_watcher()
        .retention(Duration::from_secs(3_600))
        .start()
        .expect("a node of the retention task alone");
    assert!(retention.runs_retention() && !retention.runs_timers_watcher());
    retention.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn an_illegal_function_name_is_refused() {
    // Only non-ASCII whitespace gets past `Function::new`'s compile-time check.
    let name: &'static str = String::from("test:node/api.ec\u{2003}ho").leak();
    let illegal = Function::<u64, u64>::new(name);
    let err = refused(builder().await.activity(&illegal, echo));
    assert!(
        matches!(err, NodeError::InvalidFunctionName { name: named, .. } if named == name),
        "{err}"
    );
}

#[test]
fn starting_outside_a_tokio_runtime_is_refused() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let builder = runtime.block_on(builder()).activity(&ECHO, echo);
    assert_eq!(refused(builder), NodeError::NoRuntime);
}

#[tokio::test]
async fn a_started_node_lists_its_executors_and_functions() {
    let flows: ComponentId = "flows:orders".parse().unwrap();
    let node = builder()
        .await
        .worker(exporting(&[OTHER.name()]), ExecutorSettings::default())
        .workflow(&FLOW, flow)
        .activity(&ECHO, echo)
        .workflow_settings(ExecutorSettings {
            component_id: Some(flows.clone()),
            ..ExecutorSettings::default()
        })
        .concurrency(4)
        .start()
        .expect("a valid node");
    let listed: Vec<(String, Vec<FunctionFqn>)> = node
        .executors()
        .iter()
        .map(|info| (info.component_id.to_string(), info.functions.clone()))
        .collect();
    let ffqn = |function: &Function<u64, u64>| function.ffqn().unwrap();
    assert_eq!(
        listed,
        [
            ("activity:default".to_string(), vec![ffqn(&ECHO)]),
            (flows.to_string(), vec![ffqn(&FLOW)]),
            ("worker:default".to_string(), vec![ffqn(&OTHER)]),
        ]
    );
    assert_eq!(node.functions(), [ffqn(&ECHO), ffqn(&FLOW), ffqn(&OTHER)]);
    let ids: std::collections::HashSet<_> = node
        .executors()
        .iter()
        .map(|info| info.executor_id)
        .collect();
    assert_eq!(ids.len(), 3, "one executor each");
    assert_eq!(
        node.shutdown(Duration::from_secs(1)).await,
        DrainReport::default()
    );
}

#[tokio::test(start_paused = true)]
async fn background_tasks_are_signalled_and_aborted_at_the_deadline() {
    let stopped = Arc::new(AtomicBool::new(false));
    let dropped = Arc::new(AtomicBool::new(false));
    let (stopped_by_signal, dropped_by_abort) = (stopped.clone(), dropped.clone());
    struct SetOnDrop(Arc<AtomicBool>);
    impl Drop for SetOnDrop {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let node = builder()
        .await
        .without_timers_watcher()
        .background("polite", move |signal| async move {
            let seen = signal.clone();
            signal.fired().await;
            stopped_by_signal.store(seen.has_fired(), Ordering::SeqCst);
        })
        .background("stubborn", move |_signal| async move {
            let _guard = SetOnDrop(dropped_by_abort);
            std::future::pending::<()>().await;
        })
        .start()
        .expect("a node of background tasks alone");
    let started = tokio::time::Instant::now();
    let report = node.shutdown(Duration::from_secs(5)).await;
    assert_eq!(
        report,
        DrainReport {
            finished: 0,
            left: 0,
            background_aborted: 1
        }
    );
    assert!(
        stopped.load(Ordering::SeqCst),
        "the polite task saw the signal"
    );
    assert!(
        dropped.load(Ordering::SeqCst),
        "the stubborn task was aborted"
    );
    assert_eq!(
        tokio::time::Instant::now() - started,
        Duration::from_secs(5)
    );
}

#[tokio::test]
async fn the_catalog_lists_every_function_with_its_executors_component_and_typed_checks() {
    let node = builder()
        .await
        .activity(&ECHO, echo)
        .workflow(&FLOW, flow)
        .activity_settings(ExecutorSettings {
            component_id: Some(ComponentId::new("activity", "echoes").unwrap()),
            ..ExecutorSettings::default()
        })
        .worker(
            exporting(&["test:node/api.hand"]),
            ExecutorSettings::default(),
        )
        .new_execution_retries(7, Duration::from_millis(250))
        .start()
        .expect("a valid node");
    let catalog = node.catalog().clone();
    let names: Vec<String> = catalog.functions().map(|f| f.ffqn().to_string()).collect();
    assert_eq!(
        names,
        [
            "test:node/api.echo",
            "test:node/api.hand",
            "test:node/flows.flow"
        ]
    );
    let echo = catalog.get(&ECHO.ffqn().unwrap()).unwrap();
    assert_eq!(echo.defaults().component_id.to_string(), "activity:echoes");
    assert_eq!(echo.defaults().max_retries, 7);
    assert_eq!(
        echo.defaults().retry_exp_backoff,
        Duration::from_millis(250)
    );
    assert!(echo.checks_params());
    assert!(echo.check(&serde_json::json!(3)).is_ok());
    assert!(echo.check(&serde_json::json!("three")).is_err());
    let flow = catalog.get(&FLOW.ffqn().unwrap()).unwrap();
    assert_eq!(flow.defaults().component_id.to_string(), "workflow:default");
    assert!(flow.check(&serde_json::json!(-1)).is_err(), "a u64");
    let hand = catalog.get(&"test:node/api.hand".parse().unwrap()).unwrap();
    assert_eq!(hand.defaults().component_id.to_string(), "worker:default");
    assert!(!hand.checks_params());
    assert!(hand.check(&serde_json::json!({"any": "thing"})).is_ok());
    assert_eq!(
        catalog.unknown_defaults(),
        &ExecutionDefaults::unknown_function()
    );
    node.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn describe_replaces_an_entry_and_refuses_a_function_the_node_does_not_run() {
    let hand: FunctionFqn = "test:node/api.hand".parse().unwrap();
    let described = CatalogFunction::new(
        hand.clone(),
        ExecutionDefaults {
            component_id: ComponentId::new("activity", "hand").unwrap(),
            max_retries: 1,
            retry_exp_backoff: Duration::from_millis(10),
        },
    )
    .params::<u64>();
    let unknown = ExecutionDefaults::new(ComponentId::new("elsewhere", "x").unwrap());
    let node = builder()
        .await
        .worker(
            exporting(&["test:node/api.hand"]),
            ExecutorSettings::default(),
        )
        .describe(described)
        .unknown_functions(unknown.clone())
        .start()
        .expect("a valid node");
    let entry = node.catalog().get(&hand).unwrap();
    assert_eq!(entry.defaults().component_id.to_string(), "activity:hand");
    assert!(entry.check(&serde_json::json!("x")).is_err());
    assert_eq!(node.catalog().unknown_defaults(), &unknown);
    node.shutdown(Duration::from_secs(5)).await;

    let stranger = CatalogFunction::new(
        "test:node/api.nobody".parse().unwrap(),
        ExecutionDefaults::unknown_function(),
    );
    let refused = refused(builder().await.activity(&ECHO, echo).describe(stranger));
    assert_eq!(
        refused,
        NodeError::DescribedFunctionNotRun {
            function: "test:node/api.nobody".into()
        }
    );
}

fn submission(ffqn: &str, params: serde_json::Value, id: Option<&str>) -> Submission {
    Submission {
        ffqn: ffqn.parse().unwrap(),
        params,
        execution_id: id.map(|id| id.parse().unwrap()),
        metadata: concepts::ExecutionMetadata::default(),
    }
}

#[tokio::test]
async fn submit_creates_once_and_refuses_a_conflict_a_child_id_and_refused_params() {
    let db = store().await;
    let echo = CatalogFunction::new(
        ECHO.ffqn().unwrap(),
        ExecutionDefaults::new(ComponentId::new("activity", "echo").unwrap()),
    )
    .params::<u64>();
    let catalog = Catalog::new().with(echo);
    let id = "E_01KCZ8JPZ4NWNHBVH5M8T4D2QX";
    let submit_echo = |params| {
        submit(
            db.as_ref(),
            &catalog,
            &Now,
            submission(ECHO.name(), params, Some(id)),
        )
    };

    let created = submit_echo(serde_json::json!(5)).await.expect("created");
    assert!(
        matches!(&created, Submitted::Created { execution_id, pending_state: PendingState::PendingAt { .. } }
            if execution_id.to_string() == id),
        "{created:?}"
    );
    let log = db.get(created.execution_id()).await.expect("stored");
    match &log.events[0].event {
        concepts::ExecutionEventInner::Created(created) => {
            let concepts::Created {
                component_id,
                max_retries,
                ..
            } = &**created;
            assert_eq!(component_id.to_string(), "activity:echo");
            assert_eq!(*max_retries, 3);
        }
        other => panic!("{other:?}"),
    }
    let again = submit_echo(serde_json::json!(5)).await.expect("a repeat");
    assert!(
        matches!(again, Submitted::AlreadyExisted { .. }),
        "{again:?}"
    );
    let conflict = submit_echo(serde_json::json!(6)).await.unwrap_err();
    assert!(
        matches!(&conflict, SubmitError::Conflict { differences, .. }
            if differences == &[concepts::CreateConflict::Params]),
        "{conflict:?}"
    );
    assert_eq!(
        conflict.to_string(),
        format!("{id} already exists with other parameters")
    );

    // Refused before anything is written.
    let other_id = "E_01KCZ8JPZ4NWNHBVH5M8T4D2QY";
    let refused = submit(
        db.as_ref(),
        &catalog,
        &Now,
        submission(ECHO.name(), serde_json::json!("five"), Some(other_id)),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(refused, SubmitError::ParamsRefused { .. }),
        "{refused:?}"
    );
    assert!(matches!(
        db.get(&other_id.parse().unwrap()).await,
        Err(concepts::DbError::NotFound(_))
    ));
    let child = submit(
        db.as_ref(),
        &catalog,
        &Now,
        submission(
            ECHO.name(),
            serde_json::json!(1),
            Some(&format!("{id}.n:x_1")),
        ),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(child, SubmitError::NotTopLevel { .. }),
        "{child:?}"
    );

    // A function the catalog does not know takes any parameters and the unknown settings.
    let elsewhere = submit(
        db.as_ref(),
        &catalog,
        &Now,
        submission(
            "test:node/api.elsewhere",
            serde_json::json!({"a": [1]}),
            None,
        ),
    )
    .await
    .expect("created");
    let log = db.get(elsewhere.execution_id()).await.expect("stored");
    match &log.events[0].event {
        concepts::ExecutionEventInner::Created(created) => {
            let concepts::Created { component_id, .. } = &**created;
            assert_eq!(component_id.to_string(), "submit:default");
        }
        other => panic!("{other:?}"),
    }
    db.close().await;
}

#[tokio::test]
async fn wait_for_result_answers_none_at_its_timeout_and_the_result_once_finished() {
    let db = store().await;
    let catalog = Catalog::new();
    let promise = submit(
        db.as_ref(),
        &catalog,
        &Now,
        submission("stele:stub.answer", serde_json::json!(null), None),
    )
    .await
    .expect("created");
    let id = promise.execution_id().clone();
    let slice = Duration::from_millis(5);
    let none = wait_for_result(db.as_ref(), &id, Some(Duration::from_millis(20)), slice).await;
    assert!(matches!(none, Ok(None)), "{none:?}");
    db.complete(concepts::CompleteRequest {
        execution_id: id.clone(),
        now: concepts::ClockFn::now(&Now),
        value: concepts::SupportedFunctionReturnValue::InfallibleOrResultOk(concepts::Json(
            serde_json::json!(42),
        )),
    })
    .await
    .expect("completed");
    let result = wait_for_result(db.as_ref(), &id, None, slice)
        .await
        .expect("finished");
    assert!(result.is_some_and(|result| result.is_ok()));
    let unknown = wait_for_result(
        db.as_ref(),
        &"E_01KCZ8JPZ4NWNHBVH5M8T4D2QZ".parse().unwrap(),
        Some(slice),
        slice,
    )
    .await;
    assert!(
        matches!(unknown, Err(concepts::DbError::NotFound(_))),
        "{unknown:?}"
    );
    db.close().await;
}

/// A schedule of `ECHO(n)` every second.
fn echo_schedule(n: u64) -> concepts::schedule::Definition {
    concepts::schedule::Definition::new(
        "echo-every-second".parse().unwrap(),
        ECHO.ffqn().unwrap(),
        concepts::Json(serde_json::json!(n)),
        "every 1s".parse().unwrap(),
    )
}

/// Polls `check` until it is true, failing after ten seconds.
async fn eventually<F: std::future::Future<Output = bool>>(what: &str, check: impl Fn() -> F) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !check().await {
        assert!(std::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_declared_schedule_is_kept_stored_fires_and_a_refused_one_stops_the_start() {
    let db = store().await;
    let name: concepts::schedule::ScheduleName = "echo-every-second".parse().unwrap();
    let node = Node::builder(db.clone(), Now)
        .activity(&ECHO, echo)
        .schedule(echo_schedule(1))
        .start()
        .expect("a valid node");
    let fired = || async {
        let ticks = db.schedule_ticks(&name, 10).await.unwrap();
        match ticks
            .iter()
            .find_map(concepts::schedule::Tick::execution_id)
        {
            Some(id) => db.get(id).await.unwrap().pending_state.is_finished(),
            None => false,
        }
    };
    eventually("the schedule is created and a tick runs", fired).await;
    let row = db.get_schedule(&name).await.unwrap();
    assert_eq!(row.settings.component_id.to_string(), "activity:default");
    node.shutdown(Duration::from_secs(1)).await;

    // Started again with another declaration, the node updates the stored schedule.
    let node = Node::builder(db.clone(), Now)
        .activity(&ECHO, echo)
        .schedule(echo_schedule(2))
        .start()
        .expect("a valid node");
    let updated = || async {
        let row = db.get_schedule(&name).await.unwrap();
        row.definition.params.0 == serde_json::json!(2)
    };
    eventually("the schedule is updated to its declaration", updated).await;
    node.shutdown(Duration::from_secs(1)).await;

    let mut unknown = echo_schedule(1);
    unknown.ffqn = OTHER.ffqn().unwrap();
    let err = refused(builder().await.activity(&ECHO, echo).schedule(unknown));
    assert!(
        matches!(err, NodeError::Schedule { .. }) && err.to_string().contains("is not a function"),
        "{err}"
    );
    let mut bad_params = echo_schedule(1);
    bad_params.params = concepts::Json(serde_json::json!("not a number"));
    let err = refused(builder().await.activity(&ECHO, echo).schedule(bad_params));
    assert!(
        err.to_string().contains("cannot take these parameters"),
        "{err}"
    );
}

#[tokio::test]
async fn a_node_takes_up_at_its_start_what_older_code_parked() {
    let db = store().await;
    let now = concepts::ClockFn::now(&Now);
    let ffqn = FLOW.ffqn().unwrap();
    let id = test_utils::parked_execution(db.as_ref(), &ffqn, now, "the replay diverged").await;
    assert!(db.get(&id).await.unwrap().pending_state.is_parked());
    // Code that agrees with its (empty) history: the node's first probe unparks it.
    let node = Node::builder(db.clone(), Now)
        .workflow(&FLOW, flow)
        .start()
        .expect("start");
    let result = wait_for_result(
        db.as_ref(),
        &id,
        Some(Duration::from_secs(20)),
        Duration::from_millis(10),
    )
    .await
    .expect("read");
    assert!(result.is_some_and(|result| result.is_ok()), "finished");
    node.shutdown(Duration::from_secs(5)).await;
    db.close().await;
}

/// Waits for `id` to finish successfully within 10 s, well before a lease could expire.
async fn finishes_well_within_its_lease(db: &dyn DbConnection, id: &concepts::ExecutionId) {
    let result = wait_for_result(db, id, Some(Duration::from_secs(10)), DEFAULT_WAIT_SLICE)
        .await
        .expect("waited")
        .expect("finished before its lease could expire");
    assert!(result.is_ok(), "{result:?}");
}

/// A submission due now, through the catalog of a node whose executor of the function has a
/// permit free, is created locked by that executor (`create_locked`, never `create`) and run
/// at once: it finishes within the test's bound, where one left for its lease to expire
/// would not, and its `Locked` event is written with its creation.
#[tokio::test]
async fn a_submission_is_created_locked_and_run_at_once_by_an_idle_executor() {
    let creates = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = Arc::clone(&creates);
    let hook = move |write: &test_utils::forwarding::Write<'_>| {
        let kind = match write {
            test_utils::forwarding::Write::Create(req) => {
                Some(("create", req.execution_id.clone()))
            }
            test_utils::forwarding::Write::CreateLocked(req, _) => {
                Some(("create_locked", req.execution_id.clone()))
            }
            _ => None,
        };
        seen.lock().unwrap().extend(kind);
        test_utils::forwarding::Fault::Pass
    };
    let db: Arc<dyn DbConnection> = test_utils::forwarding::ForwardingDb::new(store().await, hook);
    let node = Node::builder(Arc::clone(&db), Now)
        .activity(&ECHO, echo)
        .start()
        .expect("a node");
    let submitted = submit(
        db.as_ref(),
        node.catalog(),
        &Now,
        submission(ECHO.name(), serde_json::json!(7), None),
    )
    .await
    .expect("submitted");
    let id = submitted.execution_id().clone();
    assert!(
        matches!(
            &submitted,
            Submitted::Created {
                pending_state: PendingState::Locked { .. },
                ..
            }
        ),
        "{submitted:?}"
    );
    finishes_well_within_its_lease(db.as_ref(), &id).await;
    assert_eq!(
        *creates.lock().unwrap(),
        vec![("create_locked", id.clone())]
    );
    let log = db.get(&id).await.expect("its log");
    assert_eq!(log.events.len(), 3, "{:?}", log.events);
    assert!(
        matches!(
            &log.events[1].event,
            concepts::ExecutionEventInner::Locked(_)
        ),
        "{:?}",
        log.events[1]
    );
    assert_eq!(log.events[1].created_at, log.events[0].created_at);
    node.shutdown(Duration::from_secs(5)).await;
}

/// A submission created locked whose reply is lost (the write committed) is answered with the
/// error, and its executor runs it at once all the same, having read its lease in its log:
/// it finishes long before its lease of a minute could expire.
#[tokio::test]
async fn a_submission_created_locked_whose_reply_is_lost_runs_at_once() {
    use test_utils::forwarding::{Fault, ForwardingDb, Write};
    let hook = |write: &Write<'_>| match write {
        Write::CreateLocked(..) => {
            Fault::LoseReply(concepts::DbError::Connection("reply lost".into()))
        }
        _ => Fault::Pass,
    };
    let db: Arc<dyn DbConnection> = ForwardingDb::new(store().await, hook);
    let long_lease = ExecutorSettings {
        lock_expiry: Duration::from_secs(60),
        ..ExecutorSettings::default()
    };
    let node = Node::builder(Arc::clone(&db), Now)
        .activity(&ECHO, echo)
        .activity_settings(long_lease)
        .start()
        .expect("a node");
    let id = "E_01KCZ8JPZ4NWNHBVH5M8T4D2QZ";
    let lost = submit(
        db.as_ref(),
        node.catalog(),
        &Now,
        submission(ECHO.name(), serde_json::json!(3), Some(id)),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&lost, SubmitError::Db(err) if err.is_retriable()),
        "{lost:?}"
    );
    let id = id.parse().unwrap();
    finishes_well_within_its_lease(db.as_ref(), &id).await;
    let log = db.get(&id).await.expect("its log");
    assert!(
        matches!(
            &log.events[1].event,
            concepts::ExecutionEventInner::Locked(_)
        ),
        "{:?}",
        log.events
    );
    node.shutdown(Duration::from_secs(5)).await;
}
