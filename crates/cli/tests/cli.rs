//! The `stele` binary, run as a process: the demo's summary adds up and agrees with the log,
//! a demo killed with `SIGKILL` resumes and finishes every execution exactly once, and each
//! kind of bad input gets one clear line on stderr and its documented exit code.

use concepts::DbClientExt as _;
use concepts::{DbClient, DbConnection, ExecutionEventInner, ListExecutionsFilter};
use serde_json::Value;
use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};
use storage_sqlite::{SqliteConfig, SqlitePool};
use test_support::postgres::{TestDatabase, TestServer};

/// The longest any single invocation may take before the test fails (a safety net, far above
/// what the demo needs).
const SAFETY: Duration = Duration::from_secs(120);

struct Output {
    code: i32,
    stdout: String,
    stderr: String,
}

fn stele(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_stele"));
    command
        .args(args)
        .env_remove("STELE_DATABASE")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null());
    command
}

/// Waits for `child`, killing it (and failing) if it outlives `SAFETY`.
fn wait_with_deadline(mut child: Child) -> std::process::Output {
    let deadline = Instant::now() + SAFETY;
    loop {
        if child.try_wait().expect("poll the child").is_some() {
            return child.wait_with_output().expect("collect the output");
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("stele ran longer than {SAFETY:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn run(args: &[&str]) -> Output {
    let child = stele(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start stele");
    let output = wait_with_deadline(child);
    Output {
        code: output.status.code().expect("an exit code, not a signal"),
        stdout: String::from_utf8(output.stdout).expect("UTF-8 stdout"),
        stderr: String::from_utf8(output.stderr).expect("UTF-8 stderr"),
    }
}

/// Runs a command that must succeed and print JSON.
fn run_json(args: &[&str]) -> Value {
    let output = run(args);
    assert_eq!(output.code, 0, "stele {args:?} failed: {}", output.stderr);
    serde_json::from_str(&output.stdout)
        .unwrap_or_else(|err| panic!("stele {args:?} printed no JSON ({err}): {}", output.stdout))
}

/// Runs a command that must fail with `code` and exactly one `error: ` line containing
/// `message`.
fn run_failing(args: &[&str], code: i32, message: &str) {
    let output = run(args);
    assert_eq!(output.code, code, "stele {args:?}: {}", output.stderr);
    assert_eq!(output.stdout, "", "nothing on stdout");
    let lines: Vec<&str> = output.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line on stderr: {:?}", output.stderr);
    assert!(lines[0].starts_with("error: "), "{:?}", lines[0]);
    assert!(
        lines[0].contains(message),
        "{:?} should contain {message:?}",
        lines[0]
    );
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 temp path")
}

fn u64_at(value: &Value, pointer: &str) -> u64 {
    value
        .pointer(pointer)
        .and_then(Value::as_u64)
        .unwrap_or_else(|| panic!("no number at {pointer} in {value}"))
}

fn sum(object: &Value) -> u64 {
    object
        .as_object()
        .expect("an object of counts")
        .values()
        .map(|count| count.as_u64().expect("a count"))
        .sum()
}

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(future)
}

/// Reads the database directly (not through `stele`) and returns, per execution, how many
/// `Finished` events its log holds.
fn finished_events_per_execution(db_path: &Path) -> Vec<(String, usize)> {
    block_on(async {
        let db = SqlitePool::open(SqliteConfig::new(db_path))
            .await
            .expect("open");
        let mut counts = Vec::new();
        let all = db
            .list_all_executions(ListExecutionsFilter::default())
            .await
            .expect("list");
        for row in all {
            let log = db.get(&row.execution_id).await.expect("get");
            let finished = log
                .events
                .iter()
                .filter(|event| matches!(event.event, ExecutionEventInner::Finished { .. }))
                .count();
            counts.push((row.execution_id.to_string(), finished));
        }
        db.close().await;
        counts
    })
}

/// Checks the invariants of a demo report that holds a whole, finished workload.
fn assert_summary_adds_up(report: &Value, top_level: u64) {
    let workload = &report["workload"];
    let executions = u64_at(workload, "/executions");
    assert_eq!(u64_at(workload, "/top_level"), top_level);
    assert_eq!(u64_at(workload, "/children") + top_level, executions);
    assert!(
        u64_at(workload, "/children") > 0,
        "the fan-outs created children"
    );
    assert_eq!(u64_at(workload, "/finished"), executions);
    assert_eq!(sum(&workload["outcomes"]), executions);
    let by_function = workload["outcomes_by_function"].as_object().unwrap();
    let mut functions: Vec<&str> = by_function.keys().map(String::as_str).collect();
    functions.sort_unstable();
    assert_eq!(
        functions,
        [
            "stele:demo/activities.flaky",
            "stele:demo/activities.slow",
            "stele:demo/workflows.fanout",
            "stele:demo/workflows.sleeper"
        ]
    );
    assert_eq!(by_function.values().map(sum).sum::<u64>(), executions);
    let once = &workload["exactly_once"];
    assert_eq!(u64_at(once, "/finished_once"), executions);
    assert_eq!(u64_at(once, "/not_finished"), 0);
    assert_eq!(u64_at(once, "/finished_more_than_once"), 0);
    assert_eq!(
        u64_at(once, "/child_results_delivered_once"),
        u64_at(workload, "/children")
    );
    assert_eq!(u64_at(once, "/child_results_missing"), 0);
    assert_eq!(u64_at(once, "/child_results_duplicated"), 0);
    let latency = &workload["latency"];
    let (p50, p99, max) = (
        latency["p50_ms"].as_f64().unwrap(),
        latency["p99_ms"].as_f64().unwrap(),
        latency["max_ms"].as_f64().unwrap(),
    );
    assert!(0.0 < p50 && p50 <= p99 && p99 <= max, "{latency}");
}

#[test]
fn demo_summary_adds_up_and_inspection_shows_what_the_log_holds() {
    let dir = tempfile::tempdir().unwrap();
    let db_path = dir.path().join("stele.db");
    let db = path_str(&db_path);

    let report = run_json(&["--db", db, "demo", "--executions", "30", "--json"]);
    assert_eq!(report["mode"], "new");
    assert_eq!(u64_at(&report, "/submitted"), 30);
    assert_summary_adds_up(&report, 30);
    let executions = u64_at(&report, "/workload/executions");
    assert_eq!(u64_at(&report, "/this_run/finished"), executions);

    // `list` shows every execution, finished, newest first.
    let rows = run_json(&[
        "--db",
        db,
        "executions",
        "list",
        "--json",
        "--limit",
        "100000",
    ]);
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len() as u64, executions);
    assert!(rows.iter().all(|row| row["state"] == "Finished"));
    // Parsed: RFC 3339 text with 3, 6 or 9 fraction digits does not sort as its time does.
    let created: Vec<chrono::DateTime<chrono::Utc>> = rows
        .iter()
        .map(|row| row["created_at"].as_str().unwrap().parse().unwrap())
        .collect();
    assert!(
        created.windows(2).all(|pair| pair[0] >= pair[1]),
        "newest first"
    );
    let top_level = run_json(&[
        "--db",
        db,
        "executions",
        "list",
        "--top-level",
        "--json",
        "--limit",
        "1000",
    ]);
    assert_eq!(top_level.as_array().unwrap().len(), 30);
    let limited = run_json(&["--db", db, "executions", "list", "--json", "--limit", "3"]);
    assert_eq!(limited.as_array().unwrap().len(), 3);

    // `show` of a fan-out parent prints its whole log.
    let fanouts = run_json(&[
        "--db",
        db,
        "executions",
        "list",
        "--ffqn",
        "stele:demo/workflows.fanout",
        "--json",
    ]);
    let fanout = &fanouts.as_array().unwrap()[0];
    let id = fanout["execution_id"].as_str().unwrap();
    let doc = run_json(&["--db", db, "executions", "show", id, "--json"]);
    let events = doc["events"].as_array().unwrap();
    assert_eq!(doc["next_version"], fanout["next_version"]);
    // A finished log keeps its `Finished` event at `next_version`.
    assert_eq!(events.len() as u64, u64_at(&doc, "/next_version") + 1);
    for (version, event) in events.iter().enumerate() {
        assert_eq!(u64_at(event, "/version"), version as u64);
    }
    assert!(events[0]["event"].get("Created").is_some());
    assert!(events.last().unwrap()["event"].get("Finished").is_some());
    let children = u64_at(&events[0], "/event/Created/params/children");
    assert_eq!(doc["responses"].as_array().unwrap().len() as u64, children);

    let text = run(&["--db", db, "executions", "show", id]);
    assert_eq!(text.code, 0, "{}", text.stderr);
    assert!(
        text.stdout.contains(&format!("Events ({}):", events.len())),
        "{}",
        text.stdout
    );
    assert!(text.stdout.contains(&format!("Responses ({children}):")));
    for index in 1..=children {
        assert!(text.stdout.contains(&format!("{id}.n:children_{index}")));
    }
    // The children as a tree, with their function and outcome; each await names its answer.
    assert!(
        text.stdout.contains(&format!("Children ({children}):")),
        "{}",
        text.stdout
    );
    assert!(
        text.stdout.contains(&format!(
            "  - {id}.n:children_1  stele:demo/activities.flaky  "
        )),
        "{}",
        text.stdout
    );
    assert!(text.stdout.contains("answered by response #1"));
    let table = run(&[
        "--db",
        db,
        "executions",
        "list",
        "--state",
        "finished",
        "--limit",
        "5",
    ]);
    assert_eq!(table.code, 0, "{}", table.stderr);
    assert!(table.stdout.starts_with(" ID "), "{}", table.stdout);
    assert_eq!(
        table
            .stdout
            .lines()
            .filter(|line| line.contains("Finished ("))
            .count(),
        5
    );

    // Run again: the workload is finished, nothing runs, the summary is the same.
    let again = run_json(&["--db", db, "demo", "--json"]);
    assert_eq!(again["mode"], "already_finished");
    assert_eq!(u64_at(&again, "/submitted"), 0);
    assert!(again["this_run"].is_null());
    assert_eq!(again["workload"], report["workload"]);
}

#[test]
fn a_killed_demo_resumes_and_finishes_every_execution_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let db_path = dir.path().join("stele.db");
    let db = path_str(&db_path);
    let mut demo = stele(&["--db", db, "demo", "--executions", "150", "--json"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Its notes on stderr, line by line (the reader also keeps the pipe from filling up).
    let notes = test_support::process::read_lines(demo.stderr.take().unwrap());
    // Wait until the workload is submitted, so that no inspection opens the file while the
    // demo is still creating its schema.
    let submitted = notes
        .recv_timeout(SAFETY)
        .expect("the demo reports its submission");
    assert!(
        submitted.starts_with("submitted 150 executions"),
        "{submitted}"
    );

    // Kill it once some, not all, executions finished (read through `stele` itself: the
    // inspection commands open the file beside the running demo).
    let deadline = Instant::now() + SAFETY;
    loop {
        assert!(
            demo.try_wait().unwrap().is_none(),
            "the demo ended before it was killed"
        );
        assert!(Instant::now() < deadline, "nothing finished in time");
        std::thread::sleep(Duration::from_millis(100));
        let finished = run(&[
            "--db",
            db,
            "executions",
            "list",
            "--state",
            "finished",
            "--json",
            "--limit",
            "100000",
        ]);
        if finished.code == 0
            && serde_json::from_str::<Value>(&finished.stdout)
                .is_ok_and(|rows| rows.as_array().is_some_and(|rows| rows.len() >= 30))
        {
            break;
        }
    }
    demo.kill().unwrap(); // SIGKILL: no cleanup of any kind.
    demo.wait().unwrap();

    let at_kill = finished_events_per_execution(&db_path);
    let finished_at_kill = at_kill
        .iter()
        .filter(|(_, finished)| *finished == 1)
        .count();
    assert!(finished_at_kill >= 30);
    assert!(
        finished_at_kill < at_kill.len(),
        "some executions were still unfinished"
    );

    let report = run_json(&["--db", db, "demo", "--executions", "7", "--json"]);
    assert_eq!(report["mode"], "resumed");
    assert_eq!(u64_at(&report, "/submitted"), 0, "nothing new submitted");
    assert_summary_adds_up(&report, 150);
    let executions = u64_at(&report, "/workload/executions");
    assert_eq!(
        u64_at(&report, "/this_run/finished"),
        executions - finished_at_kill as u64
    );

    // Checked again straight from the file: one `Finished` event per execution.
    let after = finished_events_per_execution(&db_path);
    assert_eq!(after.len() as u64, executions);
    let wrong: Vec<&(String, usize)> = after
        .iter()
        .filter(|(_, finished)| *finished != 1)
        .collect();
    assert!(wrong.is_empty(), "not finished exactly once: {wrong:?}");
}

/// An empty Stele database (schema only).
fn empty_database(dir: &Path) -> PathBuf {
    let path = dir.join("empty.db");
    block_on(async {
        let db = SqlitePool::open(SqliteConfig::new(&path))
            .await
            .expect("create");
        db.close().await;
    });
    path
}

#[test]
fn an_unknown_execution_id_is_not_found() {
    let dir = tempfile::tempdir().unwrap();
    let db = empty_database(dir.path());
    let id = "E_01JZ8ZK3F8G3N9Q7V5W2X4Y6Z0";
    run_failing(
        &["--db", path_str(&db), "executions", "show", id],
        3,
        &format!("no execution {id} in {}", db.display()),
    );
    let empty = run(&["--db", path_str(&db), "executions", "list"]);
    assert_eq!(
        (empty.code, empty.stdout.as_str()),
        (0, "no executions match\n")
    );
}

#[test]
fn a_malformed_execution_id_gives_the_parse_error() {
    let dir = tempfile::tempdir().unwrap();
    let db = empty_database(dir.path());
    run_failing(
        &["--db", path_str(&db), "executions", "show", "E_nope"],
        2,
        "invalid execution id: `E_nope`: `nope` is not a ULID",
    );
    run_failing(
        &[
            "--db",
            path_str(&db),
            "executions",
            "show",
            "X_01JZ8ZK3F8G3N9Q7V5W2X4Y6Z0",
        ],
        2,
        "expected the prefix `E_`",
    );
}

#[test]
fn an_unknown_state_or_function_is_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let db = empty_database(dir.path());
    run_failing(
        &[
            "--db",
            path_str(&db),
            "executions",
            "list",
            "--state",
            "bogus",
        ],
        2,
        "invalid --state: unknown state `bogus` (expected one of: pending, locked, blocked, finished)",
    );
    run_failing(
        &[
            "--db",
            path_str(&db),
            "executions",
            "list",
            "--ffqn",
            "nodot",
        ],
        2,
        "invalid --ffqn",
    );
}

#[test]
fn a_file_that_is_not_a_stele_database_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notes.txt");
    let text = "these are not the tables you are looking for\n".repeat(200);
    std::fs::write(&path, &text).unwrap();
    run_failing(
        &["--db", path_str(&path), "executions", "list"],
        4,
        "is not a SQLite database",
    );
    run_failing(
        &["--db", path_str(&path), "demo"],
        4,
        "is not a SQLite database",
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
}

#[test]
fn a_path_that_cannot_be_written_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let blocker = dir.path().join("a-file");
    std::fs::write(&blocker, "").unwrap();
    let path = blocker.join("stele.db"); // A file stands where a directory should be.
    run_failing(
        &["--db", path_str(&path), "demo", "--executions", "1"],
        4,
        &format!("cannot open the SQLite database {}", path.display()),
    );
}

#[test]
fn inspection_never_creates_a_database() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("missing.db");
    run_failing(
        &["--db", path_str(&path), "executions", "list"],
        3,
        &format!("no database at {}", path.display()),
    );
    run_failing(
        &[
            "--database",
            &format!("sqlite://{}", path.display()),
            "executions",
            "show",
            "E_01JZ8ZK3F8G3N9Q7V5W2X4Y6Z0",
        ],
        3,
        "no database at",
    );
    assert!(!path.exists());
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "nothing created"
    );
}

#[test]
fn usage_errors_exit_with_2() {
    run_failing(
        &["--database", "mysql://db/stele", "executions", "list"],
        2,
        "unsupported database URL scheme `mysql://`",
    );
    let output = run(&["executions", "list", "--no-such-flag"]);
    assert_eq!(output.code, 2);
    assert!(output.stderr.starts_with("error: "), "{}", output.stderr);
    let output = run(&["demo", "--executions", "0"]);
    assert_eq!(output.code, 2, "{}", output.stderr);
}

#[test]
fn every_command_has_help() {
    for args in [
        &["--help"][..],
        &["demo", "--help"],
        &["executions", "--help"],
        &["executions", "list", "--help"],
        &["executions", "show", "--help"],
    ] {
        let output = run(args);
        assert_eq!(output.code, 0, "{args:?}: {}", output.stderr);
        assert!(
            output.stdout.contains("Usage: stele"),
            "{args:?}: {}",
            output.stdout
        );
    }
    let demo = run(&["demo", "--help"]).stdout;
    assert!(
        demo.contains("--executions") && demo.contains("--json"),
        "{demo}"
    );
}

#[test]
fn the_demo_runs_on_postgres_too() {
    let Some(server) = TestServer::or_skip("the_demo_runs_on_postgres_too") else {
        return;
    };
    let database = block_on(TestDatabase::create(&server));
    let url = &database.url;
    let report = run_json(&["--database", url, "demo", "--executions", "20", "--json"]);
    assert_eq!(report["mode"], "new");
    assert_summary_adds_up(&report, 20);
    let rows = run_json(&[
        "--database",
        url,
        "executions",
        "list",
        "--json",
        "--limit",
        "1000",
    ]);
    assert_eq!(
        rows.as_array().unwrap().len() as u64,
        u64_at(&report, "/workload/executions")
    );
}
