//! Handler tests through the router in process (`tower::ServiceExt::oneshot`) on the memory
//! store: escaping and bounds, the guards of the actions (form token, origin, read-only),
//! signing in to a node with a token, refusals as pages. The pages in a real browser are
//! `crates/cli/tests/ui.rs`'s.

use crate::{UiOptions, router};
use axum::{
    body::Body,
    http::{Request, StatusCode, header},
};
use concepts::{
    ClockFn as _, ComponentId, CreateRequest, DbConnection, ExecutionId, ExecutionMetadata, Json,
    PendingStateKind,
};
use executor::Now;
use node::{Catalog, ShutdownSignal};
use server::{ApiOptions, Mount};
use std::{sync::Arc, time::Duration};
use tower::ServiceExt as _;

/// A memory store through test-support, the only way this crate reaches a backend.
fn memory_store() -> Arc<dyn DbConnection> {
    futures_util::FutureExt::now_or_never(conformance::StoreFactory::fresh(
        &test_support::factories::MemoryFactory,
    ))
    .expect("the memory factory is ready at once")
    .db
}

struct Page {
    status: StatusCode,
    headers: axum::http::HeaderMap,
    body: String,
}

struct Ui {
    db: Arc<dyn DbConnection>,
    app: axum::Router,
    _stop: tokio::sync::watch::Sender<bool>,
}

impl Ui {
    fn new(options: ApiOptions) -> Self {
        let db = memory_store();
        let (stop, fired) = tokio::sync::watch::channel(false);
        let app = router(
            Mount {
                db: db.clone(),
                clock: Now,
                catalog: Arc::new(Catalog::new()),
                options,
                signal: ShutdownSignal::new(fired),
            },
            UiOptions::default(),
        );
        Self {
            db,
            app,
            _stop: stop,
        }
    }

    async fn send(&self, request: Request<Body>) -> Page {
        let response = self.app.clone().oneshot(request).await.expect("infallible");
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("a body");
        Page {
            status,
            headers,
            body: String::from_utf8(bytes.to_vec()).expect("utf-8"),
        }
    }

    async fn get(&self, path: &str) -> Page {
        self.send(Request::get(path).body(Body::empty()).expect("a request"))
            .await
    }

    async fn create(&self, params: serde_json::Value) -> ExecutionId {
        self.create_with(params, ExecutionMetadata::default()).await
    }

    async fn create_with(
        &self,
        params: serde_json::Value,
        metadata: ExecutionMetadata,
    ) -> ExecutionId {
        let now = Now.now();
        let execution_id = ExecutionId::generate_at(now);
        self.db
            .create(CreateRequest {
                created_at: now,
                execution_id: execution_id.clone(),
                ffqn: "test:ui/api.show".parse().expect("a function"),
                params: Json(params),
                parent: None,
                scheduled_at: now,
                retry_exp_backoff: Duration::from_millis(100),
                max_retries: 1,
                component_id: ComponentId::new("activity", "show").expect("a component"),
                metadata,
                scheduled_by: None,
            })
            .await
            .expect("created");
        execution_id
    }

    /// The form token of `id`'s page.
    async fn form_token(&self, id: &ExecutionId) -> String {
        let page = self.get(&format!("/executions/{id}")).await;
        let (_, rest) = page
            .body
            .split_once(r#"name="form_token" value=""#)
            .expect("a form token on the page");
        rest.split_once('"').expect("its end").0.to_string()
    }

    async fn state(&self, id: &ExecutionId) -> PendingStateKind {
        self.db.get(id).await.expect("a log").pending_state.kind()
    }
}

fn cancel(id: &ExecutionId) -> axum::http::request::Builder {
    Request::post(format!("/executions/{id}/cancel"))
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
}

#[tokio::test]
async fn hostile_and_huge_parameters_render_inert_and_bounded() {
    let ui = Ui::new(ApiOptions::default());
    let id = ui
        .create(serde_json::json!({
            "<script>alert(1)</script>": "<script>alert(2)</script>",
            "attribute": "\"><img src=x onerror=alert(3)>",
            "huge": "x".repeat(1024 * 1024),
        }))
        .await;
    let page = ui.get(&format!("/executions/{id}")).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(
        !page.body.contains("<script>alert"),
        "a script tag got through"
    );
    assert!(!page.body.contains("<img"), "an img tag got through");
    assert!(page.body.contains("&lt;script&gt;alert(2)&lt;/script&gt;"));
    assert!(
        page.body.len() < 64 * 1024,
        "a 1 MiB parameter made a {} byte page",
        page.body.len()
    );
    assert!(page.body.contains("more characters"));
    let policy = page.headers[header::CONTENT_SECURITY_POLICY]
        .to_str()
        .expect("text");
    assert!(policy.contains("script-src 'self'"), "{policy}");
    // The list shows it as well, escaped.
    let list = ui.get("/executions").await;
    assert!(list.body.contains(id.as_str()));
}

/// The reasons a store records (a failed attempt's reason, an `Unlocked` reason, a cancel's
/// reason, 4 KiB at most) and the metadata are cut as parameters are: before, each was put on
/// the page (and in the timeline's tooltips) whole.
#[tokio::test]
async fn hostile_and_huge_reasons_render_inert_and_bounded() {
    use concepts::{ExecutionEventInner, ExecutorId, LockPendingRequest, OutcomeWrite};
    let ui = Ui::new(ApiOptions::default());
    let huge = |what: &str| {
        format!(
            "<script>alert('{what}')</script>{}",
            "x".repeat(1024 * 1024)
        )
    };
    let metadata = ExecutionMetadata(std::collections::BTreeMap::from([(
        "note".to_string(),
        huge("metadata"),
    )]));
    let id = ui.create_with(serde_json::json!(null), metadata).await;
    let lock = || async {
        let now = Now.now();
        let locked = ui
            .db
            .lock_pending(LockPendingRequest {
                batch_size: 1,
                pending_at_or_sooner: now,
                ffqns: Arc::from(["test:ui/api.show".parse().expect("a function")]),
                now,
                component_id: ComponentId::new("activity", "show").expect("a component"),
                executor_id: ExecutorId::generate_at(now),
                lock_expires_at: now + chrono::Duration::seconds(60),
            })
            .await
            .expect("locked");
        assert_eq!(locked.len(), 1);
        locked[0].next_version
    };
    for event in [
        ExecutionEventInner::TemporarilyFailed {
            backoff_expires_at: Now.now(),
            reason_full: huge("failed"),
            reason_inner: huge("failed"),
            detail: Some(huge("detail")),
        },
        ExecutionEventInner::Unlocked {
            backoff_expires_at: Now.now(),
            reason: huge("unlocked"),
        },
    ] {
        let version = lock().await;
        ui.db
            .append_outcome(OutcomeWrite::new(
                id.clone(),
                version,
                Now.now(),
                event,
                None,
            ))
            .await
            .expect("appended");
    }
    ui.db
        .cancel(concepts::CancelRequest {
            execution_id: id.clone(),
            now: Now.now(),
            // The longest reason a cancel takes.
            reason: {
                let mut reason = huge("cancelled");
                reason.truncate(concepts::CancelRequest::MAX_REASON_BYTES);
                reason
            },
        })
        .await
        .expect("cancelled");
    let page = ui.get(&format!("/executions/{id}")).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(
        !page.body.contains("<script>alert"),
        "a script tag got through"
    );
    // A temporary failure's detail is not shown.
    for what in ["failed", "unlocked", "cancelled", "metadata"] {
        assert!(
            page.body
                .contains(&format!("&lt;script&gt;alert('{what}')")),
            "{what} is shown"
        );
    }
    assert!(
        page.body.len() < 64 * 1024,
        "four 1 MiB strings and a 4 KiB one made a {} byte page",
        page.body.len()
    );
    assert!(page.body.contains("more characters"));
}

#[tokio::test]
async fn an_action_needs_the_form_token_and_this_origin_and_a_refused_one_writes_nothing() {
    let ui = Ui::new(ApiOptions::default());
    let id = ui.create(serde_json::json!({})).await;
    let token = ui.form_token(&id).await;
    let refused = [
        cancel(&id).body(Body::from("form_token=wrong&reason=x")),
        cancel(&id)
            .header(header::ORIGIN, "http://evil.example")
            .header(header::HOST, "127.0.0.1:8080")
            .body(Body::from(format!("form_token={token}&reason=x"))),
        cancel(&id)
            .header("sec-fetch-site", "cross-site")
            .body(Body::from(format!("form_token={token}&reason=x"))),
    ];
    for request in refused {
        let page = ui.send(request.expect("a request")).await;
        assert_eq!(page.status, StatusCode::FORBIDDEN, "{}", page.body);
        assert_eq!(ui.state(&id).await, PendingStateKind::PendingAt);
    }
    let done = ui
        .send(
            cancel(&id)
                .header(header::ORIGIN, "http://127.0.0.1:8080")
                .header(header::HOST, "127.0.0.1:8080")
                .header("x-stele-in-place", "1")
                .body(Body::from(format!("form_token={token}&reason=by+hand")))
                .expect("a request"),
        )
        .await;
    assert_eq!(done.status, StatusCode::OK, "{}", done.body);
    assert!(
        done.body.contains(&format!("cancelled {id}")),
        "{}",
        done.body
    );
    assert_eq!(ui.state(&id).await, PendingStateKind::Finished);
    // Without the script: the page again, with the answer; the second time nothing is left.
    let again = ui
        .send(
            cancel(&id)
                .body(Body::from(format!("form_token={token}")))
                .expect("a request"),
        )
        .await;
    assert!(
        again
            .body
            .contains(&format!("{id} had already finished, nothing cancelled")),
        "{}",
        again.body
    );
    assert!(again.body.contains("<h1>"), "a whole page");
}

#[tokio::test]
async fn a_read_only_node_shows_no_action_and_refuses_them() {
    let ui = Ui::new(ApiOptions {
        read_only: true,
        ..ApiOptions::default()
    });
    let id = ui.create(serde_json::json!({})).await;
    let page = ui.get(&format!("/executions/{id}")).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(!page.body.contains("Confirm: cancel"));
    assert!(!page.body.contains("form_token"));
    let refused = ui
        .send(
            cancel(&id)
                .body(Body::from("form_token=anything"))
                .expect("a request"),
        )
        .await;
    assert_eq!(refused.status, StatusCode::METHOD_NOT_ALLOWED);
    assert!(refused.body.contains("read-only"));
    assert_eq!(ui.state(&id).await, PendingStateKind::PendingAt);
}

#[tokio::test]
async fn a_node_with_a_token_signs_a_browser_in_once() {
    let ui = Ui::new(ApiOptions {
        token: Some("s3cret".to_string()),
        ..ApiOptions::default()
    });
    let away = ui.get("/executions?state=finished").await;
    assert_eq!(away.status, StatusCode::SEE_OTHER);
    assert_eq!(
        away.headers[header::LOCATION],
        "/login?next=%2Fexecutions%3Fstate%3Dfinished"
    );
    let login = |token: &str| {
        Request::post("/login")
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(Body::from(format!(
                "token={token}&next=%2Fexecutions%3Fstate%3Dfinished"
            )))
            .expect("a request")
    };
    let wrong = ui.send(login("guess")).await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    assert!(wrong.headers.get(header::SET_COOKIE).is_none());
    let right = ui.send(login("s3cret")).await;
    assert_eq!(right.status, StatusCode::SEE_OTHER);
    assert_eq!(
        right.headers[header::LOCATION],
        "/executions?state=finished"
    );
    let cookie = right.headers[header::SET_COOKIE].to_str().expect("text");
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let cookie = cookie.split(';').next().expect("the pair").to_string();
    let signed_in = ui
        .send(
            Request::get("/executions?state=finished")
                .header(header::COOKIE, cookie)
                .body(Body::empty())
                .expect("a request"),
        )
        .await;
    assert_eq!(signed_in.status, StatusCode::OK);
    // A bearer header is as good; the assets need nothing.
    let bearer = ui
        .send(
            Request::get("/")
                .header(header::AUTHORIZATION, "Bearer s3cret")
                .body(Body::empty())
                .expect("a request"),
        )
        .await;
    assert_eq!(bearer.status, StatusCode::OK);
    assert_eq!(ui.get("/assets/app.js").await.status, StatusCode::OK);
    // Only a path of this server is followed after signing in.
    let elsewhere = ui
        .send(
            Request::post("/login")
                .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
                .body(Body::from("token=s3cret&next=%2F%2Fevil.example"))
                .expect("a request"),
        )
        .await;
    assert_eq!(elsewhere.headers[header::LOCATION], "/");
}

/// After signing in, a browser is sent to no other host: not to `/\evil.example` nor to
/// `/<tab>/evil.example`, which a browser reads as `//evil.example` (before, both were followed:
/// an open redirect); and a `next` with a line break is no 500 (before, its `Location` could
/// not be written).
#[tokio::test]
async fn signing_in_sends_a_browser_to_no_other_host() {
    let ui = Ui::new(ApiOptions {
        token: Some("s3cret".to_string()),
        ..ApiOptions::default()
    });
    for next in [
        "%2F%5Cevil.example%2F",
        "%2F%09%2Fevil.example%2F",
        "%2F%0Aaway",
    ] {
        let answer = ui
            .send(
                Request::post("/login")
                    .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
                    .body(Body::from(format!("token=s3cret&next={next}")))
                    .expect("a request"),
            )
            .await;
        assert_eq!(
            answer.status,
            StatusCode::SEE_OTHER,
            "{next}: {}",
            answer.body
        );
        assert_eq!(answer.headers[header::LOCATION], "/", "{next}");
    }
}

#[tokio::test]
async fn bad_filters_and_unknown_executions_are_pages_that_say_why() {
    let ui = Ui::new(ApiOptions::default());
    let bad = ui.get("/executions?state=sleepy").await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert!(bad.body.contains("sleepy"), "{}", bad.body);
    // Empty fields of the form are no filter.
    let empty = ui.get("/executions?state=&function=&parent=").await;
    assert_eq!(empty.status, StatusCode::OK, "{}", empty.body);
    let unknown = ui.get("/executions/E_01KBHTTPDEM000000000000009").await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
    assert!(
        unknown
            .body
            .contains("no execution E_01KBHTTPDEM000000000000009")
    );
    let nowhere = ui.get("/nowhere").await;
    assert_eq!(nowhere.status, StatusCode::NOT_FOUND);
    assert!(nowhere.body.contains("<!DOCTYPE html>"));
}

/// A query or a form that axum's extractors refuse is a page that says why, with the
/// extractor's status (axum answers plain text), a form is bounded as the API's bodies are,
/// and a refused form writes nothing.
#[tokio::test]
async fn refused_queries_and_forms_are_pages_that_say_why() {
    let ui = Ui::new(ApiOptions::default());
    let id = ui.create(serde_json::json!({})).await;
    let token = ui.form_token(&id).await;
    let query = ui.get(&format!("/executions/{id}?from=abc")).await;
    let form_without_token = cancel(&id).body(Body::from("reason=x"));
    let json_body = Request::post(format!("/executions/{id}/cancel"))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(format!(r#"{{"form_token":"{token}"}}"#)));
    // A form over the API's body limit (1 MiB; axum's own default was 2 MiB).
    let reason = "x".repeat(1024 * 1024 + 1_000);
    let too_large = cancel(&id).body(Body::from(format!("form_token={token}&reason={reason}")));
    let form_without_token = ui.send(form_without_token.expect("a request")).await;
    let json_body = ui.send(json_body.expect("a request")).await;
    let too_large = ui.send(too_large.expect("a request")).await;
    for (page, status, says) in [
        (
            &too_large,
            StatusCode::PAYLOAD_TOO_LARGE,
            "larger than this server takes",
        ),
        (&query, StatusCode::BAD_REQUEST, "from"),
        (
            &form_without_token,
            StatusCode::UNPROCESSABLE_ENTITY,
            "form_token",
        ),
        (
            &json_body,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Content-Type",
        ),
    ] {
        assert_eq!(page.status, status, "{}", page.body);
        assert!(page.body.contains("<!DOCTYPE html>"), "{}", page.body);
        assert!(page.body.contains(says), "{says}: {}", page.body);
    }
    assert_eq!(ui.state(&id).await, PendingStateKind::PendingAt);
}

#[tokio::test]
async fn a_parked_execution_says_why_it_waits_and_is_listed_as_parked() {
    let ui = Ui::new(ApiOptions::default());
    let ffqn = "test:ui/flows.parked".parse().expect("a function");
    let reason = "the replay diverged at version 3: the log holds the opening of join set o:1";
    let parked = test_utils::parked_execution(ui.db.as_ref(), &ffqn, Now.now(), reason).await;
    let pending = ui.create(serde_json::json!(1)).await;
    let page = ui.get(&format!("/executions/{parked}")).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains(r#"data-state="parked""#), "the badge");
    assert!(page.body.contains(reason), "the reason");
    assert!(
        page.body.contains(concepts::PARKED_EXPLAINED),
        "what it waits for"
    );
    let list = ui.get("/executions?parked=true").await;
    assert_eq!(list.status, StatusCode::OK);
    assert!(list.body.contains(parked.as_str()));
    assert!(
        !list.body.contains(pending.as_str()),
        "a due execution is not parked"
    );
    assert!(
        list.body.contains(r#"name="parked" value="true" checked"#),
        "the filter kept"
    );
}

#[tokio::test]
async fn the_overview_names_the_oldest_due_execution_past_the_rows_it_reads() {
    let db = memory_store();
    let ffqn: concepts::FunctionFqn = "test:ui/api.show".parse().expect("a function");
    let component = ComponentId::new("activity", "show").expect("a component");
    let catalog = Catalog::new().with(node::CatalogFunction::new(
        ffqn.clone(),
        node::ExecutionDefaults::new(component.clone()),
    ));
    let (_stop, fired) = tokio::sync::watch::channel(false);
    let app = router(
        Mount {
            db: db.clone(),
            clock: Now,
            catalog: Arc::new(catalog),
            options: ApiOptions::default(),
            signal: ShutdownSignal::new(fired),
        },
        UiOptions::default(),
    );
    let now = Now.now();
    let hour_ago = now - chrono::TimeDelta::minutes(90);
    // The oldest first, due 90 minutes ago; then 1,000 newer ones, due now: the overview reads
    // the newest 1,000 pending, which leave the oldest out.
    let request = |n: u32, at| CreateRequest {
        created_at: at,
        execution_id: ExecutionId::generate_at(at),
        ffqn: ffqn.clone(),
        params: Json(serde_json::json!(n)),
        parent: None,
        scheduled_at: at,
        retry_exp_backoff: Duration::from_millis(100),
        max_retries: 1,
        component_id: component.clone(),
        metadata: ExecutionMetadata::default(),
        scheduled_by: None,
    };
    db.create(request(0, hour_ago)).await.expect("created");
    let newer = (1..=1_000).map(|n| request(n, now)).collect();
    db.create_batch(newer).await.expect("created");
    let response = app
        .oneshot(Request::get("/").body(Body::empty()).expect("a request"))
        .await
        .expect("infallible");
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("a body");
    let body = String::from_utf8(bytes.to_vec()).expect("utf-8");
    let (_, summary) = body.split_once(r#"id="oldest-due""#).expect("the summary");
    let summary = summary.split_once("</p>").expect("its end").0;
    assert!(summary.contains("1 h 30 min"), "{summary}");
    assert!(summary.contains("test:ui/api.show"), "{summary}");
}
