//! The `stele` binary, run as a process: the demo's summary adds up and agrees with the log,
//! a demo killed with `SIGKILL` resumes and finishes every execution exactly once, the
//! operator's commands (submit, serve, wait, cancel, complete, prune) do what they print, and
//! each kind of bad input gets one clear line on stderr and its documented exit code.

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
    test_support::process::clean_command(env!("CARGO_BIN_EXE_stele"), args)
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

    // `export` prints the history that a replayer checks code against, without a store.
    let exported = run(&["--db", db, "executions", "export", id]);
    assert_eq!(exported.code, 0, "{}", exported.stderr);
    let history: workflow::RecordedHistory = serde_json::from_str(&exported.stdout).unwrap();
    assert_eq!(history.events.len(), events.len());
    assert_eq!(history.children.len() as u64, children);
    let replayer = workflow::Replayer::new()
        .register(&cli::workers::fanout::FANOUT, cli::workers::fanout::fanout)
        .unwrap();
    replayer
        .replay(&history)
        .expect("the demo's own code agrees");
    run_failing(
        &[
            "--db",
            db,
            "executions",
            "export",
            "E_01KCZ8JPZ4NWNHBVH5M8T4D2QZ",
        ],
        3,
        "E_01KCZ8JPZ4NWNHBVH5M8T4D2QZ",
    );

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
fn inspection_never_migrates_an_older_schema() {
    let dir = tempfile::tempdir().unwrap();
    let path = empty_database(dir.path());
    let version = |path: &Path| -> i64 {
        rusqlite::Connection::open(path)
            .unwrap()
            .pragma_query_value(None, "user_version", |row| row.get(0))
            .unwrap()
    };
    let current = version(&path);
    // Claims to be one version older (the tables stay as they are: nothing may migrate it).
    rusqlite::Connection::open(&path)
        .unwrap()
        .pragma_update(None, "user_version", current - 1)
        .unwrap();
    let db = path_str(&path);
    let message = format!(
        "{db} has schema version {}, older than this build's {current}",
        current - 1
    );
    for command in [
        &["executions", "list"][..],
        &["executions", "show", ID],
        &["executions", "wait", ID],
    ] {
        run_failing(&[&["--db", db][..], command].concat(), 4, &message);
    }
    assert_eq!(version(&path), current - 1, "left as it was");
}

#[test]
fn usage_errors_exit_with_2() {
    run_failing(
        &["--database", "mysql://db/stele", "executions", "list"],
        2,
        "unsupported database URL scheme `mysql://`",
    );
    run_failing(
        &["executions", "list", "--no-such-flag"],
        2,
        "unexpected argument '--no-such-flag' found",
    );
    let output = run(&["demo", "--executions", "0"]);
    assert_eq!(output.code, 2, "{}", output.stderr);
}

#[test]
fn every_numeric_option_refuses_a_bad_value_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let db_path = dir.path().join("never-created.db");
    let db = path_str(&db_path);
    let serve = &["serve", "--prune-older-than", "7d"][..];
    let prune = &["executions", "prune", "--older-than", "7d"][..];
    for (command, option, range) in [
        (&["demo"][..], "--executions", "from 1 to 100000"),
        (&["demo"], "--concurrency", "from 1 to 10000"),
        (&["serve"], "--concurrency", "from 1 to 10000"),
        (serve, "--prune-batch", "from 1 to 100000"),
        (&["executions", "list"], "--limit", "from 1 to 1000000"),
        (prune, "--batch", "from 1 to 100000"),
    ] {
        for value in [
            "-1",
            "0",
            "99999999999",
            "99999999999999999999999",
            "ten",
            "1.5",
            "",
        ] {
            let mut args = vec!["--db", db];
            args.extend(command);
            args.extend([option, value]);
            run_failing(
                &args,
                2,
                &format!("invalid value '{value}' for '{option} <N>': not a whole number {range}"),
            );
        }
    }
    assert!(!db_path.exists(), "bad input creates no database");
}

#[test]
fn every_command_has_help() {
    for args in [
        &["--help"][..],
        &["demo", "--help"],
        &["executions", "--help"],
        &["executions", "list", "--help"],
        &["executions", "show", "--help"],
        &["executions", "wait", "--help"],
        &["executions", "cancel", "--help"],
        &["executions", "complete", "--help"],
        &["executions", "prune", "--help"],
        &["submit", "--help"],
        &["serve", "--help"],
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

// --- The operator's commands: submit, serve, executions wait / cancel / complete / prune. ---

/// The id that the tests submit under, and ids that no database holds.
const ID: &str = "E_01JZ8ZK3F8G3N9Q7V5W2X4Y6Z0";
const UNKNOWN: &str = "E_01JZ8ZK3F8G3N9Q7V5W2X4Y6Z1";
const FLAKY: &str = "stele:demo/activities.flaky";
const FLAKY_PARAMS: &str = r#"{"fail_probability":0,"work_ms":10}"#;

/// Runs a command that must succeed, and returns its stdout.
fn run_ok(args: &[&str]) -> String {
    let output = run(args);
    assert_eq!(output.code, 0, "stele {args:?} failed: {}", output.stderr);
    output.stdout
}

/// Submits `ffqn(params)` under a fresh id with `stele submit` and returns the id.
fn submit(db: &str, ffqn: &str, params: &str) -> String {
    let line = run_ok(&["--db", db, "submit", ffqn, "--params", params]);
    let (id, rest) = line.split_once(' ').expect("an id and a word");
    assert_eq!(rest, "created\n", "{line:?}");
    id.to_string()
}

/// `stele serve` running in the background, its stderr read line by line.
struct Server {
    child: Child,
    lines: std::sync::mpsc::Receiver<String>,
    /// Its first line, which says what it serves.
    first: String,
}

impl Server {
    /// Starts `stele --db DB serve ARGS` and returns once it says that it serves.
    fn start(db: &str, args: &[&str]) -> Self {
        Self::start_with(db, args, &[])
    }

    /// [`Server::start`] with `env` set (and `STELE_HTTP_TOKEN` unset unless `env` sets it).
    fn start_with(db: &str, args: &[&str], env: &[(&str, &str)]) -> Self {
        let mut command = stele(&[&["--db", db, "serve"][..], args].concat());
        command.env_remove("STELE_HTTP_TOKEN");
        command.envs(env.iter().copied());
        let (child, lines, first) = test_support::process::start_reading_stderr(command, SAFETY);
        assert!(first.starts_with("serving "), "{first}");
        Self {
            child,
            lines,
            first,
        }
    }

    /// Stops it with `SIGTERM` and returns its exit code and the rest of its stderr.
    fn terminate(mut self) -> (i32, Vec<String>) {
        let pid = self.child.id().to_string();
        let status = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -TERM {pid}");
        let mut rest = Vec::new();
        // The channel disconnects when serve closes its stderr, that is when it exits.
        while let Ok(line) = self.lines.recv_timeout(SAFETY) {
            rest.push(line);
        }
        let status = self.child.wait().expect("reap serve");
        (status.code().expect("an exit code, not a signal"), rest)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn submit_with_an_id_is_idempotent_and_refuses_a_conflicting_repeat() {
    let dir = tempfile::tempdir().unwrap();
    let db_path = empty_database(dir.path());
    let db = path_str(&db_path);
    let submit_as_id = |params: &str| -> Vec<String> {
        ["--db", db, "submit", FLAKY, "--params", params, "--id", ID]
            .map(String::from)
            .to_vec()
    };
    let args = submit_as_id(FLAKY_PARAMS);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    assert_eq!(run_ok(&args), format!("{ID} created\n"));
    let again = run_ok(&args);
    assert!(
        again.starts_with(&format!(
            "{ID} already existed with this function and these parameters, nothing written: \
             PendingAt "
        )),
        "{again}"
    );
    let other = submit_as_id(r#"{"fail_probability":0.5,"work_ms":10}"#);
    let other: Vec<&str> = other.iter().map(String::as_str).collect();
    run_failing(
        &other,
        2,
        &format!("cannot submit {FLAKY} as {ID}: it already exists with other parameters"),
    );
    run_failing(
        &[
            "--db",
            db,
            "submit",
            "stele:demo/workflows.sleeper",
            "--params",
            r#"{"sleep_ms":10}"#,
            "--id",
            ID,
        ],
        2,
        "it already exists with another function and other parameters",
    );
    // One execution, with its first parameters.
    let doc = run_json(&["--db", db, "executions", "show", ID, "--json"]);
    assert_eq!(doc["events"].as_array().unwrap().len(), 1);
    assert_eq!(
        doc["events"][0]["event"]["Created"]["params"],
        serde_json::from_str::<Value>(FLAKY_PARAMS).unwrap()
    );

    // Without --id, a fresh id each time.
    let first = submit(db, FLAKY, FLAKY_PARAMS);
    let second = submit(db, FLAKY, FLAKY_PARAMS);
    assert_ne!(first, second);
    let rows = run_json(&["--db", db, "executions", "list", "--json"]);
    assert_eq!(rows.as_array().unwrap().len(), 3);
}

#[test]
fn submit_refuses_bad_input_before_opening_the_database() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.db");
    let db = path_str(&missing);
    let refused = |ffqn: &str, params: &str, more: &[&str], code: i32, message: &str| {
        let args = [&["--db", db, "submit", ffqn, "--params", params][..], more].concat();
        run_failing(&args, code, message);
    };
    refused(
        FLAKY,
        "{not json",
        &[],
        2,
        "invalid --params: key must be a string",
    );
    refused(FLAKY, "", &[], 2, "invalid --params: EOF while parsing");
    refused(
        FLAKY,
        r#"{"work_ms":10}"#,
        &[],
        2,
        "invalid --params: stele:demo/activities.flaky expects other parameters: missing field \
         `fail_probability` (for example '{",
    );
    refused("nodot", "{}", &[], 2, "invalid function");
    refused(FLAKY, FLAKY_PARAMS, &["--id", "E_nope"], 2, "invalid --id");
    refused(
        FLAKY,
        FLAKY_PARAMS,
        &["--id", &format!("{ID}.n:children_1")],
        2,
        "is a child's id; a submitted execution is top-level",
    );
    // Good input, but no database: refused, and none is created.
    refused(FLAKY, FLAKY_PARAMS, &[], 3, "no database at");
    assert!(!missing.exists());
}

#[test]
fn wait_prints_the_result_and_refuses_unknown_ids_and_bad_timeouts() {
    let dir = tempfile::tempdir().unwrap();
    let db_path = empty_database(dir.path());
    let db = path_str(&db_path);
    run_failing(
        &["--db", db, "executions", "wait", UNKNOWN],
        3,
        &format!("no execution {UNKNOWN} in {db}"),
    );
    run_failing(
        &["--db", db, "executions", "wait", "E_nope"],
        2,
        "invalid execution id",
    );
    for (timeout, message) in [
        ("7x", "`7x` has the unknown unit `x`"),
        ("-1s", "`-1s` has a sign"),
        ("", "the duration is empty"),
    ] {
        run_failing(
            &["--db", db, "executions", "wait", ID, "--timeout", timeout],
            2,
            &format!("invalid --timeout: {message}"),
        );
    }
    // Nobody runs it (no `serve`): the timeout runs out.
    run_ok(&[
        "--db",
        db,
        "submit",
        FLAKY,
        "--params",
        FLAKY_PARAMS,
        "--id",
        ID,
    ]);
    run_failing(
        &["--db", db, "executions", "wait", ID, "--timeout", "300ms"],
        1,
        &format!("{ID} did not finish within 300ms"),
    );
    // Finished (here by a cancellation): printed at once, as a line or as JSON.
    run_ok(&[
        "--db",
        db,
        "executions",
        "cancel",
        ID,
        "--reason",
        "not today",
    ]);
    assert_eq!(
        run_ok(&["--db", db, "executions", "wait", ID]),
        "Cancelled: not today\n"
    );
    let doc = run_json(&["--db", db, "executions", "wait", ID, "--json"]);
    assert_eq!(doc["execution_id"], ID);
    assert_eq!(doc["result_kind"], "Cancelled");
    assert!(doc["value"].is_null());
    assert_eq!(doc["result"]["Err"]["Cancelled"]["reason"], "not today");
}

#[test]
fn cancel_reports_what_it_did_and_a_finished_execution_is_not_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let db_path = empty_database(dir.path());
    let db = path_str(&db_path);
    run_ok(&[
        "--db",
        db,
        "submit",
        FLAKY,
        "--params",
        FLAKY_PARAMS,
        "--id",
        ID,
    ]);
    assert_eq!(
        run_ok(&["--db", db, "executions", "cancel", ID]),
        format!("cancelled {ID}\n")
    );
    assert_eq!(
        run_ok(&["--db", db, "executions", "cancel", ID, "--reason", "again"]),
        format!(
            "{ID} had already finished, nothing cancelled: Cancelled: cancelled with `stele \
             executions cancel`\n"
        )
    );
    let doc = run_json(&["--db", db, "executions", "show", ID, "--json"]);
    assert_eq!(doc["state"], "Finished");
    assert_eq!(doc["events"].as_array().unwrap().len(), 2, "one Finished");
    run_failing(
        &["--db", db, "executions", "cancel", UNKNOWN],
        3,
        &format!("no execution {UNKNOWN} in {db}"),
    );
    run_failing(
        &["--db", db, "executions", "cancel", "nope"],
        2,
        "invalid execution id",
    );
}

#[test]
fn complete_resolves_a_stub_once_and_refuses_another_value() {
    let dir = tempfile::tempdir().unwrap();
    let db_path = empty_database(dir.path());
    let db = path_str(&db_path);
    let stub = "stele:stub.approval";
    let submitted = run(&["--db", db, "submit", stub, "--params", "[]", "--id", ID]);
    assert_eq!(submitted.code, 0, "{}", submitted.stderr);
    assert_eq!(submitted.stdout, format!("{ID} created\n"));
    assert!(
        submitted.stderr.contains("is a stub"),
        "{}",
        submitted.stderr
    );
    let complete = |value: &str| -> Vec<String> {
        ["--db", db, "executions", "complete", ID, "--json", value]
            .map(String::from)
            .to_vec()
    };
    let value = r#"{"approved":true}"#;
    let args = complete(value);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    assert_eq!(run_ok(&args), format!("completed {ID} with {value}\n"));
    assert_eq!(
        run_ok(&args),
        format!("{ID} was already completed with {value}, nothing written\n")
    );
    let other = complete("false");
    let other: Vec<&str> = other.iter().map(String::as_str).collect();
    run_failing(
        &other,
        2,
        &format!(
            "cannot complete {ID}: execution {ID} was already completed with a different result"
        ),
    );
    let malformed = complete("{approved: yes}");
    let malformed: Vec<&str> = malformed.iter().map(String::as_str).collect();
    run_failing(&malformed, 2, "invalid --json value: key must be a string");
    assert_eq!(
        run_ok(&["--db", db, "executions", "wait", ID]),
        format!("Ok {value}\n")
    );
    run_failing(
        &["--db", db, "executions", "complete", UNKNOWN, "--json", "1"],
        3,
        &format!("no execution {UNKNOWN} in {db}"),
    );
    // An execution that runs is not completed from outside.
    let flaky = submit(db, FLAKY, FLAKY_PARAMS);
    run_failing(
        &["--db", db, "executions", "complete", &flaky, "--json", "1"],
        2,
        &format!("cannot complete {flaky}: execution {flaky} runs {FLAKY}, which is not a stub"),
    );
}

#[test]
fn prune_removes_finished_trees_in_batches_and_refuses_malformed_durations() {
    let dir = tempfile::tempdir().unwrap();
    let db_path = empty_database(dir.path());
    let db = path_str(&db_path);
    for (duration, message) in [
        ("7x", "`7x` has the unknown unit `x`"),
        ("-1d", "`-1d` has a sign"),
        ("", "the duration is empty"),
        ("1.5h", "`1.5h` has the unknown unit `.5h`"),
        ("7", "`7` has no unit"),
    ] {
        run_failing(
            &["--db", db, "executions", "prune", "--older-than", duration],
            2,
            &format!("invalid --older-than: {message}"),
        );
    }
    // Three finished executions (cancelled), one pending.
    let mut finished = Vec::new();
    for _ in 0..3 {
        let id = submit(db, FLAKY, FLAKY_PARAMS);
        run_ok(&["--db", db, "executions", "cancel", &id]);
        finished.push(id);
    }
    let pending = submit(db, FLAKY, FLAKY_PARAMS);

    let kept = run_ok(&["--db", db, "executions", "prune", "--older-than", "7d"]);
    assert!(
        kept.starts_with("removed 0 trees (0 executions) that finished before "),
        "{kept}"
    );
    let totals = run_json(&[
        "--db",
        db,
        "executions",
        "prune",
        "--older-than",
        "0s",
        "--batch",
        "2",
        "--json",
    ]);
    assert_eq!(u64_at(&totals, "/trees"), 3);
    assert_eq!(u64_at(&totals, "/executions"), 3);
    assert_eq!(u64_at(&totals, "/kept"), 0);
    assert!(u64_at(&totals, "/batches") >= 2, "{totals}");
    for id in &finished {
        run_failing(&["--db", db, "executions", "show", id], 3, "no execution");
    }
    run_ok(&["--db", db, "executions", "show", &pending]);
    let nothing = run_ok(&["--db", db, "executions", "prune", "--older-than", "0s"]);
    assert!(nothing.starts_with("removed 0 trees"), "{nothing}");
    let zero = run(&[
        "--db",
        db,
        "executions",
        "prune",
        "--older-than",
        "1d",
        "--batch",
        "0",
    ]);
    assert_eq!(zero.code, 2, "{}", zero.stderr);
}

#[test]
fn operator_commands_never_create_a_database_nor_touch_another_file() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.db");
    let missing = path_str(&missing);
    let notes = dir.path().join("notes.txt");
    let text = "these are not the tables you are looking for\n".repeat(200);
    std::fs::write(&notes, &text).unwrap();
    let empty = dir.path().join("empty-file.db");
    std::fs::write(&empty, "").unwrap();
    let commands: [&[&str]; 9] = [
        &["submit", FLAKY, "--params", FLAKY_PARAMS],
        &["executions", "wait", ID],
        &["executions", "cancel", ID],
        &["executions", "complete", ID, "--json", "1"],
        &["executions", "prune", "--older-than", "1d"],
        &[
            "schedules",
            "create",
            "tick",
            FLAKY,
            "--params",
            FLAKY_PARAMS,
            "--every",
            "1s",
        ],
        &["schedules", "pause", "tick"],
        &["schedules", "trigger", "tick"],
        &["schedules", "list"],
    ];
    for command in commands {
        run_failing(
            &[&["--db", missing][..], command].concat(),
            3,
            "no database at",
        );
        run_failing(
            &[&["--db", path_str(&notes)][..], command].concat(),
            4,
            "is not a SQLite database",
        );
        run_failing(
            &[&["--db", path_str(&empty)][..], command].concat(),
            4,
            "is not a Stele database: it holds none of Stele's tables",
        );
    }
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), text);
    assert_eq!(std::fs::read(&empty).unwrap().len(), 0);
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        2,
        "nothing created"
    );
}

#[test]
fn serve_runs_what_submit_creates_until_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let db_path = dir.path().join("served.db");
    let db = path_str(&db_path);
    // `serve` creates the database (as `demo` does).
    let server = Server::start(db, &["--concurrency", "4"]);
    let id = submit(db, FLAKY, FLAKY_PARAMS);
    let result = run_json(&[
        "--db",
        db,
        "executions",
        "wait",
        &id,
        "--json",
        "--timeout",
        "60s",
    ]);
    assert_eq!(result["result_kind"], "Ok");
    assert_eq!(result["value"]["attempts"], 1);
    // A workflow with children: the fan-out's tree runs to the end too.
    let fanout = submit(
        db,
        "stele:demo/workflows.fanout",
        r#"{"children":3,"fail_probability":0,"work_ms":10}"#,
    );
    let summary = run_json(&["--db", db, "executions", "wait", &fanout, "--json"]);
    assert_eq!(summary["value"]["succeeded"], 3, "{summary}");

    let (code, rest) = server.terminate();
    assert_eq!(code, 130, "{rest:?}");
    assert_eq!(rest.len(), 2, "{rest:?}");
    assert_eq!(rest[0], STOPPING, "{rest:?}");
    assert_eq!(
        rest[1],
        format!("error: interrupted: stopped serving {db}; {NOTHING_RUNNING}")
    );
    // Closed cleanly: the file opens and holds what was run.
    let rows = run_json(&["--db", db, "executions", "list", "--json"]);
    assert_eq!(
        rows.as_array().unwrap().len(),
        5,
        "flaky, fanout and its 3 children"
    );
}

/// What `serve` says when a signal stops it (with the default `--drain-timeout`).
const STOPPING: &str = "stopping: no new work is taken; the runs in flight get up to 10s to \
                        finish (Ctrl-C again stops at once)";
/// The end of its last line when nothing was running.
const NOTHING_RUNNING: &str = "runs in flight: 0 finished, 0 left (the next `stele serve` takes \
                               up what was left once its lease expires, or at once under the \
                               same --identity)";

/// Stopped by `SIGTERM`, `serve` drains: a run in flight finishes within `--drain-timeout`;
/// without time to drain, the run is left to its lease, still locked, and the next `serve`
/// takes it up once the lease expired.
#[test]
fn serve_drains_the_runs_in_flight_when_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let db_path = empty_database(dir.path());
    let db = path_str(&db_path);
    // Shorter than `flaky`'s lease of 2 s, long enough to be seen running.
    let working = r#"{"fail_probability":0,"work_ms":1500}"#;
    let locked = |doc: &Value| doc["state"] == "Locked";
    run_failing(
        &["--db", db, "serve", "--drain-timeout", "7x"],
        2,
        "invalid --drain-timeout: `7x` has the unknown unit `x`",
    );

    let server = Server::start(db, &[]);
    let finished = submit(db, FLAKY, working);
    show_until(db, &finished, locked);
    let (code, rest) = server.terminate();
    assert_eq!(code, 130, "{rest:?}");
    assert_eq!(
        rest,
        [
            STOPPING.to_string(),
            format!(
                "error: interrupted: stopped serving {db}; runs in flight: 1 finished, 0 left \
                 (the next `stele serve` takes up what was left once its lease expires, or at \
                 once under the same --identity)"
            )
        ]
    );
    let result = run_json(&["--db", db, "executions", "wait", &finished, "--json"]);
    assert_eq!(result["value"]["attempts"], 1, "{result}");

    let server = Server::start(db, &["--drain-timeout", "0s"]);
    let left = submit(db, FLAKY, working);
    show_until(db, &left, locked);
    let (code, rest) = server.terminate();
    assert_eq!(code, 130, "{rest:?}");
    assert!(
        rest.last()
            .is_some_and(|line| line.contains("runs in flight: 0 finished, 1 left")),
        "{rest:?}"
    );
    let shown = run_json(&["--db", db, "executions", "show", &left, "--json"]);
    assert_eq!(shown["state"], "Locked", "{shown}");
    // The next node's watcher times the lease out; its retry is the second attempt.
    let server = Server::start(db, &[]);
    let result = run_json(&[
        "--db",
        db,
        "executions",
        "wait",
        &left,
        "--json",
        "--timeout",
        "60s",
    ]);
    assert_eq!(result["value"]["attempts"], 2, "{result}");
    let (code, _) = server.terminate();
    assert_eq!(code, 130);
}

/// Reads `stele executions show ID --json` until `done` holds for it (an execution that
/// another process writes), and returns that document.
fn show_until(db: &str, id: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + SAFETY;
    loop {
        let shown = run(&["--db", db, "executions", "show", id, "--json"]);
        if shown.code == 0 {
            let doc: Value = serde_json::from_str(&shown.stdout).expect("JSON");
            if done(&doc) {
                return doc;
            }
        }
        assert!(
            Instant::now() < deadline,
            "{id} never got there: {}",
            shown.stderr
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_workflow_awaits_its_promise_until_complete_and_cancel_takes_the_promise_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let db_path = empty_database(dir.path());
    let db = path_str(&db_path);
    let server = Server::start(db, &[]);
    let approval = "stele:demo/workflows.approval";
    let params = r#"{"subject":"deploy 1.4"}"#;
    let workflow = submit(db, approval, params);
    // The workflow's first run creates the promise, `<workflow>.n:approval_1`, and waits.
    let promise = format!("{workflow}.n:approval_1");
    let waiting = show_until(db, &workflow, |doc| doc["state"] == "BlockedByJoinSet");
    assert_eq!(
        waiting["pending_state"]["BlockedByJoinSet"]["join_set_id"],
        "n:approval"
    );
    let stub = run_json(&["--db", db, "executions", "show", &promise, "--json"]);
    assert_eq!(stub["ffqn"], "stele:stub.approval");
    let answer = r#"{"approved":true,"by":"ops"}"#;
    assert_eq!(
        run_ok(&[
            "--db",
            db,
            "executions",
            "complete",
            &promise,
            "--json",
            answer
        ]),
        format!("completed {promise} with {answer}; {workflow} has its answer\n")
    );
    assert_eq!(
        run_ok(&["--db", db, "executions", "wait", &workflow]),
        format!("Ok {answer}\n")
    );

    // Another one, cancelled while it waits: its promise is cancelled with it.
    let other = submit(db, approval, params);
    show_until(db, &other, |doc| doc["state"] == "BlockedByJoinSet");
    assert_eq!(
        run_ok(&[
            "--db",
            db,
            "executions",
            "cancel",
            &other,
            "--reason",
            "no longer needed"
        ]),
        format!("cancelled {other} and 1 unfinished descendant (2 executions)\n")
    );
    let other_promise = format!("{other}.n:approval_1");
    assert_eq!(
        run_ok(&["--db", db, "executions", "wait", &other_promise]),
        "Cancelled: no longer needed\n"
    );
    run_failing(
        &[
            "--db",
            db,
            "executions",
            "complete",
            &other_promise,
            "--json",
            "true",
        ],
        2,
        &format!("execution {other_promise} was already completed with a different result"),
    );
    let (code, _) = server.terminate();
    assert_eq!(code, 130);
}

#[test]
fn serve_with_retention_removes_what_finished() {
    let dir = tempfile::tempdir().unwrap();
    let db_path = empty_database(dir.path());
    let db = path_str(&db_path);
    run_failing(
        &["--db", db, "serve", "--prune-older-than", "7x"],
        2,
        "invalid --prune-older-than: `7x` has the unknown unit `x`",
    );
    let server = Server::start(db, &["--prune-older-than", "0s", "--prune-every", "100ms"]);
    // A promise nobody completes stays pending: never pruned.
    let promise = submit(db, "stele:stub.never", "[]");
    let id = submit(db, FLAKY, FLAKY_PARAMS);
    // Gone once it ran and the retention task ran after that: read until it is.
    let deadline = Instant::now() + SAFETY;
    loop {
        let shown = run(&["--db", db, "executions", "show", &id]);
        if shown.code == 3 {
            break;
        }
        assert_eq!(shown.code, 0, "{}", shown.stderr);
        assert!(Instant::now() < deadline, "never pruned");
        std::thread::sleep(Duration::from_millis(100));
    }
    let kept = run_json(&["--db", db, "executions", "show", &promise, "--json"]);
    assert_eq!(kept["state"], "PendingAt");
    let (code, _) = server.terminate();
    assert_eq!(code, 130);
}

#[test]
fn the_operator_commands_run_on_postgres_too() {
    let Some(server) = TestServer::or_skip("the_operator_commands_run_on_postgres_too") else {
        return;
    };
    let database = block_on(TestDatabase::create(&server));
    let url = database.url.as_str();
    let serving = Server::start(url, &["--prune-older-than", "1d"]);
    let submit_args = [
        "--db",
        url,
        "submit",
        FLAKY,
        "--params",
        FLAKY_PARAMS,
        "--id",
        ID,
    ];
    assert_eq!(run_ok(&submit_args), format!("{ID} created\n"));
    assert!(run_ok(&submit_args).starts_with(&format!("{ID} already existed")));
    let result = run_json(&["--db", url, "executions", "wait", ID, "--json"]);
    assert_eq!(result["result_kind"], "Ok");

    let stub = submit(url, "stele:stub.approval", "[]");
    assert_eq!(
        run_ok(&[
            "--db",
            url,
            "executions",
            "complete",
            &stub,
            "--json",
            "true"
        ]),
        format!("completed {stub} with true\n")
    );
    assert_eq!(
        run_ok(&["--db", url, "executions", "wait", &stub]),
        "Ok true\n"
    );
    let other = submit(url, "stele:stub.approval", "[]");
    assert_eq!(
        run_ok(&["--db", url, "executions", "cancel", &other]),
        format!("cancelled {other}\n")
    );
    let (code, _) = serving.terminate();
    assert_eq!(code, 130);
    let totals = run_json(&[
        "--db",
        url,
        "executions",
        "prune",
        "--older-than",
        "0s",
        "--json",
    ]);
    assert_eq!(u64_at(&totals, "/trees"), 3, "{totals}");
    run_failing(
        &["--db", url, "executions", "show", ID],
        3,
        &format!("no execution {ID}"),
    );
}

/// How many tables the database's `public` schema holds.
fn table_count(database: &TestDatabase) -> i64 {
    block_on(database.with_client(async |client| {
        client
            .query_one(
                "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'",
                &[],
            )
            .await
            .unwrap()
            .get(0)
    }))
}

#[test]
fn no_command_but_demo_and_serve_creates_stele_tables_in_a_postgres_database() {
    let Some(server) = TestServer::or_skip(
        "no_command_but_demo_and_serve_creates_stele_tables_in_a_postgres_database",
    ) else {
        return;
    };
    let database = block_on(TestDatabase::create(&server));
    let url = database.url.as_str();
    let commands: [&[&str]; 7] = [
        &["executions", "list"],
        &["executions", "show", ID],
        &["executions", "wait", ID],
        &["submit", FLAKY, "--params", FLAKY_PARAMS],
        &["executions", "cancel", ID],
        &["executions", "complete", ID, "--json", "1"],
        &["executions", "prune", "--older-than", "1d"],
    ];
    for command in commands {
        run_failing(
            &[&["--db", url][..], command].concat(),
            4,
            "is not a Stele database: it holds none of Stele's tables",
        );
        assert_eq!(
            table_count(&database),
            0,
            "stele {command:?} created a table"
        );
    }
    // With a password in the URL (the test server trusts loopback and does not need it), the
    // message shows it masked.
    let password = "not-a-real-password";
    let with_password = url.replacen("postgres@", &format!("postgres:{password}@"), 1);
    if with_password != url {
        let listed = run(&["--db", &with_password, "executions", "list"]);
        assert_eq!(listed.code, 4, "{}", listed.stderr);
        assert!(listed.stderr.contains("postgres:***@"), "{}", listed.stderr);
        assert!(!listed.stderr.contains(password), "{}", listed.stderr);
        assert_eq!(table_count(&database), 0);
    }

    // An older schema: the commands that only read leave it at its version.
    block_on(storage_postgres::admin::migrate_to(&database.config, 1)).unwrap();
    let tables_at_1 = table_count(&database);
    for command in &commands[..3] {
        run_failing(
            &[&["--db", url][..], command].concat(),
            4,
            "has schema version 1, older than this build's",
        );
        assert_eq!(table_count(&database), tables_at_1);
    }
    let versions: Vec<i64> = block_on(database.with_client(async |client| {
        client
            .query("SELECT version FROM t_schema_migration", &[])
            .await
            .unwrap()
            .iter()
            .map(|row| row.get(0))
            .collect()
    }));
    assert_eq!(versions, [1], "left at its version");
    // A command that writes migrates it, and then the reads work.
    let rows = run_json(&[
        "--db",
        url,
        "executions",
        "prune",
        "--older-than",
        "1d",
        "--json",
    ]);
    assert_eq!(u64_at(&rows, "/trees"), 0, "{rows}");
    let listed = run_json(&["--db", url, "executions", "list", "--json"]);
    assert_eq!(listed.as_array().map(Vec::len), Some(0), "{listed}");
}

/// Each way of failing to open a PostgreSQL database is one `error:` line on stderr, with its
/// exit code, and none shows the password of the URL: a URL that does not parse, an unknown
/// `sslmode`, a refused connection, `sslmode=require` against a server without TLS, and, on
/// the spare server (TLS, a password rule), a wrong password and a certificate for another
/// host.
#[test]
fn postgres_open_errors_are_one_line_and_never_show_the_password() {
    use test_support::spare_server::{PASSWORD_ROLE, SpareServer};
    const SECRET: &str = "Secr3t-cli-Pa55";
    let check = |url: &str, code: i32, message: &str| {
        let args = ["--db", url, "executions", "list"];
        run_failing(&args, code, message);
        let output = run(&args);
        assert!(!output.stderr.contains(SECRET), "{}", output.stderr);
        assert!(output.stderr.contains(":***@"), "{}", output.stderr);
    };
    check(
        &format!("postgres://u:{SECRET}@127.0.0.1:notaport/db"),
        2,
        "invalid value for option `port`",
    );
    check(
        &format!("postgres://u:{SECRET}@127.0.0.1:5432/db?sslmode=verify"),
        2,
        "`sslmode` must be one of disable, prefer, require, verify-ca, verify-full, not `verify`",
    );
    check(
        &format!("postgres://u:{SECRET}@127.0.0.1:1/db"),
        4,
        "Connection refused",
    );
    if let Some(server) = TestServer::or_skip("postgres_open_errors_are_one_line") {
        let url = server
            .url
            .replacen("postgres@", &format!("postgres:{SECRET}@"), 1);
        let separator = if url.contains('?') { '&' } else { '?' };
        check(
            &format!("{url}{separator}sslmode=require"),
            4,
            "server does not support TLS; check that the server has `ssl = on`",
        );
    }
    let Some(spare) = SpareServer::lock("postgres_open_errors_are_one_line") else {
        return;
    };
    block_on(spare.ensure_password_role());
    check(
        &spare.url(
            &format!("{PASSWORD_ROLE}:{SECRET}"),
            "127.0.0.1",
            "postgres",
            "",
        ),
        4,
        "password authentication failed",
    );
    check(
        &spare.url(
            &format!("postgres:{SECRET}"),
            "127.0.0.1",
            "postgres",
            &format!(
                "sslmode=verify-full&sslrootcert={}",
                spare.ca_pem().display()
            ),
        ),
        4,
        "certificate not valid for name \"127.0.0.1\"",
    );
}

/// `stele serve` on a PostgreSQL server that is down when it starts says that it waits, and
/// serves once the server is up (the spare server, crashed first).
#[test]
fn serve_waits_for_a_postgres_server_that_is_not_up_yet() {
    use test_support::spare_server::SpareServer;
    let Some(spare) = SpareServer::lock("serve_waits_for_a_postgres_server") else {
        return;
    };
    let name = format!("stele_cli_serve_{}", std::process::id());
    let admin = storage_postgres::PostgresConfig::from_url(&spare.url(
        "postgres",
        "127.0.0.1",
        "postgres",
        "",
    ))
    .unwrap();
    block_on(async {
        storage_postgres::admin::drop_database(&admin, &name)
            .await
            .unwrap();
        storage_postgres::admin::create_database(&admin, &name)
            .await
            .unwrap();
    });
    let url = spare.url("postgres", "127.0.0.1", &name, "");
    spare.crash();
    let mut child = stele(&["--db", &url, "serve"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start stele serve");
    let lines = test_support::process::read_lines(child.stderr.take().unwrap());
    let server = Server {
        child,
        lines,
        first: String::new(),
    };
    let first = server
        .lines
        .recv_timeout(SAFETY)
        .expect("serve says it waits");
    assert!(
        first.starts_with("cannot reach ") && first.ends_with("waiting for the server"),
        "{first}"
    );
    spare.start();
    let next = server.lines.recv_timeout(SAFETY).expect("serve serves");
    assert!(next.starts_with("serving "), "{next}");
    let (code, _) = server.terminate();
    assert_eq!(code, 130);
    block_on(storage_postgres::admin::drop_database(&admin, &name)).unwrap();
}

#[test]
fn serve_refuses_a_public_http_address_without_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let db_path = dir.path().join("stele.db");
    let output = stele(&[
        "--db",
        path_str(&db_path),
        "serve",
        "--http",
        "0.0.0.0:8080",
    ])
    .env_remove("STELE_HTTP_TOKEN")
    .output()
    .expect("run stele");
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--http-token"), "{stderr}");
    assert!(!db_path.exists(), "nothing was started or created");
}

/// `/metrics` of a running `serve`, scraped over HTTP behind the token: Prometheus' text
/// format, which parses line by line, and holds the counts of what the node ran.
#[test]
fn serve_http_serves_its_metrics_in_prometheus_text_behind_the_token() {
    use std::io::{Read as _, Write as _};
    let dir = tempfile::tempdir().unwrap();
    let db_path = empty_database(dir.path());
    let db = path_str(&db_path);
    let server = Server::start(db, &["--http", "127.0.0.1:0", "--http-token", "t0k"]);
    let request = |head: &str, body: &str| {
        let address = server_address(&server.first);
        let mut stream = std::net::TcpStream::connect(&address).expect("connect");
        write!(
            stream,
            "{head}\r\nHost: {address}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).expect("an answer");
        answer
    };
    // Submitted through the node's own API, so that the node's process counts the creation.
    let id = "E_01KBHTTPDEM000000000000003";
    let submitted = request(
        "POST /api/v1/executions HTTP/1.1\r\nAuthorization: Bearer t0k\r\nContent-Type: application/json",
        &format!(
            r#"{{"function":"{FLAKY}","params":{{"fail_probability":0,"work_ms":1}},"id":"{id}"}}"#
        ),
    );
    assert!(submitted.starts_with("HTTP/1.1 201"), "{submitted}");
    run_ok(&["--db", db, "executions", "wait", id, "--timeout", "60s"]);
    let scrape = |auth: &str| request(&format!("GET /metrics HTTP/1.1{auth}"), "");
    assert!(scrape("").starts_with("HTTP/1.1 401"));
    let answer = scrape("\r\nAuthorization: Bearer t0k");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let (_, body) = answer.split_once("\r\n\r\n").expect("headers and a body");
    // Every line is a comment or `name{labels} value`, with a number for the value.
    let mut samples = std::collections::HashMap::new();
    let mut types = std::collections::HashMap::new();
    for line in body.lines().filter(|line| !line.is_empty()) {
        if let Some(declared) = line.strip_prefix("# TYPE ") {
            let (name, kind) = declared.split_once(' ').unwrap_or_else(|| panic!("{line}"));
            types.insert(name.to_string(), kind.to_string());
        }
        if line.starts_with('#') {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("{line}"));
        let value: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("not a number: {line}"));
        samples.insert(series.to_string(), value);
    }
    let flaky = r#"function="stele:demo/activities.flaky""#;
    assert_eq!(
        samples.get(&format!("stele_executions_created_total{{{flaky}}}")),
        Some(&1.0),
        "{body}"
    );
    assert_eq!(
        samples.get(&format!(
            r#"stele_executions_finished_total{{{flaky},outcome="ok"}}"#
        )),
        Some(&1.0),
        "{body}"
    );
    // Every histogram of docs/METRICS.md's table is exported as one, with buckets (not a
    // summary), and those this workload recorded are there, each `+Inf` bucket its count.
    let promised: Vec<&str> = include_str!("../../../docs/METRICS.md")
        .lines()
        .filter(|line| line.contains("| histogram |"))
        .filter_map(|line| line.strip_prefix("| `")?.split_once('`'))
        .map(|(name, _)| name)
        .collect();
    assert_eq!(promised.len(), 5, "{promised:?}");
    for name in promised {
        if let Some(kind) = types.get(name) {
            assert_eq!(kind, "histogram", "{name}: {body}");
        }
    }
    // The submission is created locked when an executor of `flaky` had a permit free (they
    // take permits while they tick), else created due: either write is timed.
    let create = ["create_locked", "create"]
        .map(|operation| format!(r#"operation="{operation}""#))
        .into_iter()
        .find(|labels| {
            samples.contains_key(&format!(
                "stele_store_write_duration_seconds_count{{{labels}}}"
            ))
        })
        .unwrap_or_else(|| panic!("no create timed: {body}"));
    let recorded = [
        ("stele_schedule_to_start_seconds", flaky.to_string()),
        ("stele_attempt_duration_seconds", flaky.to_string()),
        ("stele_created_to_finished_seconds", flaky.to_string()),
        ("stele_store_write_duration_seconds", create),
    ];
    for (name, labels) in recorded {
        assert_eq!(
            types.get(name).map(String::as_str),
            Some("histogram"),
            "{name}: {body}"
        );
        let count = samples.get(&format!("{name}_count{{{labels}}}"));
        let all = samples.get(&format!(r#"{name}_bucket{{{labels},le="+Inf"}}"#));
        assert!(count.is_some_and(|count| *count >= 1.0), "{name}: {body}");
        assert_eq!(all, count, "{name}: {body}");
        assert!(
            samples.contains_key(&format!("{name}_sum{{{labels}}}")),
            "{body}"
        );
        let buckets = (samples.keys())
            .filter(|series| series.starts_with(&format!("{name}_bucket{{{labels},le=")))
            .count();
        assert_eq!(buckets, 18, "seventeen bounds and +Inf: {body}");
    }
    let (code, _) = server.terminate();
    assert_eq!(code, 130);
}

#[test]
fn serve_http_answers_a_request_with_its_token() {
    use std::io::{Read as _, Write as _};
    let dir = tempfile::tempdir().unwrap();
    let db_path = empty_database(dir.path());
    let server = Server::start(
        path_str(&db_path),
        &["--http", "127.0.0.1:0", "--http-token", "t0k"],
    );
    let request = |auth: &str| {
        let address = server_address(&server.first);
        let mut stream = std::net::TcpStream::connect(&address).expect("connect");
        write!(
            stream,
            "GET /api/v1/executions HTTP/1.1\r\nHost: {address}\r\n{auth}Connection: close\r\n\r\n"
        )
        .unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).expect("an answer");
        answer
    };
    let answer = request("Authorization: Bearer t0k\r\n");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("\"executions\":[]"), "{answer}");
    let answer = request("");
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    let (code, _) = server.terminate();
    assert_eq!(code, 130);
}

/// `STELE_HTTP_TOKEN` exported: `serve` without `--http` starts (the token guards nothing it
/// serves; clap's `requires = "http"` refused it before, counting the environment's value as
/// the flag), and with `--http` the token guards the API as `--http-token` does. A
/// `--http-token` written on the command line without `--http` is still refused.
#[test]
fn an_exported_stele_http_token_serves_without_http_and_guards_the_api_with_it() {
    use std::io::{Read as _, Write as _};
    let dir = tempfile::tempdir().unwrap();
    let db_path = empty_database(dir.path());
    let db = path_str(&db_path);
    let token = [("STELE_HTTP_TOKEN", "env-t0k")];
    let server = Server::start_with(db, &[], &token);
    assert!(!server.first.contains("HTTP API"), "{}", server.first);
    let (code, _) = server.terminate();
    assert_eq!(code, 130);

    let server = Server::start_with(db, &["--http", "127.0.0.1:0"], &token);
    let request = |auth: &str| {
        let address = server_address(&server.first);
        let mut stream = std::net::TcpStream::connect(&address).expect("connect");
        write!(
            stream,
            "GET /api/v1/executions HTTP/1.1\r\nHost: {address}\r\n{auth}Connection: close\r\n\r\n"
        )
        .unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).expect("an answer");
        answer
    };
    for refused in ["", "Authorization: Bearer t0k\r\n"] {
        let answer = request(refused);
        assert!(answer.starts_with("HTTP/1.1 401"), "{refused}: {answer}");
    }
    let answer = request("Authorization: Bearer env-t0k\r\n");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let (code, _) = server.terminate();
    assert_eq!(code, 130);

    run_failing(
        &["--db", db, "serve", "--http-token", "t0k"],
        2,
        "--http-token needs --http",
    );
}

/// `127.0.0.1:PORT` of serve's line `... and the HTTP API on http://127.0.0.1:PORT/api/v1 ...`.
fn server_address(first: &str) -> String {
    let (_, rest) = first
        .split_once("the HTTP API on http://")
        .unwrap_or_else(|| panic!("{first}"));
    let (address, _) = rest
        .split_once("/api/v1")
        .unwrap_or_else(|| panic!("{first}"));
    address.to_string()
}

/// `stele schedules`: a schedule created (again: nothing written; with another spec: refused,
/// naming it), each kind of bad input refused in one line before anything is written, its
/// ticks fired by `stele serve` as executions that run, and each operator's command doing
/// what it prints.
#[test]
fn schedules_fire_under_serve_and_each_command_does_what_it_prints() {
    let dir = tempfile::tempdir().unwrap();
    let db_path = empty_database(dir.path());
    let db = path_str(&db_path);
    let create = |extra: &[&str]| -> Vec<String> {
        let base = [
            "--db",
            db,
            "schedules",
            "create",
            "tick",
            FLAKY,
            "--params",
            FLAKY_PARAMS,
        ];
        base.iter().chain(extra).map(|s| (*s).to_owned()).collect()
    };
    let args = create(&["--every", "1s", "--overlap", "allow-all"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let created = run_ok(&args);
    assert!(
        created.starts_with("schedule tick created; next tick "),
        "{created}"
    );
    let again = run_ok(&args);
    assert!(
        again.starts_with("schedule tick already existed with this definition, nothing written"),
        "{again}"
    );
    let other = create(&["--every", "2s", "--overlap", "allow-all"]);
    let other: Vec<&str> = other.iter().map(String::as_str).collect();
    run_failing(
        &other,
        2,
        "cannot create schedule tick: schedule tick already exists with another spec",
    );
    for (extra, message) in [
        (&["--cron", "61 * * * *"][..], "--cron: "),
        (
            &["--cron", "0 3 * * *", "--timezone", "Mars/Olympus"],
            "--timezone: ",
        ),
        (&["--every", "0s"], "--every: "),
        (&["--every", "-5m"], "--every: "),
        (&["--every", "5m", "--offset", "-1m"], "--offset: "),
        (
            &["--every", "5m", "--catchup-window", "-1m"],
            "--catchup-window: ",
        ),
        (
            &["--every", "1s", "--overlap", "sometimes"],
            "--overlap: `sometimes` is not an overlap policy",
        ),
    ] {
        let args = create(extra);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run_failing(&args, 2, message);
    }
    run_failing(
        &[
            "--db",
            db,
            "schedules",
            "create",
            "nobody",
            "stele:demo/activities.nobody",
            "--every",
            "1m",
        ],
        2,
        "function: schedule nobody: stele:demo/activities.nobody is not a function this node runs",
    );
    let listed = run_json(&["--db", db, "schedules", "list", "--json"]);
    assert_eq!(
        listed.as_array().map(Vec::len),
        Some(1),
        "nothing refused was written: {listed}"
    );

    // `serve` fires a tick a second; its executions run to the end.
    let server = Server::start(db, &[]);
    let deadline = std::time::Instant::now() + SAFETY;
    let shown = loop {
        let shown = run_json(&[
            "--db",
            db,
            "schedules",
            "show",
            "tick",
            "--json",
            "--ticks",
            "50",
        ]);
        let finished = (shown["ticks"].as_array().unwrap().iter())
            .filter(|tick| tick["outcome"]["kind"] == "fired" && tick["state"] == "Finished")
            .count();
        if finished >= 3 {
            break shown;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "three ticks run: {shown}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let (code, _) = server.terminate();
    assert_eq!(code, 130);
    let ticks = shown["ticks"].as_array().unwrap();
    let ids: std::collections::HashSet<_> = ticks
        .iter()
        .filter_map(|tick| tick["outcome"]["execution_id"].as_str())
        .collect();
    let fired = ticks
        .iter()
        .filter(|t| t["outcome"]["kind"] == "fired")
        .count();
    assert_eq!(ids.len(), fired, "an execution each");
    let text = run_ok(&["--db", db, "schedules", "show", "tick"]);
    assert!(text.starts_with("schedule tick: active\n"), "{text}");
    assert!(text.contains("every 1s (UTC)"), "{text}");

    let paused = run_ok(&[
        "--db",
        db,
        "schedules",
        "pause",
        "tick",
        "--note",
        "maintenance",
    ]);
    assert_eq!(paused, "schedule tick changed\n");
    let text = run_ok(&["--db", db, "schedules", "show", "tick"]);
    assert!(text.starts_with("schedule tick: paused\n"), "{text}");
    assert!(text.contains(": maintenance"), "{text}");
    let again = run_ok(&["--db", db, "schedules", "pause", "tick"]);
    assert_eq!(again, "schedule tick was already so, nothing written\n");
    assert_eq!(
        run_ok(&["--db", db, "schedules", "resume", "tick"]),
        "schedule tick changed\n"
    );
    let triggered = run_ok(&["--db", db, "schedules", "trigger", "tick"]);
    assert!(
        triggered.starts_with("E_") && triggered.ends_with(" fired\n"),
        "{triggered}"
    );

    // A backfill over ticks `serve` fired fires none of them again.
    let fired_at: Vec<&str> = (ticks.iter())
        .filter(|tick| tick["outcome"]["kind"] == "fired" && tick["outcome"]["by"] == "tick")
        .filter_map(|tick| tick["at"].as_str())
        .collect();
    let (first, last) = (fired_at.last().unwrap(), fired_at.first().unwrap());
    let backfilled = run_ok(&[
        "--db",
        db,
        "schedules",
        "backfill",
        "tick",
        "--from",
        first,
        "--to",
        last,
    ]);
    assert!(
        backfilled
            .lines()
            .all(|line| line.ends_with(" had fired already, nothing written")),
        "{backfilled}"
    );
    run_failing(
        &[
            "--db",
            db,
            "schedules",
            "backfill",
            "tick",
            "--from",
            "yesterday",
            "--to",
            last,
        ],
        2,
        "--from: `yesterday` is not an RFC 3339 time",
    );
    let deleted = run_ok(&["--db", db, "schedules", "delete", "tick"]);
    assert!(deleted.starts_with("schedule tick deleted"), "{deleted}");
    run_failing(
        &["--db", db, "schedules", "show", "tick"],
        3,
        "schedule tick",
    );
    run_failing(
        &["--db", db, "schedules", "resume", "tick"],
        3,
        "schedule tick",
    );
}
