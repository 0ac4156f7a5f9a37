//! The API over real HTTP on loopback (reqwest against a node serving it on `127.0.0.1:0`),
//! on every backend (memory, SQLite, PostgreSQL; test-support's factories): each endpoint's
//! answers, each error status, the long poll woken by the finish, and a drain of a node with
//! the server.

use concepts::{ClockFn as _, DbConnection, FunctionFqn, PendingStateKind};
use conformance::StoreFactory;
use executor::Now;
use node::{DrainReport, ExecutorSettings, Node, NodeBuilder};
use reqwest::StatusCode;
use serde_json::{Value, json};
use server::ApiOptions;
use std::{sync::Arc, time::Duration};
use test_utils::SimClock;
use tokio::sync::{Semaphore, mpsc};
use workflow::{ActivityCtx, Function};

#[path = "http/faults.rs"]
mod faults;
#[path = "http/fuzz.rs"]
mod fuzz;
#[path = "http/long_polls.rs"]
mod long_polls;

/// The bound of every wait that should end much sooner; reaching it fails the test.
const SAFETY: Duration = Duration::from_secs(60);

const DOUBLE: Function<u64, u64> = Function::new("test:http/api.double");
/// Waits for a permit of the test's gate, then returns its parameter.
const GATED: Function<u64, u64> = Function::new("test:http/api.gated");
/// Sleeps its parameter in milliseconds on the first attempt.
const WORK: Function<u64, u64> = Function::new("test:http/api.work");

/// A node serving the API, its address and its store; the guard keeps the store alive.
struct Served {
    base: String,
    http: reqwest::Client,
    node: Node,
    db: Arc<dyn DbConnection>,
    /// Opened wide at the end, so that no run of `GATED` outlives the test.
    gate: Arc<Semaphore>,
    _guard: conformance::TestStore,
}

impl Served {
    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// `host:port` of the server.
    fn address(&self) -> &str {
        let authority = self.base.trim_start_matches("http://");
        authority.trim_end_matches("/api/v1")
    }

    /// A raw connection that has sent `bytes` and then stalls.
    async fn stalled(&self, bytes: &[u8]) -> tokio::net::TcpStream {
        use tokio::io::AsyncWriteExt as _;
        let mut stream = (tokio::net::TcpStream::connect(self.address()).await).expect("connects");
        stream.write_all(bytes).await.expect("writes");
        stream
    }

    async fn get(&self, path: &str) -> (StatusCode, Value) {
        answer(self.http.get(self.url(path)).send().await).await
    }

    async fn post(&self, path: &str, body: &Value) -> (StatusCode, Value) {
        answer(self.http.post(self.url(path)).json(body).send().await).await
    }

    async fn stop(self) {
        self.gate.add_permits(Semaphore::MAX_PERMITS / 2);
        assert_eq!(self.node.shutdown(SAFETY).await.background_aborted, 0);
        self.db.close().await;
    }
}

/// What a stalled connection reads until the server closes it (well before 10 s), as text.
async fn read_until_closed(mut stream: tokio::net::TcpStream) -> (std::io::Result<usize>, String) {
    use tokio::io::AsyncReadExt as _;
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer))
        .await
        .expect("the server ends the stalled request well before 10 s");
    (read, String::from_utf8_lossy(&answer).into_owned())
}

/// The status and the JSON body of `response` (every answer of the API is JSON).
async fn answer(response: reqwest::Result<reqwest::Response>) -> (StatusCode, Value) {
    let response = response.expect("an answer");
    let status = response.status();
    let text = response.text().await.expect("a body");
    let body = serde_json::from_str(&text).unwrap_or_else(|err| panic!("not JSON ({err}): {text}"));
    (status, body)
}

async fn serve<C: concepts::ClockFn>(
    factory: &dyn StoreFactory,
    builder: impl FnOnce(Arc<dyn DbConnection>, Arc<Semaphore>) -> NodeBuilder<C>,
    options: ApiOptions,
) -> Served {
    let store = factory.fresh().await;
    let db = store.db.clone();
    serve_over(store, db, builder, options).await
}

/// [`serve`] over `db`, a store in front of `store`'s (a decorator), or `store`'s own.
async fn serve_over<C: concepts::ClockFn>(
    store: conformance::TestStore,
    db: Arc<dyn DbConnection>,
    builder: impl FnOnce(Arc<dyn DbConnection>, Arc<Semaphore>) -> NodeBuilder<C>,
    options: ApiOptions,
) -> Served {
    let gate = Arc::new(Semaphore::new(0));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let base = format!("http://{}/api/v1", listener.local_addr().expect("bound"));
    let node = builder(db.clone(), gate.clone())
        .background_service("http", server::serve(listener, options))
        .start()
        .expect("a valid node");
    Served {
        base,
        http: reqwest::Client::new(),
        node,
        db,
        gate,
        _guard: store,
    }
}

/// Everything `db` holds that a request could write: every execution's log (events and
/// responses), every schedule and its ticks, as text to compare.
async fn dump(db: &dyn DbConnection) -> String {
    let executions = db
        .list_executions(
            concepts::ListExecutionsFilter::default(),
            concepts::Pagination {
                cursor: None,
                length: 10_000,
            },
        )
        .await
        .expect("a listing");
    let mut text = String::new();
    for summary in executions {
        let log = db.get(&summary.execution_id).await.expect("a log");
        text.push_str(&format!("{:?}\n{:?}\n", log.events, log.responses));
    }
    for schedule in db.list_schedules(None, 10_000).await.expect("schedules") {
        let ticks = db
            .schedule_ticks(&schedule.definition.name, 10_000)
            .await
            .expect("ticks");
        text.push_str(&format!("{schedule:?}\n{ticks:?}\n"));
    }
    text
}

/// A node of `DOUBLE` and `GATED` (whose runs wait for a permit of `gate`).
fn doubling(db: Arc<dyn DbConnection>, gate: Arc<Semaphore>) -> NodeBuilder<Now> {
    {
        Node::builder(db, Now)
            .activity(&DOUBLE, |_ctx: ActivityCtx, n: u64| async move {
                Ok::<_, String>(n * 2)
            })
            .activity(&GATED, move |_ctx: ActivityCtx, n: u64| {
                let gate = gate.clone();
                async move {
                    gate.acquire().await.expect("open").forget();
                    Ok::<_, String>(n)
                }
            })
    }
}

async fn each_endpoint_answers(factory: &dyn StoreFactory) {
    let served = serve(factory, doubling, ApiOptions::default()).await;
    let (status, body) = served.get("/healthz").await;
    assert_eq!((status, &body["status"]), (StatusCode::OK, &json!("ok")));
    let (status, body) = served.get("/readyz").await;
    assert_eq!((status, &body["status"]), (StatusCode::OK, &json!("ready")));
    let (status, body) = served.get("/functions").await;
    assert_eq!(status, StatusCode::OK);
    let names: Vec<&str> = body["functions"]
        .as_array()
        .expect("a list")
        .iter()
        .map(|function| function["function"].as_str().expect("a name"))
        .collect();
    assert_eq!(names, ["test:http/api.double", "test:http/api.gated"]);

    // Submit: created, then the same again (already existed), then a conflict.
    let id = concepts::ExecutionId::generate_at(Now.now()).to_string();
    let submit = json!({"function": "test:http/api.double", "params": 21, "id": id});
    let (status, body) = served.post("/executions", &submit).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!((&body["id"], &body["created"]), (&json!(id), &json!(true)));
    let (status, body) = served
        .get(&format!("/executions/{id}/wait?timeout=30s"))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["result"], json!({"kind": "ok", "value": 42}));
    let (status, body) = served.post("/executions", &submit).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["created"], json!(false));
    assert_eq!(body["state"]["kind"], json!("finished"));
    let (status, body) = served
        .post(
            "/executions",
            &json!({"function": "test:http/api.double", "params": 22, "id": id}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"], json!("conflict"));
    assert_eq!(body["differences"], json!(["parameters"]));

    // Show and events.
    let (status, body) = served.get(&format!("/executions/{id}")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["params"], json!(21));
    assert_eq!(body["result"]["value"], json!(42));
    assert_eq!(body["parent"], Value::Null);
    // Created, Locked, Finished: the `Finished` is stored at the next version.
    assert_eq!(
        (&body["next_version"], &body["events"]),
        (&json!(2), &json!(3))
    );
    let (status, body) = served
        .get(&format!("/executions/{id}/events?limit=2"))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let types: Vec<&Value> = body["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| &e["type"])
        .collect();
    assert_eq!(types, [&json!("created"), &json!("locked")]);
    assert_eq!(body["next"], json!(2));
    let (_, body) = served.get(&format!("/executions/{id}/events?from=2")).await;
    assert_eq!(body["events"][0]["type"], json!("finished"));
    assert_eq!(body["next"], Value::Null);
    let (status, body) = served.get(&format!("/executions/{id}/children")).await;
    assert_eq!((status, &body["executions"]), (StatusCode::OK, &json!([])));

    // The list, its filters and its cursor.
    for n in 0..3 {
        let (status, _) = served
            .post(
                "/executions",
                &json!({"function": "test:http/api.gated", "params": n}),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED);
    }
    let (status, body) = served
        .get("/executions?limit=2&function=test:http/api.gated")
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let first = body["executions"].as_array().expect("rows").clone();
    assert_eq!(first.len(), 2);
    let cursor = body["next_cursor"]
        .as_str()
        .expect("a next page")
        .to_string();
    let (_, body) = served
        .get(&format!(
            "/executions?limit=2&function=test:http/api.gated&cursor={cursor}"
        ))
        .await;
    assert_eq!(body["executions"].as_array().expect("rows").len(), 1);
    assert_eq!(body["next_cursor"], Value::Null);
    let (_, body) = served
        .get("/executions?state=finished&top_level=true")
        .await;
    let rows = body["executions"].as_array().expect("rows");
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["id"], json!(id));
    let prefix = &id[..6];
    let (_, body) = served.get(&format!("/executions?id_prefix={id}")).await;
    assert_eq!(
        body["executions"].as_array().expect("rows").len(),
        1,
        "{prefix}"
    );
    let (_, body) = served
        .get("/executions?created_before=2000-01-01T00:00:00Z")
        .await;
    assert_eq!(body["executions"], json!([]));

    // Cancel a gated one; cancel again: already finished.
    let gated = first[0]["id"].as_str().expect("an id").to_string();
    let (status, body) = served
        .post(
            &format!("/executions/{gated}/cancel"),
            &json!({"reason": "test"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body,
        json!({"outcome": "cancelled", "id": gated, "executions": 1})
    );
    let (_, body) = served
        .post(&format!("/executions/{gated}/cancel"), &json!({}))
        .await;
    assert_eq!(body["outcome"], json!("already_finished"));
    assert_eq!(
        body["result"],
        json!({"kind": "cancelled", "reason": "test"})
    );

    // A promise: completed, the same again, another value.
    let stub = FunctionFqn::stub("approval").expect("a stub").to_string();
    let (_, body) = served
        .post("/executions", &json!({"function": stub, "params": null}))
        .await;
    let promise = body["id"].as_str().expect("an id").to_string();
    let complete = format!("/executions/{promise}/complete");
    let (status, body) = served.post(&complete, &json!({"value": true})).await;
    assert_eq!(
        (status, &body["outcome"]),
        (StatusCode::OK, &json!("completed"))
    );
    let (_, body) = served.post(&complete, &json!({"value": true})).await;
    assert_eq!(body["outcome"], json!("already_completed"));
    let (status, body) = served.post(&complete, &json!({"value": false})).await;
    assert_eq!(
        (status, &body["error"]),
        (StatusCode::CONFLICT, &json!("conflict"))
    );
    let (status, body) = served
        .post(&format!("/executions/{id}/complete"), &json!({"value": 1}))
        .await;
    assert_eq!(
        (status, &body["error"]),
        (StatusCode::CONFLICT, &json!("refused")),
        "{body}"
    );
    // The caller's W3C `traceparent` is stored with the execution; one that is not in the
    // format is no context at all.
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    for (header, stored) in [(traceparent, Some(traceparent)), ("00-4bf9-00f0-01", None)] {
        let response = served
            .http
            .post(served.url("/executions"))
            .header("traceparent", header)
            .json(&json!({"function": "test:http/api.double", "params": 1}))
            .send()
            .await;
        let (status, body) = answer(response).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        let traced: concepts::ExecutionId = body["id"].as_str().unwrap().parse().unwrap();
        let log = served.db.get(&traced).await.unwrap();
        let Some(concepts::Created { metadata, .. }) = log.events[0].event.created() else {
            panic!("a log starts with its creation");
        };
        assert_eq!(metadata.traceparent(), stored, "{header}");
    }
    served.stop().await;
}

async fn each_refusal_has_its_status(factory: &dyn StoreFactory) {
    let served = serve(factory, doubling, ApiOptions::default()).await;
    let refusals = [
        (
            "malformed JSON",
            "{\"function\":",
            StatusCode::BAD_REQUEST,
            "malformed_body",
        ),
        (
            "an unknown field",
            r#"{"function":"test:http/api.double","params":1,"colour":"red"}"#,
            StatusCode::BAD_REQUEST,
            "malformed_body",
        ),
        (
            "a malformed id",
            r#"{"function":"test:http/api.double","params":1,"id":"nope"}"#,
            StatusCode::BAD_REQUEST,
            "malformed_id",
        ),
        (
            "refused parameters",
            r#"{"function":"test:http/api.double","params":"forty-two"}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "params_refused",
        ),
    ];
    for (what, body, status, kind) in refusals {
        let response = served
            .http
            .post(served.url("/executions"))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await;
        let (got, answer) = answer(response).await;
        assert_eq!(
            (got, &answer["error"]),
            (status, &json!(kind)),
            "{what}: {answer}"
        );
        assert!(
            answer["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{what}"
        );
    }
    let big = json!({"function": "test:http/api.double", "params": "x".repeat(2 * 1024 * 1024)});
    // On a connection of its own: the server closes it after refusing a body it did not
    // read, and a pooled connection reused at that moment would fail the next request.
    let (status, body) = answer(
        reqwest::Client::new()
            .post(served.url("/executions"))
            .json(&big)
            .send()
            .await,
    )
    .await;
    assert_eq!(
        (status, &body["error"]),
        (StatusCode::PAYLOAD_TOO_LARGE, &json!("body_too_large"))
    );
    let unknown = concepts::ExecutionId::generate_at(Now.now());
    for path in ["", "/events", "/children", "/wait?timeout=1s"] {
        let (status, body) = served.get(&format!("/executions/{unknown}{path}")).await;
        assert_eq!(
            (status, &body["error"]),
            (StatusCode::NOT_FOUND, &json!("not_found")),
            "{path}"
        );
    }
    let too_long = "r".repeat(concepts::CancelRequest::MAX_REASON_BYTES + 1);
    let (status, body) = served
        .post(
            &format!("/executions/{unknown}/cancel"),
            &json!({ "reason": too_long }),
        )
        .await;
    assert_eq!(
        (status, &body["error"]),
        (StatusCode::UNPROCESSABLE_ENTITY, &json!("reason_too_long")),
        "{body}"
    );
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("at most 4096 bytes"),
        "{body}"
    );
    let (status, body) = served.get("/executions/E_nope").await;
    assert_eq!(
        (status, &body["error"]),
        (StatusCode::BAD_REQUEST, &json!("malformed_id"))
    );
    for query in [
        "limit=1001",
        "limit=0",
        "cursor=nope",
        "state=asleep",
        "colour=red",
        "created_after=yesterday",
    ] {
        let (status, body) = served.get(&format!("/executions?{query}")).await;
        assert_eq!(
            (status, &body["error"]),
            (StatusCode::BAD_REQUEST, &json!("malformed_query")),
            "{query}"
        );
    }
    let (status, body) = served.get("/nothing-here").await;
    assert_eq!(
        (status, &body["error"]),
        (StatusCode::NOT_FOUND, &json!("not_found"))
    );
    // Nothing refused was written.
    let (_, body) = served.get("/executions").await;
    assert_eq!(body["executions"], json!([]), "{body}");
    served.stop().await;
}

async fn a_token_and_read_only_mode_guard_every_request(factory: &dyn StoreFactory) {
    let options = ApiOptions {
        token: Some("s3cret".to_string()),
        read_only: true,
        ..ApiOptions::default()
    };
    let served = serve(factory, doubling, options).await;
    let (status, body) = served.get("/healthz").await;
    assert_eq!(
        (status, &body["error"]),
        (StatusCode::UNAUTHORIZED, &json!("unauthorized"))
    );
    let wrong = served
        .http
        .get(served.url("/executions"))
        .bearer_auth("guess")
        .send()
        .await;
    assert_eq!(answer(wrong).await.0, StatusCode::UNAUTHORIZED);
    let right = served
        .http
        .get(served.url("/executions"))
        .bearer_auth("s3cret")
        .send()
        .await;
    assert_eq!(answer(right).await.0, StatusCode::OK);
    let write = served
        .http
        .post(served.url("/executions"))
        .bearer_auth("s3cret")
        .json(&json!({"function": "test:http/api.double", "params": 1}))
        .send()
        .await;
    let (status, body) = answer(write).await;
    assert_eq!(
        (status, &body["error"]),
        (StatusCode::METHOD_NOT_ALLOWED, &json!("read_only"))
    );
    let (_, body) = answer(
        served
            .http
            .get(served.url("/executions"))
            .bearer_auth("s3cret")
            .send()
            .await,
    )
    .await;
    assert_eq!(body["executions"], json!([]));
    served.stop().await;
}

async fn the_long_poll_wakes_when_the_execution_finishes(factory: &dyn StoreFactory) {
    let served = serve(factory, doubling, ApiOptions::default()).await;
    let (_, body) = served
        .post(
            "/executions",
            &json!({"function": "test:http/api.gated", "params": 7}),
        )
        .await;
    let id = body["id"].as_str().expect("an id").to_string();
    // Still running: the timeout answers 202.
    let (status, body) = served
        .get(&format!("/executions/{id}/wait?timeout=50ms"))
        .await;
    assert_eq!(
        (status, &body["finished"]),
        (StatusCode::ACCEPTED, &json!(false))
    );
    let waiting = served
        .http
        .get(served.url(&format!("/executions/{id}/wait?timeout=1m")))
        .send();
    let waiting = tokio::spawn(waiting);
    // Opened once the run holds its lease, while the wait is in flight.
    tokio::time::timeout(SAFETY, async {
        while served
            .db
            .get(&id.parse().expect("an id"))
            .await
            .expect("the log")
            .pending_state
            .kind()
            != PendingStateKind::Locked
        {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("locked");
    served.gate.add_permits(1);
    let (status, body) = answer(
        tokio::time::timeout(SAFETY, waiting)
            .await
            .expect("woken")
            .expect("joined"),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["result"], json!({"kind": "ok", "value": 7}));
    served.stop().await;
}

async fn a_drain_finishes_inside_its_deadline_and_stops_the_server(factory: &dyn StoreFactory) {
    // The leases are judged on a clock that stands still: the run left stays locked.
    let clock = SimClock::epoch();
    let (started, mut runs) = mpsc::unbounded_channel();
    let settings = ExecutorSettings {
        lock_expiry: Duration::from_secs(60),
        ..ExecutorSettings::default()
    };
    let served = serve(
        factory,
        move |db, _gate| {
            Node::builder(db, clock)
                .activity(&WORK, move |ctx: ActivityCtx, millis: u64| {
                    let started = started.clone();
                    async move {
                        let _ = started.send(ctx.execution_id.clone());
                        tokio::time::sleep(Duration::from_millis(millis)).await;
                        Ok::<_, String>(millis)
                    }
                })
                .activity_settings(settings)
        },
        ApiOptions::default(),
    )
    .await;
    let mut ids = Vec::new();
    for millis in [100, 3_600_000] {
        let (status, body) = served
            .post(
                "/executions",
                &json!({"function": "test:http/api.work", "params": millis}),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        ids.push(body["id"].as_str().expect("an id").to_string());
    }
    for _ in 0..2 {
        runs.recv().await.expect("a run started");
    }
    let healthz = served.url("/healthz");
    let report = served.node.shutdown(Duration::from_secs(2)).await;
    assert_eq!(
        report,
        DrainReport {
            finished: 1,
            left: 1,
            background_aborted: 0
        }
    );
    // Nothing is accepted any more.
    assert!(served.http.get(healthz).send().await.is_err());
    let kind = |id: &str| {
        let db = served.db.clone();
        let id = id.parse().expect("an id");
        async move { db.get(&id).await.expect("the log").pending_state.kind() }
    };
    assert_eq!(kind(&ids[0]).await, PendingStateKind::Finished);
    assert_eq!(kind(&ids[1]).await, PendingStateKind::Locked);
    served.db.close().await;
}

/// The schedules' routes: create (again: 200, nothing written; another spec: 409 naming it),
/// each kind of bad body refused with its status before anything is written, list and show,
/// trigger and backfill, pause and resume, delete; the node's watcher fires the schedule's
/// ticks, which the show lists with their executions.
async fn schedules_are_operated_through_the_api(factory: &dyn StoreFactory) {
    let served = serve(factory, doubling, ApiOptions::default()).await;
    let schedule = json!({"name": "doubler", "function": "test:http/api.double", "params": 4,
                          "every": "1s", "overlap": "allow-all"});
    let (status, body) = served.post("/schedules", &schedule).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["written"], json!(true));
    assert_eq!(body["schedule"]["definition"]["spec"], json!("every 1s"));
    let (status, body) = served.post("/schedules", &schedule).await;
    assert_eq!((status, &body["written"]), (StatusCode::OK, &json!(false)));
    let mut other = schedule.clone();
    other["every"] = json!("2s");
    let (status, body) = served.post("/schedules", &other).await;
    assert_eq!(
        (status, &body["error"]),
        (StatusCode::CONFLICT, &json!("conflict")),
        "{body}"
    );
    assert!(
        body["message"].as_str().unwrap().contains("another spec"),
        "{body}"
    );
    for (change, error, status) in [
        (
            json!({"cron": "61 * * * *", "every": null}),
            "malformed_body",
            StatusCode::BAD_REQUEST,
        ),
        (
            json!({"timezone": "Mars/Olympus"}),
            "malformed_body",
            StatusCode::BAD_REQUEST,
        ),
        (
            json!({"every": "0s"}),
            "malformed_body",
            StatusCode::BAD_REQUEST,
        ),
        (
            json!({"function": "test:http/api.nobody"}),
            "malformed_body",
            StatusCode::BAD_REQUEST,
        ),
        (
            json!({"params": "four"}),
            "params_refused",
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            json!({"hourly": true}),
            "malformed_body",
            StatusCode::BAD_REQUEST,
        ),
    ] {
        let mut refused = schedule.clone();
        refused["name"] = json!("refused");
        for (key, value) in change.as_object().unwrap() {
            refused[key] = value.clone();
        }
        let (got, body) = served.post("/schedules", &refused).await;
        assert_eq!(
            (got, &body["error"]),
            (status, &json!(error)),
            "{refused}: {body}"
        );
    }
    let (status, body) = served.get("/schedules").await;
    assert_eq!(status, StatusCode::OK);
    let names: Vec<&Value> = body["schedules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| &s["definition"]["name"])
        .collect();
    assert_eq!(names, [&json!("doubler")], "nothing refused was written");

    // The node's watcher fires a tick a second; the show lists them, newest first.
    let deadline = std::time::Instant::now() + SAFETY;
    let fired = loop {
        let (status, body) = served.get("/schedules/doubler?ticks=10&next=3").await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["next_fire_times"].as_array().unwrap().len(), 3);
        let ticks = body["ticks"].as_array().unwrap().clone();
        if let Some(tick) = ticks.iter().find(|t| t["outcome"]["kind"] == "fired") {
            break tick["outcome"]["execution_id"].as_str().unwrap().to_owned();
        }
        assert!(std::time::Instant::now() < deadline, "a tick fires: {body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let (status, body) = served
        .get(&format!("/executions/{fired}/wait?timeout=30s"))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body["result"]["value"],
        json!(8),
        "the tick ran double(4): {body}"
    );

    let (status, body) = served.post("/schedules/doubler/trigger", &json!({})).await;
    assert_eq!(
        (status, body["fired"].as_array().map(Vec::len)),
        (StatusCode::OK, Some(1)),
        "{body}"
    );
    let (status, body) = served
        .post("/schedules/doubler/pause", &json!({"note": "deploy"}))
        .await;
    assert_eq!(
        (status, &body["changed"]),
        (StatusCode::OK, &json!(true)),
        "{body}"
    );
    let (_, body) = served.get("/schedules/doubler").await;
    assert_eq!(body["schedule"]["paused"]["note"], json!("deploy"));
    let (_, body) = served.post("/schedules/doubler/pause", &json!({})).await;
    assert_eq!(body["changed"], json!(false), "paused already");
    let (_, body) = served.post("/schedules/doubler/resume", &json!({})).await;
    assert_eq!(body["changed"], json!(true));
    let (status, body) = served
        .post(
            "/schedules/doubler/backfill",
            &json!({"from": "2000-01-01T00:00:00Z", "to": "2000-01-01T00:00:02Z"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body["fired"].as_array().map(Vec::len),
        Some(3),
        "three seconds' ticks: {body}"
    );
    let (status, body) = served
        .post(
            "/schedules/doubler/backfill",
            &json!({"from": "2000-01-01T00:00:00Z", "to": "2001-01-01T00:00:00Z"}),
        )
        .await;
    assert_eq!(
        (status, &body["error"]),
        (StatusCode::CONFLICT, &json!("refused")),
        "{body}"
    );

    let deleted = served
        .http
        .delete(served.url("/schedules/doubler"))
        .send()
        .await;
    let (status, body) = answer(deleted).await;
    assert_eq!(
        (status, &body["changed"]),
        (StatusCode::OK, &json!(true)),
        "{body}"
    );
    let (status, body) = served.get("/schedules/doubler").await;
    assert_eq!(
        (status, &body["error"]),
        (StatusCode::NOT_FOUND, &json!("not_found")),
        "{body}"
    );
    let (status, _) = served.post("/schedules/doubler/resume", &json!({})).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    served.stop().await;
}

/// Input at the calendar's edge is refused as bad input, with nothing written, and never
/// panics the store's write: a catch-up window or a jitter of 100,000,000 days (accepted before,
/// it then panicked every pass of the watcher over the schedules: no schedule of the store
/// fired again on SQLite, and the watcher's task died on PostgreSQL), a backfill from the
/// calendar's first instant (a 500, or on PostgreSQL a connection closed without an answer),
/// and an `id_prefix` holding a NUL (a 500 on PostgreSQL).
async fn input_at_the_calendars_edge_is_refused(factory: &dyn StoreFactory) {
    let served = serve(factory, doubling, ApiOptions::default()).await;
    let before = dump(served.db.as_ref()).await;
    for field in ["catchup_window", "jitter"] {
        let mut schedule = json!({"name": "edge", "function": "test:http/api.double",
                                  "params": 4, "every": "1s"});
        schedule[field] = json!("100000000d");
        let (status, body) = served.post("/schedules", &schedule).await;
        assert_eq!(
            (status, &body["error"]),
            (StatusCode::BAD_REQUEST, &json!("malformed_body")),
            "{field}: {body}"
        );
    }
    let (status, body) = served.get("/executions?id_prefix=E_%00").await;
    assert_eq!(
        (status, &body["error"]),
        (StatusCode::BAD_REQUEST, &json!("malformed_query")),
        "{body}"
    );
    assert_eq!(dump(served.db.as_ref()).await, before, "a refusal wrote");
    let schedule = json!({"name": "edge", "function": "test:http/api.double", "params": 4,
                          "every": "1h"});
    let (status, body) = served.post("/schedules", &schedule).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, body) = served
        .post(
            "/schedules/edge/backfill",
            &json!({"from": "-262143-01-01T00:00:00Z", "to": "-262143-01-02T00:00:00Z"}),
        )
        .await;
    assert!(status.is_client_error(), "{status}: {body}");
    served.stop().await;
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

use faults::the_store_away_answers_503_and_comes_back_by_itself;
use fuzz::arbitrary_requests_are_answered_with_json_and_refusals_write_nothing;
use long_polls::a_thousand_long_polls_share_one_wait_per_execution;

on_every_backend!(
    arbitrary_requests_are_answered_with_json_and_refusals_write_nothing,
    the_store_away_answers_503_and_comes_back_by_itself,
    a_thousand_long_polls_share_one_wait_per_execution,
    each_endpoint_answers,
    each_refusal_has_its_status,
    a_token_and_read_only_mode_guard_every_request,
    the_long_poll_wakes_when_the_execution_finishes,
    a_drain_finishes_inside_its_deadline_and_stops_the_server,
    schedules_are_operated_through_the_api,
    input_at_the_calendars_edge_is_refused,
);

/// A loopback server without a token answers only requests addressed to a local name: a page
/// served from a name its owner points at 127.0.0.1 (DNS rebinding) is refused before any
/// route, reads and writes alike, and nothing is written; with a token, any name is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loopback_server_without_a_token_answers_local_names_only() {
    use reqwest::header::{HOST, ORIGIN};
    test_utils::set_up();
    let served = serve(
        &test_support::factories::MemoryFactory,
        doubling,
        ApiOptions::default(),
    )
    .await;
    let port = served.address().rsplit_once(':').expect("a port").1;
    let before = dump(served.db.as_ref()).await;
    let rebound = format!("rebind.attacker.example:{port}");
    let submit = served
        .http
        .post(served.url("/executions"))
        .header(HOST, &rebound)
        .header(ORIGIN, format!("http://{rebound}"))
        .json(&json!({"function": "test:http/api.double", "params": 1}))
        .send()
        .await;
    let (status, body) = answer(submit).await;
    assert_eq!(
        (status, &body["error"]),
        (StatusCode::FORBIDDEN, &json!("host_refused")),
        "{body}"
    );
    assert!(
        body["message"]
            .as_str()
            .is_some_and(|m| m.contains(&rebound)),
        "{body}"
    );
    assert_eq!(
        dump(served.db.as_ref()).await,
        before,
        "a refused request wrote"
    );
    for (path, name) in [
        ("/executions", "rebind.attacker.example".to_string()),
        ("/healthz", format!("LOCALHOST.EVIL:{port}")),
        ("/../nope", format!("localhost.evil.example:{port}")),
    ] {
        let read = served.http.get(served.url(path)).header(HOST, &name).send();
        let (status, body) = answer(read.await).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{name}{path}: {body}");
    }
    for name in [
        format!("localhost:{port}"),
        format!("LocalHost.:{port}"),
        format!("ui.localhost:{port}"),
        format!("127.0.0.1:{port}"),
        format!("[::1]:{port}"),
        "10.1.2.3".to_string(),
    ] {
        let read = served.http.get(served.url("/healthz")).header(HOST, &name);
        let (status, body) = answer(read.send().await).await;
        assert_eq!(status, StatusCode::OK, "{name}: {body}");
    }
    served.stop().await;

    let options = ApiOptions {
        token: Some("s3cret".to_string()),
        ..ApiOptions::default()
    };
    let served = serve(&test_support::factories::MemoryFactory, doubling, options).await;
    let read = served
        .http
        .get(served.url("/executions"))
        .header(HOST, "stele.internal.example")
        .bearer_auth("s3cret");
    assert_eq!(answer(read.send().await).await.0, StatusCode::OK);
    served.stop().await;
}

/// A node of `DOUBLE` on memory whose server gives a client 300 ms to send a request's header,
/// and pauses of the body as long.
async fn impatient() -> Served {
    test_utils::set_up();
    let options = ApiOptions {
        header_read_timeout: Duration::from_millis(300),
        ..ApiOptions::default()
    };
    serve(&test_support::factories::MemoryFactory, doubling, options).await
}

/// A client that sends a whole header and stalls in the body has its request refused once the
/// pause reaches `header_read_timeout`, and nothing is written; before, the connection stayed
/// open as long as the client kept it, and a shutdown waited the whole drain for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stalls_in_its_body_is_cut_off() {
    let served = impatient().await;
    let before = dump(served.db.as_ref()).await;
    let stalled = served
        .stalled(
            b"POST /api/v1/executions HTTP/1.1\r\nHost: localhost\r\n\
              content-type: application/json\r\ncontent-length: 100\r\n\r\n{",
        )
        .await;
    let (read, text) = read_until_closed(stalled).await;
    assert!(
        read.is_err() || text.is_empty() || text.starts_with("HTTP/1.1 4"),
        "{read:?}: {text}"
    );
    assert_eq!(
        dump(served.db.as_ref()).await,
        before,
        "the stalled request wrote"
    );
    served.stop().await;
}

/// A client that sends part of a request's header and stalls (a slow-loris client) has its
/// connection closed once `header_read_timeout` passes, while a prompt client on another
/// connection is answered; before the server set a header timeout the stalled connection
/// stayed open until the client left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_too_slow_to_send_its_header_is_cut_off() {
    let served = impatient().await;
    let stalled = served
        .stalled(b"GET /api/v1/healthz HTTP/1.1\r\nHost: localhost\r\n")
        .await;
    let (status, _) = served.get("/healthz").await;
    assert_eq!(
        status,
        StatusCode::OK,
        "a prompt client is answered meanwhile"
    );
    // Closed, after at most a 408 (hyper's answer to a header that timed out).
    let (read, text) = read_until_closed(stalled).await;
    assert!(
        read.is_err() || text.is_empty() || text.starts_with("HTTP/1.1 408"),
        "{read:?}: {text}"
    );
    served.stop().await;
}
