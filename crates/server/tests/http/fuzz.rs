//! Arbitrary requests to every route, in process through the router (`tower`'s `oneshot`):
//! any method, a path of the API with an arbitrary, odd or valid segment for its id or name,
//! a query string of arbitrary bytes, odd pairs or a huge one, any content type, a body of
//! arbitrary bytes, an arbitrary JSON value or a near-valid document with one field
//! replaced, no or a wrong `Authorization`, on a server with a token, without one, or
//! read-only, over a store that answers or one that cannot be reached. Every answer is JSON:
//! a success, or `{"error": kind, "message": ...}` with a 4xx status, or 503 `unavailable`
//! when the store cannot be reached; never another 5xx, never a panic; and a refused request
//! leaves the store as it was (every execution's log, every schedule and its ticks).
//!
//! The cases are drawn from the printed seed (`test_utils::seed`); replay one run with
//! `STELE_SEED`.

use super::{dump, faults::Switch};
use axum::{
    body::Body,
    http::{HeaderValue, Method, Request, StatusCode, header},
};
use concepts::{ClockFn as _, ComponentId, DbConnection, FunctionFqn};
use conformance::StoreFactory;
use executor::Now;
use node::{Catalog, CatalogFunction, ExecutionDefaults};
use proptest::{
    prelude::*,
    strategy::ValueTree as _,
    test_runner::{Config, RngAlgorithm, TestRng, TestRunner},
};
use serde_json::{Value, json};
use server::{ApiOptions, ApiState};
use std::sync::{Arc, atomic::Ordering};
use test_utils::forwarding::ForwardingDb;
use tower::ServiceExt as _;

/// Requests per run and backend.
const CASES: usize = 1_000;

/// The routes of the API: method and path, `{id}` and `{name}` standing for a segment.
const ROUTES: &[(&str, &str)] = &[
    ("POST", "/executions"),
    ("GET", "/executions"),
    ("GET", "/executions/{id}"),
    ("GET", "/executions/{id}/events"),
    ("GET", "/executions/{id}/children"),
    ("POST", "/executions/{id}/cancel"),
    ("POST", "/executions/{id}/complete"),
    ("GET", "/executions/{id}/wait"),
    ("POST", "/schedules"),
    ("GET", "/schedules"),
    ("GET", "/schedules/{name}"),
    ("PUT", "/schedules/{name}"),
    ("DELETE", "/schedules/{name}"),
    ("POST", "/schedules/{name}/pause"),
    ("POST", "/schedules/{name}/resume"),
    ("POST", "/schedules/{name}/trigger"),
    ("POST", "/schedules/{name}/backfill"),
    ("GET", "/functions"),
    ("GET", "/healthz"),
    ("GET", "/readyz"),
    ("GET", "/{id}"),
];

/// Segments that are not ids nor names, or almost.
const ODD_SEGMENTS: &[&str] = &[
    "..",
    ".",
    "%",
    "%ZZ",
    "%00",
    "%FF%FE",
    "E_",
    "E_01KBHTTPDEM000000000000009.x",
    "E_01KBHTTPDEM000000000000009.n:js/1",
    "a;b",
    "@",
    "%2F",
    "%20",
];

/// Query strings that are odd as a whole.
const ODD_QUERIES: &[&str] = &[
    "&&&",
    "=",
    "limit",
    "limit=",
    "%",
    "a=%ZZ",
    "limit=-1",
    "limit=1e3",
    "limit=18446744073709551616",
    "from=4294967296",
    "timeout=-1s",
    "timeout=99999999999999999999d",
    "timeout=0s",
    "cursor=~",
    "cursor=2026-01-31T12:00:01Z~",
    "state=finished&state=locked",
    "next=100000&ticks=100000",
    "after=%00",
];

const QUERY_KEYS: &[&str] = &[
    "state",
    "function",
    "top_level",
    "parent",
    "created_after",
    "created_before",
    "id_prefix",
    "cursor",
    "limit",
    "from",
    "timeout",
    "after",
    "next",
    "ticks",
];

const CONTENT_TYPES: &[&str] = &[
    "application/json",
    "application/json; charset=utf-8",
    "text/plain",
    "application/x-www-form-urlencoded",
    "application/jsonx",
    "multipart/form-data; boundary=x",
    "",
];

/// What the ids and names of the store are, for segments that name something that exists.
#[derive(Debug, Clone)]
struct Known {
    ids: Vec<String>,
    names: Vec<String>,
}

/// One request, as drawn.
#[derive(Debug, Clone)]
struct Drawn {
    method: Method,
    path: String,
    query: Option<String>,
    content_type: Option<String>,
    authorization: Option<Vec<u8>>,
    body: Vec<u8>,
    /// Which server: 0 plain, 1 with the token `t0k`, 2 read-only.
    server: usize,
    /// The store cannot be reached.
    store_down: bool,
}

fn percent_encode(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                char::from(*byte).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect()
}

fn segment(known: &[String]) -> impl Strategy<Value = String> + use<> {
    let known = known.to_vec();
    prop_oneof![
        3 => proptest::sample::select(known),
        1 => Just(concepts::ExecutionId::generate_at(Now.now()).to_string()),
        1 => proptest::sample::select(ODD_SEGMENTS).prop_map(str::to_string),
        2 => proptest::collection::vec(any::<u8>(), 0..40).prop_map(|b| percent_encode(&b)),
        1 => "[a-zA-Z0-9_.:/-]{0,80}".prop_map(|s| percent_encode(s.as_bytes())),
    ]
}

fn query() -> impl Strategy<Value = Option<String>> {
    let pair = (
        proptest::sample::select(QUERY_KEYS),
        proptest::collection::vec(any::<u8>(), 0..30),
    )
        .prop_map(|(key, value)| format!("{key}={}", percent_encode(&value)));
    prop_oneof![
        3 => Just(None),
        2 => proptest::collection::vec(pair, 1..4).prop_map(|pairs| Some(pairs.join("&"))),
        1 => proptest::sample::select(ODD_QUERIES).prop_map(|q| Some(q.to_string())),
        1 => proptest::collection::vec(any::<u8>(), 0..100).prop_map(|b| Some(percent_encode(&b))),
        // A URI holds at most 64 KiB.
        1 => (1usize..7_000).prop_map(|n| Some("limit=1&".repeat(n))),
        1 => (1usize..60_000).prop_map(|n| Some(format!("cursor={}", "9".repeat(n)))),
    ]
}

/// An arbitrary JSON value, a few levels deep.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        "\\PC{0,30}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::btree_map("[a-z_]{0,10}", inner, 0..6)
                .prop_map(|fields| Value::Object(fields.into_iter().collect())),
        ]
    })
}

/// The valid documents of the routes that take a body, to replace one field of.
fn documents(known: &Known) -> Vec<Value> {
    vec![
        json!({"function": "test:http/api.double", "params": 1}),
        json!({"function": "test:http/api.double", "params": 2, "id": known.ids[0]}),
        json!({"reason": "why"}),
        json!({"value": true}),
        json!({"name": "fuzzed", "function": "test:http/api.double", "params": 1, "every": "1h"}),
        json!({"name": known.names[0], "function": "test:http/api.double", "params": 1,
               "cron": "0 3 * * *", "timezone": "Europe/Prague", "overlap": "skip"}),
        json!({"note": "n"}),
        json!({"from": "2000-01-01T00:00:00Z", "to": "2000-01-01T01:00:00Z"}),
        json!({}),
    ]
}

fn body(known: &Known) -> impl Strategy<Value = Vec<u8>> + use<> {
    let near_valid = (
        proptest::sample::select(documents(known)),
        proptest::sample::select(vec![
            "function",
            "params",
            "id",
            "reason",
            "value",
            "name",
            "every",
            "cron",
            "timezone",
            "overlap",
            "note",
            "from",
            "to",
            "max_runs",
            "jitter",
            "end",
            "offset",
            "catchup_window",
        ]),
        json_value(),
    )
        .prop_map(|(mut document, field, value)| {
            document[field] = value;
            serde_json::to_vec(&document).expect("JSON")
        });
    prop_oneof![
        1 => Just(Vec::new()),
        2 => proptest::sample::select(documents(known))
            .prop_map(|document| serde_json::to_vec(&document).expect("JSON")),
        4 => near_valid,
        2 => json_value().prop_map(|value| serde_json::to_vec(&value).expect("JSON")),
        2 => proptest::collection::vec(any::<u8>(), 0..200),
        1 => (1usize..300_000).prop_map(|n| format!("{{\"reason\":\"{}\"}}", "r".repeat(n)).into_bytes()),
    ]
}

fn request(known: &Known) -> impl Strategy<Value = Drawn> + use<> {
    let documents = documents(known);
    let methods = vec![
        Method::GET,
        Method::POST,
        Method::PUT,
        Method::DELETE,
        Method::PATCH,
        Method::HEAD,
        Method::OPTIONS,
    ];
    (
        proptest::sample::select(ROUTES),
        prop_oneof![4 => Just(None), 1 => proptest::sample::select(methods).prop_map(Some)],
        segment(&known.ids),
        segment(&known.names),
        query(),
        prop_oneof![
            1 => Just(None),
            4 => Just(Some("application/json".to_string())),
            2 => proptest::sample::select(CONTENT_TYPES).prop_map(|t| Some(t.to_string())),
        ],
        prop_oneof![
            3 => Just(None),
            1 => Just(Some(b"Bearer t0k".to_vec())),
            1 => Just(Some(b"bearer t0k".to_vec())),
            1 => Just(Some(b"Bearer t0k ".to_vec())),
            1 => Just(Some(b"Basic dDBrOnQwaw==".to_vec())),
            1 => proptest::collection::vec(any::<u8>(), 0..40).prop_map(Some),
        ],
        body(known),
        prop_oneof![2 => Just(0usize), 1 => Just(1), 1 => Just(2)],
        proptest::bool::weighted(0.2),
        (
            proptest::bool::weighted(0.4),
            any::<proptest::sample::Index>(),
            proptest::option::weighted(0.4, (any::<proptest::sample::Index>(), json_value())),
        ),
    )
        .prop_map(
            move |(
                (route_method, template),
                method,
                id,
                name,
                query,
                content_type,
                authorization,
                body,
                server,
                store_down,
                (fitted, which, replaced),
            )| {
                let fitted = fitted
                    .then(|| fitted_document(&documents, route_method, template, which))
                    .flatten();
                Drawn {
                    // A document of its route is sent as JSON.
                    content_type: if fitted.is_some() {
                        Some("application/json".to_string())
                    } else {
                        content_type
                    },
                    body: match fitted {
                        Some(mut document) => {
                            if let (Some((field, value)), Some(fields)) =
                                (replaced, document.as_object_mut())
                                && !fields.is_empty()
                            {
                                let key = fields.keys().nth(field.index(fields.len())).cloned();
                                if let Some(key) = key {
                                    fields.insert(key, value);
                                }
                            }
                            serde_json::to_vec(&document).expect("JSON")
                        }
                        None => body,
                    },
                    method: method.unwrap_or_else(|| route_method.parse().expect("a method")),
                    path: format!(
                        "/api/v1{}",
                        template.replace("{id}", &id).replace("{name}", &name)
                    ),
                    query,
                    authorization,
                    server,
                    store_down,
                }
            },
        )
}

/// One of the valid documents of the route `method template`, if it takes a body.
fn fitted_document(
    documents: &[Value],
    method: &str,
    template: &str,
    which: proptest::sample::Index,
) -> Option<Value> {
    let fitting: &[usize] = match (method, template) {
        ("POST", "/executions") => &[0, 1],
        ("POST", "/executions/{id}/cancel") => &[2],
        ("POST", "/executions/{id}/complete") => &[3],
        ("POST", "/schedules") | ("PUT", "/schedules/{name}") => &[4, 5],
        ("POST", "/schedules/{name}/pause") => &[6],
        ("POST", "/schedules/{name}/backfill") => &[7],
        ("POST", "/schedules/{name}/resume" | "/schedules/{name}/trigger") => &[8],
        _ => return None,
    };
    Some(documents[fitting[which.index(fitting.len())]].clone())
}

/// The axum request of `drawn`; `None` when its path and query make no URI at all (a client
/// could not send it either).
fn build(drawn: &Drawn) -> Option<Request<Body>> {
    let uri = match &drawn.query {
        Some(query) => format!("{}?{query}", drawn.path),
        None => drawn.path.clone(),
    };
    let mut request = Request::builder()
        .method(drawn.method.clone())
        .uri(uri)
        .body(Body::from(drawn.body.clone()))
        .ok()?;
    if let Some(content_type) = &drawn.content_type
        && let Ok(value) = HeaderValue::from_str(content_type)
    {
        request.headers_mut().insert(header::CONTENT_TYPE, value);
    }
    if let Some(authorization) = &drawn.authorization
        && let Ok(value) = HeaderValue::from_bytes(authorization)
    {
        request.headers_mut().insert(header::AUTHORIZATION, value);
    }
    Some(request)
}

/// A deterministic runner for `seed`.
fn runner(seed: u64) -> TestRunner {
    let mut bytes = [0u8; 32];
    for chunk in bytes.chunks_mut(8) {
        chunk.copy_from_slice(&seed.to_le_bytes());
    }
    TestRunner::new_with_rng(
        Config::default(),
        TestRng::from_seed(RngAlgorithm::ChaCha, &bytes),
    )
}

/// What the store holds before the first request: a pending execution, a promise, a
/// cancelled one, and (created through `api`) a schedule.
async fn seeded(db: &dyn DbConnection, catalog: &Catalog, api: &axum::Router) -> Known {
    let mut ids = Vec::new();
    for (function, params) in [
        ("test:http/api.double", json!(1)),
        (
            FunctionFqn::stub("approval")
                .expect("a stub")
                .to_string()
                .as_str(),
            json!(null),
        ),
        ("test:http/api.double", json!(3)),
    ] {
        let submission = node::Submission {
            ffqn: function.parse().expect("a function"),
            params,
            execution_id: None,
            metadata: concepts::ExecutionMetadata::default(),
        };
        let submitted = node::submit(db, catalog, &Now, submission)
            .await
            .expect("submitted");
        ids.push(submitted.execution_id().to_string());
    }
    db.cancel(concepts::CancelRequest {
        execution_id: ids[2].parse().expect("an id"),
        now: Now.now(),
        reason: "seeded".to_string(),
    })
    .await
    .expect("cancelled");
    let schedule = json!({"name": "nightly", "function": "test:http/api.double", "params": 1,
                          "every": "1h"});
    let created = api
        .clone()
        .oneshot(
            Request::post("/api/v1/schedules")
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(schedule.to_string()))
                .expect("a request"),
        )
        .await
        .expect("infallible");
    assert_eq!(created.status(), StatusCode::CREATED);
    Known {
        ids,
        names: vec!["nightly".to_string()],
    }
}

pub(super) async fn arbitrary_requests_are_answered_with_json_and_refusals_write_nothing(
    factory: &dyn StoreFactory,
) {
    let seed = test_utils::seed();
    let store = factory.fresh().await;
    let inner = store.db.clone();
    let switch = Switch::default();
    let db: Arc<dyn DbConnection> = ForwardingDb::new(inner.clone(), switch.clone());
    let component = ComponentId::new("activity", "double").expect("a component");
    let catalog = Arc::new(
        Catalog::new().with(
            CatalogFunction::new(
                "test:http/api.double".parse().expect("a function"),
                ExecutionDefaults::new(component),
            )
            .params::<u64>(),
        ),
    );
    let servers: Vec<axum::Router> = [
        ApiOptions::default(),
        ApiOptions {
            token: Some("t0k".to_string()),
            ..ApiOptions::default()
        },
        ApiOptions {
            read_only: true,
            ..ApiOptions::default()
        },
    ]
    .into_iter()
    .map(|options| {
        let options = ApiOptions {
            max_wait: std::time::Duration::from_millis(20),
            ..options
        };
        server::router(ApiState::new(db.clone(), Now, catalog.clone(), options))
    })
    .collect();
    let known = seeded(inner.as_ref(), &catalog, &servers[0]).await;
    let strategy = request(&known);
    let mut runner = runner(seed);
    let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
    let mut refused_checked = 0;
    for case in 0..CASES {
        let drawn = strategy.new_tree(&mut runner).expect("a request").current();
        let Some(request) = build(&drawn) else {
            *statuses.entry(0).or_default() += 1;
            continue;
        };
        let what = format!(
            "case {case} of seed {seed} (replay with STELE_SEED={seed}): {} {}?{} {:?} {:?} server {} store down {}, body {:?}",
            drawn.method,
            drawn.path,
            drawn
                .query
                .as_deref()
                .unwrap_or("")
                .chars()
                .take(200)
                .collect::<String>(),
            drawn.content_type,
            drawn
                .authorization
                .as_ref()
                .map(|a| String::from_utf8_lossy(a).into_owned()),
            drawn.server,
            drawn.store_down,
            String::from_utf8_lossy(&drawn.body)
                .chars()
                .take(200)
                .collect::<String>(),
        );
        let before = dump(inner.as_ref()).await;
        switch.0.store(drawn.store_down, Ordering::SeqCst);
        let response = servers[drawn.server]
            .clone()
            .oneshot(request)
            .await
            .expect("infallible");
        switch.0.store(false, Ordering::SeqCst);
        let status = response.status();
        *statuses.entry(status.as_u16()).or_default() += 1;
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("a body");
        assert!(
            !status.is_server_error()
                || (status == StatusCode::SERVICE_UNAVAILABLE && drawn.store_down),
            "{what}: {status} {}",
            String::from_utf8_lossy(&bytes)
        );
        if !(drawn.method == Method::HEAD && bytes.is_empty()) {
            let body: Value = serde_json::from_slice(&bytes).unwrap_or_else(|err| {
                panic!(
                    "{what}: {status}, not JSON ({err}): {}",
                    String::from_utf8_lossy(&bytes)
                )
            });
            if !status.is_success() {
                assert!(
                    body["error"].as_str().is_some_and(|kind| !kind.is_empty())
                        && body["message"].as_str().is_some_and(|m| !m.is_empty()),
                    "{what}: {status} {body}"
                );
            }
        }
        if !status.is_success() {
            assert_eq!(
                dump(inner.as_ref()).await,
                before,
                "{what}: a refused request ({status}) wrote"
            );
            refused_checked += 1;
        }
    }
    eprintln!(
        "{CASES} requests of seed {seed} on {}: statuses {statuses:?} (0: no URI); {refused_checked} refusals, each leaving the store as it was",
        factory.name()
    );
    inner.close().await;
}
