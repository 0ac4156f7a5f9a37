//! The HTTP API's rows: the API served on loopback over a bench store (`server::serve_until`,
//! as `stele serve --http` serves it), and a client that keeps its connections (`reqwest`), so
//! that a figure is the server's and the store's time, not a TCP handshake's.
//!
//! - the first page of `GET /api/v1/executions?state=finished&limit=100` on a store holding
//!   the stored-history rows' million finished executions, the median of [`PAGES`] requests
//!   after [`WARM_UP`] untimed ones (in [`crate::history`]);
//! - submit to result over HTTP (`POST /api/v1/executions`, then `GET .../wait`) beside the
//!   same through the library (`node::submit`, then `node::wait_for_result`), one execution at
//!   a time on an idle executor, the two alternating so that both see the same load (in
//!   [`crate::latency`]).

use anyhow::{Context, ensure};
use concepts::DbConnection;
use executor::Now;
use node::Catalog;
use serde_json::{Value, json};
use std::{
    sync::Arc,
    time::{Duration, Instant},
};
use tokio::{sync::oneshot, task::JoinHandle};

/// Untimed requests before the timed ones.
const WARM_UP: usize = 5;
/// Timed requests of the listing row.
pub(crate) const PAGES: usize = 51;

/// The API served on an ephemeral loopback port until [`Served::stop`].
pub(crate) struct Served {
    base: String,
    http: reqwest::Client,
    stop: oneshot::Sender<()>,
    task: JoinHandle<std::io::Result<()>>,
}

impl Served {
    /// Serves the API over `db` with `catalog` (what `POST /executions` accepts).
    pub(crate) async fn start(
        db: Arc<dyn DbConnection>,
        catalog: Arc<Catalog>,
    ) -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}/api/v1", listener.local_addr()?);
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(server::serve_until(
            listener,
            db,
            Now,
            catalog,
            server::ApiOptions::default(),
            async {
                let _ = stopped.await;
            },
        ));
        Ok(Self {
            base,
            http: reqwest::Client::new(),
            stop,
            task,
        })
    }

    async fn answer(request: reqwest::RequestBuilder) -> anyhow::Result<(u16, Value)> {
        let response = request.send().await.context("an HTTP request")?;
        let status = response.status().as_u16();
        Ok((status, response.json().await.context("a JSON answer")?))
    }

    async fn get(&self, path: &str) -> anyhow::Result<(u16, Value)> {
        Self::answer(self.http.get(format!("{}{path}", self.base))).await
    }

    /// Submits one execution of `function` with `params` and waits for its result over HTTP.
    pub(crate) async fn submit_and_wait(
        &self,
        function: &str,
        params: &Value,
    ) -> anyhow::Result<()> {
        let submit = self
            .http
            .post(format!("{}/executions", self.base))
            .json(&json!({"function": function, "params": params}));
        let (status, body) = Self::answer(submit).await?;
        ensure!(status == 201, "POST /executions answered {status}: {body}");
        let id = body["id"].as_str().context("a submitted id")?;
        let (status, body) = self
            .get(&format!("/executions/{id}/wait?timeout=10s"))
            .await?;
        ensure!(
            status == 200,
            "{id} had no result within 10 s over HTTP ({status}): {body}"
        );
        Ok(())
    }

    /// The median time of the first page of finished executions, `limit` rows, which the
    /// store must hold.
    pub(crate) async fn first_page_ms(&self, limit: usize) -> anyhow::Result<f64> {
        let path = format!("/executions?state=finished&limit={limit}");
        let mut samples = Vec::with_capacity(PAGES);
        for n in 0..WARM_UP + PAGES {
            let start = Instant::now();
            let (status, body) = self.get(&path).await?;
            let elapsed = start.elapsed();
            ensure!(status == 200, "GET {path} answered {status}: {body}");
            let rows = body["executions"].as_array().map_or(0, Vec::len);
            ensure!(rows == limit, "GET {path} gave {rows} rows, not {limit}");
            if n >= WARM_UP {
                samples.push(elapsed);
            }
        }
        samples.sort_unstable();
        Ok(samples[samples.len() / 2].as_secs_f64() * 1e3)
    }

    /// Stops serving and waits for the server to finish.
    pub(crate) async fn stop(self) -> anyhow::Result<()> {
        let _ = self.stop.send(());
        tokio::time::timeout(Duration::from_secs(30), self.task)
            .await
            .context("the HTTP server did not stop")???;
        Ok(())
    }
}
