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
