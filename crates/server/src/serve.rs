//! Serving the API: [`serve`], the background service a node runs it as, and
//! [`serve_until`], for a program that serves it on its own; both stop accepting on their
//! signal and finish the requests in flight (axum's graceful shutdown).

use crate::{ApiOptions, ApiState, routes};
use concepts::{ClockFn, DbConnection};
use node::{BackgroundContext, Catalog};
use std::{future::Future, sync::Arc};
use tokio::net::TcpListener;

/// The router and, outside `/api/v1`, a JSON 404.
fn app<C: ClockFn>(state: ApiState<C>) -> axum::Router {
    crate::router(state).fallback(routes::no_route)
}

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
pub fn serve<C: ClockFn>(
    listener: TcpListener,
    options: ApiOptions,
) -> impl FnOnce(BackgroundContext<C>) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>>
+ Send
+ 'static {
    move |context: BackgroundContext<C>| {
        let BackgroundContext {
            signal,
            db,
            clock,
            catalog,
        } = context;
        let state = ApiState::new(db, clock, catalog, options).stopping_on(signal.clone());
        Box::pin(async move {
            if let Err(err) = run(listener, state, signal.fired()).await {
                tracing::error!("the HTTP API stopped: {err}");
            }
        })
    }
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
    run(listener, ApiState::new(db, clock, catalog, options), stop).await
}

async fn run<C: ClockFn>(
    listener: TcpListener,
    state: ApiState<C>,
    stop: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    if let Ok(address) = listener.local_addr() {
        tracing::info!(%address, "serving the HTTP API under /api/v1");
    }
    axum::serve(listener, app(state))
        .with_graceful_shutdown(stop)
        .await
}
