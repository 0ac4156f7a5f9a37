//! Serving the API: [`serve`], the background service a node runs it as, and
//! [`serve_until`], for a program that serves it on its own; both stop accepting on their
//! signal and finish the requests in flight (axum's graceful shutdown).

use crate::{ApiOptions, ApiState, routes};
use concepts::{ClockFn, DbConnection};
use node::{BackgroundContext, Catalog, ShutdownSignal};
use std::{future::Future, pin::Pin, sync::Arc};
use tokio::net::TcpListener;

/// The router and, outside `/api/v1`, a JSON 404.
fn app<C: ClockFn>(state: ApiState<C>) -> axum::Router {
    crate::router(state).fallback(routes::no_route)
}

/// What the routes served beside the API ([`serve_with`]) are built from: the node's store,
/// clock, catalog and shutdown signal, and the API's options (the same token, the same
/// read-only mode).
pub struct Mount<C: ClockFn> {
    /// The node's store.
    pub db: Arc<dyn DbConnection>,
    /// The node's clock.
    pub clock: C,
    /// The functions the node runs.
    pub catalog: Arc<Catalog>,
    /// The API's options.
    pub options: ApiOptions,
    /// Fires when the node's shutdown begins.
    pub signal: ShutdownSignal,
}

/// The task [`serve`] and [`serve_with`] return for `NodeBuilder::background_service`.
pub type Service<C> =
    Box<dyn FnOnce(BackgroundContext<C>) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send>;

/// A task for `NodeBuilder::background_service` that serves the API on `listener` with the
/// node's store, clock and catalog: bind the listener first (`TcpListener::bind`), so that an
/// address in use is the caller's error, before the node starts. When the node's shutdown
/// begins, it stops accepting, answers the long polls in flight with "still running" and
/// finishes the other requests in flight; the node's drain deadline bounds them.
///
/// ```no_run
/// # async fn example(db: std::sync::Arc<dyn concepts::DbConnection>) -> anyhow::Result<()> {
/// let listener = tokio::net::TcpListener::bind(server::DEFAULT_ADDRESS).await?;
/// let node = node::Node::builder(db, executor::Now)
///     // .activity(...) and .workflow(...) as usual
///     .background_service("http", server::serve(listener, server::ApiOptions::default()))
///     .start()?;
/// # Ok(()) }
/// ```
pub fn serve<C: ClockFn>(listener: TcpListener, options: ApiOptions) -> Service<C> {
    service(listener, options, None::<fn(Mount<C>) -> axum::Router>)
}

/// [`serve`], with the routes `pages` builds from the node's [`Mount`] beside the API on the
/// same address: the web UI (the `ui` crate) is served so. The pages' router is merged with
/// the API's; its fallback answers every path outside `/api/v1`.
pub fn serve_with<C: ClockFn>(
    listener: TcpListener,
    options: ApiOptions,
    pages: impl FnOnce(Mount<C>) -> axum::Router + Send + 'static,
) -> Service<C> {
    service(listener, options, Some(pages))
}

fn service<C: ClockFn>(
    listener: TcpListener,
    options: ApiOptions,
    pages: Option<impl FnOnce(Mount<C>) -> axum::Router + Send + 'static>,
) -> Service<C> {
    Box::new(move |context: BackgroundContext<C>| {
        let BackgroundContext {
            signal,
            db,
            clock,
            catalog,
        } = context;
        let state = ApiState::new(db.clone(), clock.clone(), catalog.clone(), options.clone())
            .stopping_on(signal.clone());
        let app = match pages {
            Some(pages) => crate::router(state).merge(pages(Mount {
                db,
                clock,
                catalog,
                options,
                signal: signal.clone(),
            })),
            None => app(state),
        };
        Box::pin(async move {
            if let Err(err) = run(listener, app, signal.fired()).await {
                tracing::error!("the HTTP server stopped: {err}");
            }
        })
    })
}

/// Serves the API over `db` on `listener` until `stop` completes, then finishes the requests
/// in flight and returns.
///
/// # Errors
/// The listener failed.
pub async fn serve_until<C: ClockFn>(
    listener: TcpListener,
    db: Arc<dyn DbConnection>,
    clock: C,
    catalog: Arc<Catalog>,
    options: ApiOptions,
    stop: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let no_pages = |_: Mount<C>| axum::Router::new().fallback(routes::no_route);
    serve_until_with(listener, db, clock, catalog, options, stop, no_pages).await
}

/// [`serve_until`], with the routes `pages` builds beside the API (as [`serve_with`]); the
/// [`Mount`]'s signal fires when `stop` completes.
///
/// # Errors
/// The listener failed.
pub async fn serve_until_with<C: ClockFn>(
    listener: TcpListener,
    db: Arc<dyn DbConnection>,
    clock: C,
    catalog: Arc<Catalog>,
    options: ApiOptions,
    stop: impl Future<Output = ()> + Send + 'static,
    pages: impl FnOnce(Mount<C>) -> axum::Router + Send + 'static,
) -> std::io::Result<()> {
    let (fire, fired) = tokio::sync::watch::channel(false);
    let signal = ShutdownSignal::new(fired);
    let state = ApiState::new(db.clone(), clock.clone(), catalog.clone(), options.clone())
        .stopping_on(signal.clone());
    let app = crate::router(state).merge(pages(Mount {
        db,
        clock,
        catalog,
        options,
        signal,
    }));
    run(listener, app, async move {
        stop.await;
        let _ = fire.send(true);
    })
    .await
}

async fn run(
    listener: TcpListener,
    app: axum::Router,
    stop: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    if let Ok(address) = listener.local_addr() {
        tracing::info!(%address, "serving HTTP: the API under /api/v1");
    }
    axum::serve(listener, app)
        .with_graceful_shutdown(stop)
        .await
}
