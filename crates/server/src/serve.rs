//! Serving the API: [`serve`], the background service a node runs it as, and
//! [`serve_until`], for a program that serves it on its own; both stop accepting on their
//! signal and finish the requests in flight; a client too slow to send its request's header
//! is cut off ([`ApiOptions::header_read_timeout`]).

use crate::{ApiError, ApiOptions, ApiState, routes};
use axum::{http::Request, response::IntoResponse as _};
use concepts::{ClockFn, DbConnection};
use hyper::body::Incoming;
use hyper_util::{
    rt::{TokioIo, TokioTimer},
    server::graceful::GracefulShutdown,
};
use node::{BackgroundContext, Catalog, ShutdownSignal};
use std::{future::Future, pin::Pin, sync::Arc, time::Duration};
use tokio::net::TcpListener;
use tower::ServiceExt as _;
use tower_http::timeout::TimeoutBody;

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
        let bounds = Bounds::new(&listener, &options);
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
            if let Err(err) = run(listener, app, bounds, signal.fired()).await {
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
    let bounds = Bounds::new(&listener, &options);
    let state = ApiState::new(db.clone(), clock.clone(), catalog.clone(), options.clone())
        .stopping_on(signal.clone());
    let app = crate::router(state).merge(pages(Mount {
        db,
        clock,
        catalog,
        options,
        signal,
    }));
    let stop = async move {
        stop.await;
        let _ = fire.send(true);
    };
    run(listener, app, bounds, stop).await
}

/// What each connection is held to, besides the routes' own guards.
#[derive(Clone, Copy)]
struct Bounds {
    header_read_timeout: Duration,
    /// Only requests addressed to a local name are answered
    /// ([`auth::foreign_name`](crate::auth::foreign_name)): the listener is on
    /// loopback and no token guards it.
    local_names_only: bool,
}

impl Bounds {
    fn new(listener: &TcpListener, options: &ApiOptions) -> Self {
        let loopback = listener
            .local_addr()
            .is_ok_and(|address| address.ip().is_loopback());
        Self {
            header_read_timeout: options.header_read_timeout,
            local_names_only: loopback && options.token.is_none(),
        }
    }
}

/// Accepts connections on `listener` and serves `app` on each (HTTP/1.1) until `stop`
/// completes, then stops accepting and returns once every connection has finished what it was
/// answering. A client that has not sent a request's whole header within
/// `header_read_timeout` (a slow or stalled client) has its connection closed; a request to a
/// loopback server without a token, addressed to a name that is not local, is refused (403
/// `host_refused`).
async fn run(
    listener: TcpListener,
    app: axum::Router,
    bounds: Bounds,
    stop: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let Bounds {
        header_read_timeout,
        local_names_only,
    } = bounds;
    if let Ok(address) = listener.local_addr() {
        tracing::info!(%address, "serving HTTP: the API under /api/v1");
    }
    let connections = GracefulShutdown::new();
    let mut stop = std::pin::pin!(stop);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => stream,
                Err(err) => {
                    // Out of file descriptors, say: wait rather than spin.
                    tracing::warn!("cannot accept an HTTP connection: {err}");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            () = &mut stop => break,
        };
        let app = app.clone();
        // A body that stops arriving for as long as a header may take fails its read, and the
        // request with it: a stalled client holds no connection, nor a shutdown, open.
        let service = hyper::service::service_fn(move |request: Request<Incoming>| {
            let timed = |body| TimeoutBody::new(header_read_timeout, body);
            let request = request.map(|body| axum::body::Body::new(timed(body)));
            let app = app.clone();
            async move {
                if local_names_only && let Some(name) = crate::auth::foreign_name(&request) {
                    return Ok(ApiError::host_refused(&name).into_response());
                }
                app.oneshot(request).await
            }
        });
        let connection = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(header_read_timeout)
            .serve_connection(TokioIo::new(stream), service);
        let connection = connections.watch(connection);
        tokio::spawn(async move {
            if let Err(err) = connection.await {
                tracing::debug!("an HTTP connection ended with an error: {err}");
            }
        });
    }
    drop(listener);
    connections.shutdown().await;
    Ok(())
}

/// How long accepting pauses after an error.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
