//! Handler tests through the router in process (`tower::ServiceExt::oneshot`) on the memory
//! store: what needs no socket (CORS, content types, methods, routes outside the API).

use crate::{ApiOptions, ApiState, router};
use axum::{
    body::Body,
    http::{Method, Request, StatusCode, header},
};
use executor::Now;
use node::Catalog;
use std::sync::Arc;
use tower::ServiceExt as _;

fn app(options: ApiOptions) -> axum::Router {
    let db = memory_store();
    router(ApiState::new(db, Now, Arc::new(Catalog::new()), options))
}

/// A memory store through test-support, the only way this crate reaches a backend.
fn memory_store() -> Arc<dyn concepts::DbConnection> {
    futures_util::FutureExt::now_or_never(conformance::StoreFactory::fresh(
        &test_support::factories::MemoryFactory,
    ))
    .expect("the memory factory is ready at once")
    .db
}

async fn send(
    app: axum::Router,
    request: Request<Body>,
) -> (StatusCode, axum::http::HeaderMap, serde_json::Value) {
    let response = app.oneshot(request).await.expect("infallible");
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("a body");
    let body = if bytes.is_empty() {
        serde_json::Value::Null
    } else {
        serde_json::from_slice(&bytes).expect("JSON")
    };
    (status, headers, body)
}

fn get(path: &str) -> Request<Body> {
    Request::get(path).body(Body::empty()).expect("a request")
}

#[tokio::test]
async fn a_body_without_its_json_content_type_is_refused() {
    let request = Request::post("/api/v1/executions")
        .header(header::CONTENT_TYPE, "text/plain")
        .body(Body::from(r#"{"function":"a:b/c.d","params":1}"#))
        .expect("a request");
    let (status, _, body) = send(app(ApiOptions::default()), request).await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert_eq!(body["error"], "unsupported_media_type");
}

#[tokio::test]
async fn a_method_a_route_lacks_and_an_unknown_route_are_json() {
    let request = Request::delete("/api/v1/executions")
        .body(Body::empty())
        .expect("a request");
    let (status, _, body) = send(app(ApiOptions::default()), request).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::METHOD_NOT_ALLOWED, Some("method_not_allowed"))
    );
    let (status, _, body) = send(app(ApiOptions::default()), get("/api/v1/nope")).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::NOT_FOUND, Some("not_found"))
    );
    // Named as asked for: the nested router's own path lacks the prefix.
    let message = body["message"].as_str().unwrap_or_default();
    assert!(message.starts_with("no route /api/v1/nope;"), "{message}");
}

#[tokio::test]
async fn cors_headers_only_for_the_origins_named() {
    let from = |origin: &str| {
        Request::get("/api/v1/healthz")
            .header(header::ORIGIN, origin)
            .body(Body::empty())
            .expect("a request")
    };
    let (_, headers, _) = send(app(ApiOptions::default()), from("https://ops.example.com")).await;
    assert!(headers.get(header::ACCESS_CONTROL_ALLOW_ORIGIN).is_none());
    let named = ApiOptions {
        cors_origins: vec!["https://ops.example.com".to_string()],
        ..ApiOptions::default()
    };
    let (_, headers, _) = send(app(named.clone()), from("https://ops.example.com")).await;
    assert_eq!(
        headers[header::ACCESS_CONTROL_ALLOW_ORIGIN],
        "https://ops.example.com"
    );
    let (_, headers, _) = send(app(named), from("https://evil.example.com")).await;
    assert!(headers.get(header::ACCESS_CONTROL_ALLOW_ORIGIN).is_none());
}

#[tokio::test]
async fn a_preflight_needs_no_token_and_everything_else_does() {
    let options = ApiOptions {
        token: Some("t".to_string()),
        cors_origins: vec!["https://ops.example.com".to_string()],
        ..ApiOptions::default()
    };
    let preflight = Request::builder()
        .method(Method::OPTIONS)
        .uri("/api/v1/executions")
        .header(header::ORIGIN, "https://ops.example.com")
        .header(header::ACCESS_CONTROL_REQUEST_METHOD, "POST")
        .body(Body::empty())
        .expect("a request");
    let (status, headers, _) = send(app(options.clone()), preflight).await;
    assert_eq!(status, StatusCode::OK);
    assert!(headers.get(header::ACCESS_CONTROL_ALLOW_METHODS).is_some());
    let (status, headers, _) = send(app(options), get("/api/v1/nope")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(headers[header::WWW_AUTHENTICATE], "Bearer");
}

#[tokio::test]
async fn a_long_poll_is_answered_still_running_when_the_node_stops() {
    const FOREVER: workflow::Function<u64, u64> = workflow::Function::new("test:http/api.forever");
    let db = memory_store();
    let (signals, signal) = tokio::sync::oneshot::channel();
    let node = node::Node::builder(db.clone(), Now)
        .activity(&FOREVER, |_ctx: workflow::ActivityCtx, _n: u64| {
            std::future::pending::<Result<u64, String>>()
        })
        .background("signal", move |signal| {
            let _ = signals.send(signal);
            async {}
        })
        .start()
        .expect("a node");
    let state = ApiState::new(db, Now, node.catalog().clone(), ApiOptions::default())
        .stopping_on(signal.await.expect("the node's signal"));
    let api = router(state);
    let submit = Request::post("/api/v1/executions")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(
            r#"{"function":"test:http/api.forever","params":1}"#,
        ))
        .expect("a request");
    let (status, _, body) = send(api.clone(), submit).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let id = body["id"].as_str().expect("an id").to_string();
    // Whether the poll is waiting already or not yet, a stopping node answers it at once,
    // long before its minute.
    let waiting = tokio::spawn(send(
        api,
        get(&format!("/api/v1/executions/{id}/wait?timeout=1m")),
    ));
    node.shutdown(std::time::Duration::ZERO).await;
    let (status, _, body) = tokio::time::timeout(std::time::Duration::from_secs(30), waiting)
        .await
        .expect("answered when the node stopped")
        .expect("joined");
    assert_eq!(
        (status, &body["finished"]),
        (StatusCode::ACCEPTED, &serde_json::json!(false)),
        "{body}"
    );
}

#[tokio::test]
async fn a_parked_execution_says_why_it_waits_and_is_listed_as_parked() {
    let db = memory_store();
    let app = router(ApiState::new(
        db.clone(),
        Now,
        Arc::new(Catalog::new()),
        ApiOptions::default(),
    ));
    let now = concepts::ClockFn::now(&Now);
    let ffqn: concepts::FunctionFqn = "test:api/flows.flow".parse().unwrap();
    let parked =
        test_utils::parked_execution(db.as_ref(), &ffqn, now, "the replay diverged at version 3")
            .await;
    let (status, _, body) = send(app.clone(), get(&format!("/api/v1/executions/{parked}"))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let state = &body["state"];
    assert_eq!(state["kind"], "parked", "{body}");
    assert_eq!(state["reason"], "the replay diverged at version 3");
    assert!(state["since"].is_string());
    let summary = state["summary"].as_str().unwrap();
    assert!(summary.contains(concepts::PARKED_EXPLAINED), "{summary}");
    // One more execution, due: only the parked one is listed as parked.
    db.create(concepts::CreateRequest {
        created_at: now,
        execution_id: concepts::ExecutionId::generate_at(now),
        ffqn: ffqn.clone(),
        params: concepts::Json(serde_json::json!(1)),
        parent: None,
        scheduled_at: now,
        retry_exp_backoff: std::time::Duration::from_secs(1),
        max_retries: 0,
        component_id: concepts::ComponentId::new("test", "api").unwrap(),
        metadata: concepts::ExecutionMetadata::default(),
        scheduled_by: None,
    })
    .await
    .unwrap();
    let (_, _, pending) = send(app.clone(), get("/api/v1/executions?state=pending")).await;
    assert_eq!(
        pending["executions"].as_array().unwrap().len(),
        2,
        "{pending}"
    );
    let (status, _, listed) = send(app, get("/api/v1/executions?parked=true")).await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    let rows = listed["executions"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{listed}");
    assert_eq!(rows[0]["id"], parked.to_string());
    assert_eq!(rows[0]["state"]["kind"], "parked");
}

/// The bearer scheme is read in any case (the API read `Bearer ` and `bearer ` only, the UI
/// `Bearer ` only); another scheme, or a header too short to hold one, carries no token.
#[test]
fn a_bearer_token_is_read_whatever_the_schemes_case() {
    for header in [
        "Bearer s3cret",
        "bearer s3cret",
        "BEARER s3cret",
        "bEaReR s3cret",
    ] {
        assert_eq!(
            crate::bearer_token(header.as_bytes()),
            Some(&b"s3cret"[..]),
            "{header}"
        );
    }
    for header in ["Basic s3cret", "Bearer", "Bearers3cret", ""] {
        assert_eq!(crate::bearer_token(header.as_bytes()), None, "{header}");
    }
}
