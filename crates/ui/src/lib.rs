//! Stele's web UI: pages of a node's executions, served beside the HTTP API on the same
//! address, behind the same token.
//!
//! # What it serves
//!
//! | path | page |
//! |---|---|
//! | `/` | the overview: per function, the executions by state, what finished and failed lately, the oldest due execution's age, the leases held and by which executors |
//! | `/executions` | the list, with the API's filters kept in the URL (`state`, `function`, `top_level`, `parent`, `created_after`, `created_before`, `id_prefix`), cursor paging |
//! | `/executions/{id}` | one execution: its state and pending state in words, parameters and result, the timeline of its attempts, backoffs, sleeps and children, its join sets and their responses in arrival order, its child tree, its events |
//! | `/executions/{id}/tree` | a page of its children as a tree fragment (the tree's expansion and its "more") |
//! | `POST /executions/{id}/cancel`, `POST /executions/{id}/complete` | the actions, each behind a confirmation, answered with what happened |
//! | `/schedules` | the schedules: status, spec and zone, function, runs, next tick |
//! | `/schedules/{name}` | one schedule: its definition, its next ticks, its last ticks with their executions' states |
//! | `POST /schedules/{name}/pause`, `/resume`, `/trigger` | its actions, as the executions' are |
//! | `/live?execution=ID`, `/live?list=QUERY` | server-sent events: the live parts of a page |
//! | `/login` | the token form of a node that has one |
//!
//! The pages are HTML rendered on the server ([`maud`]) and readable without JavaScript; the
//! project's own small script (`assets/app.js`) adds the live updates, the tree's expansion
//! and actions answered in place. Nothing of a third party is served.
//!
//! # Live
//!
//! One task per topic (an execution, or the first page of one list), not per tab: while a
//! page is open on it, the task reads the store once per [`UiOptions::live_interval`] (for
//! an execution, one indexed read of whether its log has an event past the last one rendered;
//! for a list, the rows of its first page), renders what changed once and sends it to every
//! tab open on the topic; the last rendering greets a new tab without a read. An execution's
//! whole log is read again when it has a new event and, while it is unfinished, every 5 s
//! (its words, "its lease expires in 4 s", and its join sets' responses, which are not
//! events, stay current); a finished one's log is read once. A tab may pause and resume its
//! updates.
//!
//! # Safety
//!
//! Every value from the store is escaped ([`maud`] escapes every interpolation) and bounded:
//! a string is cut after [`json::STRING_LIMIT`] characters, a value after
//! [`json::NODE_LIMIT`] nodes. Every response carries a content security policy that runs
//! only this server's script (no inline script, no other origin). An action is a `POST`
//! that carries the page's form token and, when the browser sends one, an `Origin` of this
//! server: a page elsewhere cannot cancel, complete, pause, resume or trigger. With a token, a browser signs in
//! once (`/login`), and an `HttpOnly`, `SameSite=Strict` cookie carries it; a read-only
//! node shows no buttons and refuses the actions (405).

mod actions;
mod assets;
mod auth;
mod extract;
pub mod json;
mod layout;
mod live;
mod pages;
mod timeline;

use axum::{
    Router, middleware,
    routing::{get, post},
};
use concepts::{ClockFn, DbConnection};
use node::Catalog;
use server::{ApiOptions, Mount};
use std::{sync::Arc, time::Duration};
use tokio::net::TcpListener;

/// How the UI is served, beyond the API's options it shares.
#[derive(Debug, Clone)]
pub struct UiOptions {
    /// How often a live topic's task reads the store while a page is open on it (500 ms).
    pub live_interval: Duration,
    /// What the node's metrics counted lately (`node::recent::RecentRecorder`), which the
    /// overview shows; without it, the overview reads finishes from the store and shows no
    /// retries.
    pub recent: Option<Arc<node::recent::Recent>>,
}

impl Default for UiOptions {
    fn default() -> Self {
        Self {
            live_interval: Duration::from_millis(500),
            recent: None,
        }
    }
}

/// What every handler reads: the node's store, clock and catalog, the API's token and
/// read-only mode, the form token, the live hub.
pub(crate) struct Ui<C: ClockFn> {
    pub(crate) db: Arc<dyn DbConnection>,
    pub(crate) clock: C,
    pub(crate) catalog: Arc<Catalog>,
    pub(crate) token: Option<Vec<u8>>,
    pub(crate) read_only: bool,
    /// The token every action's form carries: drawn at random when the router is built.
    pub(crate) form_token: String,
    pub(crate) live: live::Hub,
    pub(crate) recent: Option<Arc<node::recent::Recent>>,
}

/// Shared state of the handlers.
pub(crate) type Shared<C> = axum::extract::State<Arc<Ui<C>>>;

/// A task for `NodeBuilder::background_service` that serves the HTTP API and the UI on
/// `listener`: [`server::serve_with`] with [`router`]. Bind the listener first, so that an
/// address in use is the caller's error.
///
/// ```no_run
/// # async fn example(db: std::sync::Arc<dyn concepts::DbConnection>) -> anyhow::Result<()> {
/// let listener = tokio::net::TcpListener::bind(server::DEFAULT_ADDRESS).await?;
/// let node = node::Node::builder(db, executor::Now)
///     .background_service(
///         "http",
///         ui::serve(listener, server::ApiOptions::default(), ui::UiOptions::default()),
///     )
///     .start()?;
/// # Ok(()) }
/// ```
pub fn serve<C: ClockFn>(
    listener: TcpListener,
    options: ApiOptions,
    ui: UiOptions,
) -> server::Service<C> {
    server::serve_with(listener, options, |mount| router(mount, ui))
}

/// The UI's routes, for [`server::serve_with`], [`server::serve_until_with`] (a program that
/// serves without a node: the benchmark) or a program's own router beside
/// [`server::router`]; its fallback is an HTML 404.
pub fn router<C: ClockFn>(mount: Mount<C>, options: UiOptions) -> Router {
    let Mount {
        db,
        clock,
        catalog,
        options: api,
        signal,
    } = mount;
    let body_limit = api.body_limit;
    let ui = Arc::new(Ui {
        live: live::Hub::new(options.live_interval, signal),
        recent: options.recent,
        db,
        clock,
        catalog,
        token: api.token.map(String::into_bytes),
        read_only: api.read_only,
        form_token: format!(
            "{}{}",
            ulid::Ulid::generate().random(),
            ulid::Ulid::generate().random()
        ),
    });
    let guarded = Router::new()
        .route("/", get(pages::overview::page::<C>))
        .route("/executions", get(pages::list::page::<C>))
        .route("/executions/{id}", get(pages::execution::page::<C>))
        .route("/executions/{id}/tree", get(pages::execution::tree::<C>))
        .route("/executions/{id}/cancel", post(actions::cancel::<C>))
        .route("/executions/{id}/complete", post(actions::complete::<C>))
        .route("/schedules", get(pages::schedules::list::<C>))
        .route("/schedules/{name}", get(pages::schedules::page::<C>))
        .route(
            "/schedules/{name}/pause",
            post(pages::schedules::pause::<C>),
        )
        .route(
            "/schedules/{name}/resume",
            post(pages::schedules::resume::<C>),
        )
        .route(
            "/schedules/{name}/trigger",
            post(pages::schedules::trigger::<C>),
        )
        .route("/live", get(live::stream::<C>))
        .fallback(pages::not_found)
        .layer(middleware::from_fn_with_state(ui.clone(), auth::guard::<C>));
    Router::new()
        .route("/login", get(auth::form).post(auth::login::<C>))
        .route("/assets/app.css", get(assets::css))
        .route("/assets/app.js", get(assets::js))
        .merge(guarded)
        // The API's bound: a form is never larger than a submit may be.
        .layer(axum::extract::DefaultBodyLimit::max(body_limit))
        .layer(middleware::from_fn(layout::headers))
        .with_state(ui)
}

#[cfg(test)]
mod tests;
