//! The store going away under the API: every read and write answers 503 `unavailable` with a
//! message that says to retry, `/readyz` says not ready while `/healthz` stays ok, nothing is
//! written meanwhile, and once the store is back the same requests succeed without a restart
//! of the node. On every backend through a decorator that fails each call with a retriable
//! connection error (as the conformance suite's faults do), and on a real PostgreSQL server
//! stopped and started again (the spare server of test-support).

use super::{DOUBLE, SAFETY, Served, answer, doubling, dump, serve_over};
use concepts::{DbConnection, DbError};
use conformance::{StoreFactory, TestStore};
use reqwest::StatusCode;
use serde_json::{Value, json};
use server::ApiOptions;
use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};
use test_utils::forwarding::{Fault, ForwardingDb, Read, Write, WriteHook};

/// Fails every read and write while `down`, as an unreachable store does.
#[derive(Clone, Default)]
pub(super) struct Switch(pub(super) Arc<AtomicBool>);

fn unreachable() -> DbError {
    DbError::Connection("the store cannot be reached (injected)".to_string())
}

impl WriteHook for Switch {
    fn decide(&self, _write: &Write<'_>) -> Fault {
        if self.0.load(Ordering::SeqCst) {
            Fault::Refuse(unreachable())
        } else {
            Fault::Pass
        }
    }

    fn read(&self, _read: &Read<'_>) -> Result<(), DbError> {
        if self.0.load(Ordering::SeqCst) {
            Err(unreachable())
        } else {
            Ok(())
        }
    }
}

/// One request of each kind the API serves from the store, for an execution `id` and a
/// schedule `name` that exist: (method, path, body).
fn every_kind_of_request(id: &str, name: &str) -> Vec<(&'static str, String, Option<Value>)> {
    let submit = json!({"function": DOUBLE.ffqn().unwrap().to_string(), "params": 2});
    let schedule = json!({"name": "another", "function": "test:http/api.double", "params": 1,
                          "every": "1h"});
    vec![
        ("GET", "/readyz".to_string(), None),
        ("GET", "/executions".to_string(), None),
        ("GET", format!("/executions/{id}"), None),
        ("GET", format!("/executions/{id}/events"), None),
        ("GET", format!("/executions/{id}/children"), None),
        ("GET", format!("/executions/{id}/wait?timeout=1s"), None),
        ("POST", "/executions".to_string(), Some(submit)),
        (
            "POST",
            format!("/executions/{id}/cancel"),
            Some(json!({"reason": "r"})),
        ),
        (
            "POST",
            format!("/executions/{id}/complete"),
            Some(json!({"value": 1})),
        ),
        ("GET", "/schedules".to_string(), None),
        ("GET", format!("/schedules/{name}"), None),
        ("POST", "/schedules".to_string(), Some(schedule)),
        (
            "POST",
            format!("/schedules/{name}/pause"),
            Some(json!({"note": "n"})),
        ),
        (
            "POST",
            format!("/schedules/{name}/trigger"),
            Some(json!({})),
        ),
    ]
}

async fn send(
    served: &Served,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> (StatusCode, Value) {
    let url = served.url(path);
    let request = match method {
        "GET" => served.http.get(url),
        _ => served.http.post(url),
    };
    let request = match body {
        Some(body) => request.json(body),
        None => request,
    };
    answer(request.send().await).await
}

/// An execution finished and a schedule, through the API while the store answers.
async fn something_stored(served: &Served) -> (String, String) {
    let (status, body) = served
        .post(
            "/executions",
            &json!({"function": "test:http/api.double", "params": 21}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let id = body["id"].as_str().expect("an id").to_string();
    let (status, body) = served
        .get(&format!("/executions/{id}/wait?timeout=30s"))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = served
        .post(
            "/schedules",
            &json!({"name": "nightly", "function": "test:http/api.double", "params": 1,
                    "every": "1h"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    (id, "nightly".to_string())
}

/// While the store is away: each request is 503 `unavailable` with a message that says to
/// retry, `/healthz` stays 200, and the store holds what it held.
async fn every_request_is_unavailable(
    served: &Served,
    store: &dyn DbConnection,
    id: &str,
    name: &str,
) -> usize {
    let before = dump(store).await;
    let (status, body) = served.get("/healthz").await;
    assert_eq!((status, &body["status"]), (StatusCode::OK, &json!("ok")));
    let requests = every_kind_of_request(id, name);
    for (method, path, body) in &requests {
        let (status, answer) = send(served, method, path, body.as_ref()).await;
        assert_eq!(
            (status, &answer["error"]),
            (StatusCode::SERVICE_UNAVAILABLE, &json!("unavailable")),
            "{method} {path}: {answer}"
        );
        let message = answer["message"].as_str().expect("a message");
        assert!(
            message.contains("retry later"),
            "{method} {path}: {message}"
        );
    }
    assert_eq!(dump(store).await, before, "nothing was written");
    requests.len()
}

/// Once the store is back: the same requests succeed (the writes as they would have).
async fn every_request_succeeds(served: &Served, id: &str, name: &str) {
    for (method, path, body) in every_kind_of_request(id, name) {
        let (status, answer) = send(served, method, &path, body.as_ref()).await;
        let expected = match path.as_str() {
            "/executions" | "/schedules" if method == "POST" => StatusCode::CREATED,
            // A finished execution is no promise: the model refuses it, as without a fault.
            complete if complete.ends_with("/complete") => StatusCode::CONFLICT,
            _ => StatusCode::OK,
        };
        assert_eq!(status, expected, "{method} {path}: {answer}");
    }
}

/// On every backend: a decorator fails each call with a retriable connection error, then
/// lets them through again; the node and its server are not restarted.
pub(super) async fn the_store_away_answers_503_and_comes_back_by_itself(
    factory: &dyn StoreFactory,
) {
    let store = factory.fresh().await;
    let inner = store.db.clone();
    let switch = Switch::default();
    let db: Arc<dyn DbConnection> = ForwardingDb::new(inner.clone(), switch.clone());
    let served = serve_over(store, db, doubling, ApiOptions::default()).await;
    let (id, name) = something_stored(&served).await;
    switch.0.store(true, Ordering::SeqCst);
    let refused = every_request_is_unavailable(&served, inner.as_ref(), &id, &name).await;
    switch.0.store(false, Ordering::SeqCst);
    every_request_succeeds(&served, &id, &name).await;
    eprintln!("{refused} kinds of request answered 503 while the store was away, then served");
    served.stop().await;
}

/// A real PostgreSQL server stopped (`pg_ctl stop -m immediate`) under a serving node, then
/// started again: 503 while it is down, served again once it is up, the node never
/// restarted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_stopped_answers_503_and_is_served_again_once_it_is_back() {
    test_utils::set_up();
    let Some(server) = test_support::spare_server::SpareServer::lock(
        "postgres_stopped_answers_503_and_is_served_again_once_it_is_back",
    ) else {
        return;
    };
    let db = server.fresh_store("http_503").await;
    let store = TestStore {
        db: db.clone(),
        guard: None,
    };
    let served = serve_over(store, db.clone(), doubling, ApiOptions::default()).await;
    let (id, name) = something_stored(&served).await;
    let before = dump(db.as_ref()).await;
    server.crash();
    // The store cannot be read while the server is down: each request is answered 503.
    let (status, body) = served.get("/healthz").await;
    assert_eq!((status, &body["status"]), (StatusCode::OK, &json!("ok")));
    for (method, path, body) in every_kind_of_request(&id, &name) {
        let (status, answer) = send(&served, method, &path, body.as_ref()).await;
        assert_eq!(
            (status, &answer["error"]),
            (StatusCode::SERVICE_UNAVAILABLE, &json!("unavailable")),
            "{method} {path}: {answer}"
        );
        let message = answer["message"].as_str().expect("a message");
        assert!(
            message.contains("retry later"),
            "{method} {path}: {message}"
        );
    }
    server.start();
    assert_eq!(dump(db.as_ref()).await, before, "nothing was written");
    every_request_succeeds(&served, &id, &name).await;
    tokio::time::timeout(SAFETY, served.stop())
        .await
        .expect("the node stops");
}
