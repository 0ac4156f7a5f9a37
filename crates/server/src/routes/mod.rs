//! The router: every route of `/api/v1` with its handler, the guards, CORS and the body
//! limit; the handlers of the node itself (`functions`, `healthz`, `readyz`) live here, those
//! of executions in `executions.rs` (reads) and `operate.rs` (writes and the wait), those of
//! schedules in `schedules.rs`.

mod executions;
mod operate;
mod schedules;

use crate::{
    ApiState, MetricsText,
    auth::{Guard, guard},
    error::ApiError,
    types::{FunctionView, FunctionsAnswer, HealthAnswer},
};
use axum::{
    Json, Router,
    extract::{DefaultBodyLimit, OriginalUri, State},
    http::{HeaderValue, Method, header},
    middleware,
    routing::{any, get, post},
};
use concepts::{ClockFn, ListExecutionsFilter, Pagination};
use std::{sync::Arc, time::Duration};
use tower_http::cors::{AllowOrigin, CorsLayer};

/// Shared state of the handlers.
pub(crate) type Shared<C> = State<Arc<ApiState<C>>>;

pub(crate) fn router<C: ClockFn>(state: Arc<ApiState<C>>) -> Router {
    let options = &state.options;
    let api = Router::new()
        .route(
            "/executions",
            post(operate::submit::<C>).get(executions::list::<C>),
        )
        .route("/executions/{id}", get(executions::show::<C>))
        .route("/executions/{id}/events", get(executions::events::<C>))
        .route("/executions/{id}/children", get(executions::children::<C>))
        .route("/executions/{id}/cancel", post(operate::cancel::<C>))
        .route("/executions/{id}/complete", post(operate::complete::<C>))
        .route("/executions/{id}/wait", get(operate::wait::<C>))
        .route(
            "/schedules",
            get(schedules::list::<C>).post(schedules::create::<C>),
        )
        .route(
            "/schedules/{name}",
            get(schedules::show::<C>)
                .put(schedules::update::<C>)
                .delete(schedules::delete::<C>),
        )
        .route("/schedules/{name}/pause", post(schedules::pause::<C>))
        .route("/schedules/{name}/resume", post(schedules::resume::<C>))
        .route("/schedules/{name}/trigger", post(schedules::trigger::<C>))
        .route("/schedules/{name}/backfill", post(schedules::backfill::<C>))
        .route("/functions", get(functions::<C>))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz::<C>))
        .fallback(no_route)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(options.body_limit))
        .layer(middleware::from_fn_with_state(
            Arc::new(Guard::new(options)),
            guard,
        ));
    let api = match cors(&options.cors_origins) {
        Some(cors) => api.layer(cors),
        None => api,
    };
    // `nest` leaves `/api/v1/` itself to the outer router's fallback (an empty 404, or the
    // web UI's page): it is the API's, a JSON 404 behind the same guard.
    let empty = Router::new()
        .route("/", any(no_route))
        .layer(middleware::from_fn_with_state(
            Arc::new(Guard::new(options)),
            guard,
        ));
    let root = Router::new()
        .nest("/api/v1", api.with_state(state.clone()))
        .nest("/api/v1/", empty);
    match options.metrics.clone() {
        Some(MetricsText(render)) => root.route(
            "/metrics",
            get(move || async move {
                (
                    [(
                        header::CONTENT_TYPE,
                        "text/plain; version=0.0.4; charset=utf-8",
                    )],
                    render(),
                )
            })
            .layer(middleware::from_fn_with_state(
                Arc::new(Guard::new(options)),
                guard,
            )),
        ),
        None => root,
    }
}

/// The CORS layer of the origins named; `None` when none is, so that no CORS header is sent.
fn cors(origins: &[String]) -> Option<CorsLayer> {
    let origins: Vec<HeaderValue> = origins
        .iter()
        .filter_map(|origin| match HeaderValue::from_str(origin) {
            Ok(value) => Some(value),
            Err(_) => {
                tracing::warn!(origin, "not a valid CORS origin; left out");
                None
            }
        })
        .collect();
    if origins.is_empty() {
        return None;
    }
    Some(
        CorsLayer::new()
            .allow_origin(AllowOrigin::list(origins))
            .allow_methods([Method::GET, Method::POST, Method::PUT, Method::DELETE])
            .allow_headers([header::AUTHORIZATION, header::CONTENT_TYPE])
            .max_age(Duration::from_secs(600)),
    )
}

/// An unknown path, as JSON, named as the client asked for it (inside a nested router the
/// `Uri` has lost its prefix; `OriginalUri` keeps it).
pub(crate) async fn no_route(OriginalUri(uri): OriginalUri) -> ApiError {
    ApiError::no_route(uri.path())
}

async fn method_not_allowed() -> ApiError {
    ApiError::method_not_allowed()
}

async fn functions<C: ClockFn>(State(state): Shared<C>) -> Json<FunctionsAnswer> {
    let functions = state
        .catalog
        .functions()
        .map(|function| FunctionView {
            function: function.ffqn().to_string(),
            component: function.defaults().component_id.to_string(),
            max_retries: function.defaults().max_retries,
            retry_exp_backoff_ms: u64::try_from(function.defaults().retry_exp_backoff.as_millis())
                .unwrap_or(u64::MAX),
            checks_params: function.checks_params(),
        })
        .collect();
    Json(FunctionsAnswer { functions })
}

async fn healthz() -> Json<HealthAnswer> {
    Json(HealthAnswer {
        status: "ok".to_string(),
    })
}

/// Ready when the store answers a read of one row.
async fn readyz<C: ClockFn>(State(state): Shared<C>) -> Result<Json<HealthAnswer>, ApiError> {
    let one = Pagination {
        cursor: None,
        length: 1,
    };
    match state
        .db
        .list_executions(ListExecutionsFilter::default(), one)
        .await
    {
        Ok(_) => Ok(Json(HealthAnswer {
            status: "ready".to_string(),
        })),
        Err(err) => Err(ApiError::unavailable("the store did not answer", &err)),
    }
}
