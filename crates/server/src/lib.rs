//! Stele's HTTP API, `/api/v1`: an axum [`Router`] that any program can mount, and [`serve`],
//! the background service a node runs it as.
//!
//! # What it serves
//!
//! | method and path | what it does | answers |
//! |---|---|---|
//! | `POST /api/v1/executions` | submits `{"function", "params", "id"?}` (`node::submit`, idempotent under `id`) | 201 created, 200 already existed (with where it stands), 409, 422 |
//! | `GET /api/v1/executions` | lists, newest first: `state`, `function`, `top_level`, `parent`, `created_after`, `created_before`, `id_prefix`, `cursor`, `limit` | 200 a page and its `next_cursor` |
//! | `GET /api/v1/executions/{id}` | the execution: state, params, result, parent, responses | 200, 404 |
//! | `GET /api/v1/executions/{id}/events` | its log from `from` (0), `limit` events | 200 a page and its `next` |
//! | `GET /api/v1/executions/{id}/children` | its children, paged as the list is | 200, 404 |
//! | `POST /api/v1/executions/{id}/cancel` | cancels it and its unfinished descendants, `{"reason"?}` (at most 4 KiB) | 200 cancelled or already finished, 404, 422 |
//! | `POST /api/v1/executions/{id}/complete` | completes a promise, `{"value"}` | 200 completed or already completed, 404, 409 |
//! | `GET /api/v1/executions/{id}/wait?timeout=30s` | waits for its result, at most [`ApiOptions::max_wait`] (60 s); the polls of one execution share one wait of the store | 200 finished, 202 still running, 404 |
//! | `POST /api/v1/schedules` | creates a schedule, `{"name", "function", "params"?, "cron" or "every", "offset"?, "timezone"?, "overlap"?, "catchup_window"?, "jitter"?, "max_runs"?, "end"?}` (`node::schedules::ScheduleDraft`, checked against the catalog; a catch-up window or jitter at most a century) | 201 created, 200 already existed, 400, 409 another definition, 422 |
//! | `GET /api/v1/schedules` | lists them by name: `after`, `limit` | 200 a page and its `next_after` |
//! | `GET /api/v1/schedules/{name}` | the schedule, its `next` fire times (5) and its last `ticks` (20) | 200, 404 |
//! | `PUT /api/v1/schedules/{name}` | replaces its definition (the body as for `POST`, the same name) | 200, 400, 404, 422 |
//! | `DELETE /api/v1/schedules/{name}` | deletes it and its ticks (its executions stay) | 200 with its unfinished last run, 404 |
//! | `POST /api/v1/schedules/{name}/pause` | pauses it, `{"note"?}` | 200 `changed` or not, 404 |
//! | `POST /api/v1/schedules/{name}/resume` | resumes it, `{}` | 200 `changed` or not, 404 |
//! | `POST /api/v1/schedules/{name}/trigger` | fires it now, `{}` | 200 the execution, 404 |
//! | `POST /api/v1/schedules/{name}/backfill` | fires the ticks of `{"from", "to"}` not fired yet (at most 1,000) | 200 fired and fired already, 404, 409 a longer range |
//! | `GET /api/v1/functions` | the functions the node runs (its [`node::Catalog`]) | 200 |
//! | `GET /api/v1/healthz` | the process serves | 200 |
//! | `GET /api/v1/readyz` | the store answers a read | 200, 503 |
//! | `GET /metrics` | the program's metrics, when [`ApiOptions::metrics`] is set (Prometheus' text format for `stele serve`; the names are in `docs/METRICS.md`) | 200 |
//!
//! The documents are in [`types`]: times in RFC 3339 UTC, ids as the model writes them, the
//! `wait` timeout as the `stele` command writes durations (`500ms`, `30s`, `1m`; one parser,
//! `node::HumanDuration`). A page of `GET /executions` holds at most `limit` rows (100 by
//! default, at most 1,000; more is a 400); its `next_cursor` is `<created_at>~<id>` of its
//! last row (`2026-01-31T12:00:01.234567Z~E_01J...`), `null` on the last page; nothing counts
//! the whole table.
//!
//! # Mounting it
//!
//! A node serves it with [`serve`] given to `NodeBuilder::background_service`; a program
//! without a node serves it with [`serve_until`]. Both run their own accept loop: each
//! connection is hyper's HTTP/1 connection with a header timeout
//! ([`ApiOptions::header_read_timeout`], 10 s: a client that sends half a header, or stalls
//! in its body for as long, is cut off), and hyper-util's graceful shutdown: on the node's shutdown (or `serve_until`'s
//! signal) it stops accepting, answers the long polls in flight with "still running" (202)
//! and finishes the other requests in flight, within the node's drain deadline.
//!
//! [`router`] is the API alone, to merge beside a program's own routes (everything it answers
//! is under `/api/v1`); the program's server then owns the connections, and should set a
//! header timeout of its own (`axum::serve` sets none):
//!
//! ```no_run
//! # async fn example(db: std::sync::Arc<dyn concepts::DbConnection>) {
//! use server::{ApiOptions, ApiState};
//! use std::sync::Arc;
//!
//! let api = server::router(ApiState::new(db, executor::Now, Arc::new(node::Catalog::new()), ApiOptions::default()));
//! let app: axum::Router = axum::Router::new().merge(api);
//! // Served by the program's own server, with its own header timeout.
//! # let _ = app;
//! # }
//! ```
//!
//! # Errors
//!
//! Every refusal is `{"error": kind, "message": ...}` (a conflicting submit adds
//! `differences`), axum's own rejections included, and nothing is written by a refused
//! request:
//!
//! | status | `error` | when |
//! |---|---|---|
//! | 400 | `malformed_body` | a body that is not JSON, not the document's shape, with an unknown field, or a schedule field refused (naming it: a cron expression, a zone, an interval, a function the node does not run) |
//! | 400 | `malformed_query` | a query string that does not parse, an unknown parameter, a limit over 1,000, a bad cursor, time or duration |
//! | 400 | `malformed_id` | an execution id or a schedule name that does not parse, or a child's id given to submit |
//! | 401 | `unauthorized` | a token is set and the request's `Authorization: Bearer` is missing or wrong |
//! | 403 | `host_refused` | the server listens on loopback without a token and the request is addressed to a name other than `localhost`, a name under `.localhost` or an IP address |
//! | 404 | `not_found` | no such execution or schedule, or no such route |
//! | 405 | `read_only` | a write (`POST`, `PUT`, `DELETE`) to a server in read-only mode |
//! | 405 | `method_not_allowed` | a method the route does not have |
//! | 409 | `conflict` | a submit whose id exists with another function or parameters; a promise completed with another value; a schedule created under a name that exists with another definition |
//! | 409 | `refused` | a request the model refuses for the execution's state (completing what is not a promise, or a cancelled one) |
//! | 413 | `body_too_large` | a body over [`ApiOptions::body_limit`] (1 MiB) |
//! | 415 | `unsupported_media_type` | a body without `Content-Type: application/json` |
//! | 422 | `params_refused` | parameters the function cannot decode |
//! | 422 | `reason_too_long` | a cancel's reason over `concepts::CancelRequest::MAX_REASON_BYTES` (4 KiB) |
//! | 503 | `unavailable` | the store is unreachable or closed (retry later) |
//! | 500 | `internal` | any other failure of the store |
//!
//! A read-only server refuses writes with 405 (the method is not allowed on it) rather than
//! 403 (the caller is who it says; no token would let it write).
//!
//! # Security
//!
//! [`DEFAULT_ADDRESS`] is loopback. With [`ApiOptions::token`] set, every request (the
//! health checks too, so that nothing about the node is told to a stranger) needs
//! `Authorization: Bearer <token>`, compared in constant time. Writes need a JSON body with
//! its content type, which a browser cannot send to another origin without asking (a CORS
//! preflight): no CORS headers are sent unless origins are named
//! ([`ApiOptions::cors_origins`]), so a page elsewhere cannot submit or cancel.
//!
//! Served by [`serve`] and its siblings on a loopback address without a token, only requests
//! addressed to `localhost`, a name under `.localhost` or an IP address are answered (403
//! `host_refused` otherwise, before any route): a page of a site whose owner points its name
//! at 127.0.0.1 (DNS rebinding) would otherwise be same-origin with the server. Behind a proxy
//! that forwards its own host name, give the server a token.

mod auth;
mod error;
mod extract;
pub mod listing;
mod routes;
mod serve;
pub mod types;
pub mod views;
mod waits;

pub use auth::{bearer_token, token_matches};
pub use error::ApiError;
pub use extract::parse_id;
pub use serve::{Mount, Service, serve, serve_until, serve_until_with, serve_with};

use concepts::{ClockFn, DbConnection};
use node::{Catalog, ShutdownSignal};
use std::{sync::Arc, time::Duration};

pub use axum::Router;

/// Where `stele serve --http` listens unless told otherwise: loopback only.
pub const DEFAULT_ADDRESS: &str = "127.0.0.1:8080";

/// How the API is served: auth, read-only mode, CORS and its bounds.
#[derive(Debug, Clone)]
pub struct ApiOptions {
    /// When set, every request needs `Authorization: Bearer <token>`.
    pub token: Option<String>,
    /// Serve reads only: every `POST` is refused with 405.
    pub read_only: bool,
    /// The origins a browser may call the API from (`https://ops.example.com`); none: no
    /// CORS headers at all.
    pub cors_origins: Vec<String>,
    /// The longest `wait?timeout=` served; a longer one is cut to it (60 s).
    pub max_wait: Duration,
    /// The largest request body (1 MiB), of the API's and of the web UI's forms; a larger
    /// one is 413.
    pub body_limit: usize,
    /// How long a client may take to send a request's whole header (10 s), and the longest
    /// pause while it sends the body; a slower one has its connection closed (or its request
    /// refused), so that stalled clients cannot hold connections, nor a shutdown, open.
    pub header_read_timeout: Duration,
    /// The metrics served on `/metrics` (behind the same token): the text of the recorder
    /// the program installed, Prometheus' say. None: no `/metrics` route.
    pub metrics: Option<MetricsText>,
}

/// What `/metrics` answers: a function that renders the program's metrics as text (in
/// Prometheus' exposition format, as `stele serve`'s recorder renders it: `cli::prometheus`).
#[derive(Clone)]
pub struct MetricsText(pub Arc<dyn Fn() -> String + Send + Sync>);

impl std::fmt::Debug for MetricsText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MetricsText")
    }
}

impl Default for ApiOptions {
    fn default() -> Self {
        Self {
            token: None,
            read_only: false,
            cors_origins: Vec::new(),
            max_wait: Duration::from_secs(60),
            body_limit: 1024 * 1024,
            header_read_timeout: Duration::from_secs(10),
            metrics: None,
        }
    }
}

/// What the handlers serve from: the store, the clock of submissions and cancellations, the
/// catalog submissions are checked against, and the options.
pub struct ApiState<C: ClockFn> {
    db: Arc<dyn DbConnection>,
    clock: C,
    catalog: Arc<Catalog>,
    options: ApiOptions,
    stopping: Option<ShutdownSignal>,
    long_polls: waits::LongPolls,
}

impl<C: ClockFn> ApiState<C> {
    /// The state of an API over `db`.
    #[must_use]
    pub fn new(
        db: Arc<dyn DbConnection>,
        clock: C,
        catalog: Arc<Catalog>,
        options: ApiOptions,
    ) -> Self {
        Self {
            long_polls: waits::LongPolls::new(db.clone()),
            db,
            clock,
            catalog,
            options,
            stopping: None,
        }
    }

    /// Long polls end early, answering "still running", once `signal` fires.
    #[must_use]
    pub fn stopping_on(mut self, signal: ShutdownSignal) -> Self {
        self.stopping = Some(signal);
        self
    }
}

impl<C: ClockFn> std::fmt::Debug for ApiState<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiState")
            .field("catalog", &self.catalog)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// The API's routes under `/api/v1`, with auth, read-only mode, CORS and the body limit of
/// `state`'s options; an unknown path under `/api/v1` is a JSON 404. Merge it into a
/// program's own router, or serve it as it is.
///
/// # Panics
/// Never for the options' defaults; a CORS origin that is not a valid header value is left
/// out (with a warning).
pub fn router<C: ClockFn>(state: ApiState<C>) -> Router {
    routes::router(Arc::new(state))
}

#[cfg(test)]
mod tests;
