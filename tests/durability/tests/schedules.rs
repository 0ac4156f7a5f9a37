//! Schedules fired by several node processes at once, exactly once (`docs/SEMANTICS.md` §19):
//! three `durability-node` processes on one SQLite file, and four on one PostgreSQL database,
//! each running an executor and a timers watcher (whose loop fires the due schedules), share a
//! schedule due every second for 60 ticks (`allow-all`, a run limit of 60); one node is killed
//! with `SIGKILL` in the middle and started again. Then every tick from the first to the
//! sixtieth, one second apart, has exactly one execution, created for it (its id derived from
//! the tick), finished once; no tick is missing, none fired twice, and the store holds no
//! other execution.

mod common;

use chrono::{DateTime, Utc};
use common::{all_ids, assert_finished_once, node_command, runtime};
use concepts::{
    ClockFn, DbConnection, Json,
    schedule::{
        CreateScheduleRequest, Definition, FiredBy, Overlap, RunSettings, TickOutcome,
        tick_execution_id,
    },
};
use durability::{Line, Workload};
use executor::Now;
use std::{collections::HashSet, sync::Arc, time::Duration};
use storage_postgres::PostgresStore;
use storage_sqlite::{SqliteConfig, SqlitePool};
use test_support::{
    postgres::{TestDatabase, TestServer},
    process::{Output, Processes},
};

/// The ticks the schedule fires: one a second.
const TICKS: usize = 60;
/// The longest the test waits for the next line of a node.
const LINE_TIMEOUT: Duration = Duration::from_secs(60);

/// Runs `nodes` nodes on `url` beside the test's `store`, kills one after a third of the
/// ticks ran and starts it again, and checks every tick's execution.
fn fire_across_processes(
    rt: &tokio::runtime::Runtime,
    dir: &std::path::Path,
    url: &str,
    store: Arc<dyn DbConnection>,
    nodes: usize,
) {
    let workload = Workload::new().expect("the workload");
    let mut definition = Definition::new(
        "every-second".parse().unwrap(),
        workload.ffqn.clone(),
        Json(serde_json::json!([7])),
        "every 1s".parse().unwrap(),
    );
    definition.overlap = Overlap::AllowAll;
    definition.max_runs = Some(TICKS as u64);
    let req = CreateScheduleRequest {
        definition: definition.clone(),
        settings: RunSettings {
            component_id: workload.component_id.clone(),
            max_retries: 3,
            retry_exp_backoff: Duration::from_millis(100),
        },
        now: Now.now(),
    };
    rt.block_on(store.create_schedule(req))
        .expect("create_schedule");
    let row = rt
        .block_on(store.get_schedule(&definition.name))
        .expect("the schedule");

    let mut processes = Processes::new(dir);
    let start = |processes: &mut Processes, label: &str| {
        let mut command = node_command(url, TICKS);
        command.args(["--submit", "never", "--role", "both", "--tick-ms", "100"]);
        command.args([
            "--lock-expiry-ms",
            "1500",
            "--poll-ms",
            "200",
            "--timeout-s",
            "180",
        ]);
        processes.start(label, command)
    };
    for n in 0..nodes {
        start(&mut processes, &format!("node-{n}"));
    }
    let mut finished = HashSet::new();
    let mut killed = false;
    let mut closed = 0;
    while closed < nodes {
        match processes.next(LINE_TIMEOUT) {
            Some((_, Output::Line(line))) => {
                if let Ok(Line::Finished(id)) = Line::parse(&line) {
                    finished.insert(id);
                }
                if !killed && finished.len() >= TICKS / 3 {
                    killed = true;
                    let status = processes.kill(0);
                    assert!(!status.success(), "node-0 was killed: {status}");
                    start(&mut processes, "node-0-again");
                }
            }
            Some((idx, Output::Closed)) if processes.is_killed(idx) => {}
            Some((idx, Output::Closed)) => {
                let status = processes.wait(idx);
                if !status.success() {
                    let label = processes.label(idx).to_string();
                    processes.fail(&format!("{label} exited with {status}"));
                }
                closed += 1;
            }
            None => processes.fail("the nodes did not finish the ticks within the timeout"),
        }
    }
    assert!(killed, "a node was killed in the middle");

    rt.block_on(async {
        let mut ticks = store
            .schedule_ticks(&definition.name, 1_000)
            .await
            .expect("ticks");
        ticks.reverse();
        let times: Vec<DateTime<Utc>> = ticks.iter().map(|tick| tick.at).collect();
        assert_eq!(ticks.len(), TICKS, "one record per tick: {times:?}");
        for pair in times.windows(2) {
            assert_eq!(
                pair[1] - pair[0],
                chrono::Duration::seconds(1),
                "no tick missing: {times:?}"
            );
        }
        let ids = all_ids(store.as_ref(), None).await;
        assert_eq!(ids.len(), TICKS, "an execution per tick, and no other");
        for tick in &ticks {
            let expected = tick_execution_id(definition.name.as_str(), row.created_at, tick.at);
            assert_eq!(
                tick.outcome,
                TickOutcome::Fired {
                    execution_id: expected.clone(),
                    by: FiredBy::Tick
                },
                "tick at {}",
                tick.at
            );
            let log = store.get(&expected).await.expect("the tick's execution");
            assert_finished_once(&expected, &log);
        }
        let row = store
            .get_schedule(&definition.name)
            .await
            .expect("the schedule");
        assert_eq!((row.runs, row.status()), (TICKS as u64, "ended"));
        store.close().await;
    });
}

#[test]
fn three_sqlite_processes_fire_each_tick_once_through_a_kill() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("stele.sqlite");
    let url = format!("sqlite://{}", path.display());
    let rt = runtime();
    let store: Arc<dyn DbConnection> = Arc::new(
        rt.block_on(SqlitePool::open(SqliteConfig::new(&path)))
            .expect("the store"),
    );
    fire_across_processes(&rt, dir.path(), &url, store, 3);
}

#[test]
fn four_postgres_processes_fire_each_tick_once_through_a_kill() {
    let Some(server) =
        TestServer::or_skip("four_postgres_processes_fire_each_tick_once_through_a_kill")
    else {
        return;
    };
    let dir = tempfile::tempdir().expect("a temp dir");
    let rt = runtime();
    let database = rt.block_on(TestDatabase::create(&server));
    let store: Arc<dyn DbConnection> = Arc::new(
        rt.block_on(PostgresStore::connect(database.config.clone()))
            .expect("the store"),
    );
    fire_across_processes(&rt, dir.path(), &database.url, store, 4);
}
