//! The HTTP rows: the API and the web UI served on loopback over a bench store
//! (`server::serve_until_with` and `ui::router`, as `stele serve --http` serves them), and a client that keeps its
//! connections (`reqwest`), so that a figure is the server's and the store's time, not a TCP
//! handshake's.
//!
//! - the first page of `GET /api/v1/executions?state=finished&limit=100`, and the UI's list
//!   page `GET /executions?state=finished` (its first page of 100), on a store holding the
//!   stored-history rows' million finished executions, each the median of [`PAGES`] requests
//!   after [`WARM_UP`] untimed ones (in [`crate::history`]);
//! - the UI's page of one execution (`GET /executions/{id}`) on the same store, of an
//!   execution with a 20,000-event log and of a parent of 10,000 finished children, each the
//!   median of [`EXECUTION_PAGES`] requests after one untimed one (in [`crate::pages`]);
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
/// Timed requests of the listing rows.
pub(crate) const PAGES: usize = 51;
/// Timed requests of an execution page's row (after one untimed one).
pub(crate) const EXECUTION_PAGES: usize = 11;

/// The API and the UI served on an ephemeral loopback port until [`Served::stop`].
pub(crate) struct Served {
    /// `http://127.0.0.1:PORT`: the UI's pages, and the API under `/api/v1`.
    root: String,
    http: reqwest::Client,
    stop: oneshot::Sender<()>,
    task: JoinHandle<std::io::Result<()>>,
}

impl Served {
    /// Serves the API and the UI over `db` with `catalog` (what `POST /executions` accepts).
    pub(crate) async fn start(
        db: Arc<dyn DbConnection>,
        catalog: Arc<Catalog>,
    ) -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let root = format!("http://{}", listener.local_addr()?);
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(server::serve_until_with(
            listener,
            db,
            Now,
            catalog,
            server::ApiOptions::default(),
            async {
                let _ = stopped.await;
            },
            |mount| ui::router(mount, ui::UiOptions::default()),
        ));
        Ok(Self {
            root,
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
        Self::answer(self.http.get(format!("{}/api/v1{path}", self.root))).await
    }

    /// Submits one execution of `function` with `params` and waits for its result over HTTP.
    pub(crate) async fn submit_and_wait(
        &self,
        function: &str,
        params: &Value,
    ) -> anyhow::Result<()> {
        let submit = self
            .http
            .post(format!("{}/api/v1/executions", self.root))
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

    /// A UI page (`path` from the root): its status and its HTML.
    async fn html(&self, path: &str) -> anyhow::Result<(u16, String)> {
        let response = self
            .http
            .get(format!("{}{path}", self.root))
            .send()
            .await
            .context("an HTTP request")?;
        let status = response.status().as_u16();
        Ok((status, response.text().await.context("an HTML answer")?))
    }

    /// The median time of `samples` requests of the UI page `path` after `warm_up` untimed
    /// ones; each must answer 200 with a page that `check` accepts (or the reason it does
    /// not).
    pub(crate) async fn html_ms(
        &self,
        path: &str,
        warm_up: usize,
        samples: usize,
        check: impl Fn(&str) -> Result<(), String>,
    ) -> anyhow::Result<f64> {
        let mut timed = Vec::with_capacity(samples);
        for n in 0..warm_up + samples {
            let start = Instant::now();
            let (status, body) = self.html(path).await?;
            let elapsed = start.elapsed();
            ensure!(status == 200, "GET {path} answered {status}");
            if let Err(why) = check(&body) {
                anyhow::bail!("GET {path}: {why}");
            }
            if n >= warm_up {
                timed.push(elapsed);
            }
        }
        timed.sort_unstable();
        Ok(timed[timed.len() / 2].as_secs_f64() * 1e3)
    }

    /// The median time of the UI's list page of finished executions (its first page), which
    /// must show `rows` executions.
    pub(crate) async fn list_page_ms(&self, rows: usize) -> anyhow::Result<f64> {
        self.html_ms("/executions?state=finished", WARM_UP, PAGES, |body| {
            let shown = body.matches("<a class=\"id\" href=\"/executions/").count();
            if shown == rows {
                Ok(())
            } else {
                Err(format!("the page shows {shown} executions, not {rows}"))
            }
        })
        .await
    }

    /// The median time of the UI's page of execution `id`, after one untimed request; the
    /// page must name it and hold `needle`.
    pub(crate) async fn execution_page_ms(&self, id: &str, needle: &str) -> anyhow::Result<f64> {
        self.html_ms(&format!("/executions/{id}"), 1, EXECUTION_PAGES, |body| {
            if !body.contains(id) {
                Err(format!("the page does not name {id}"))
            } else if !body.contains(needle) {
                Err(format!("the page has no `{needle}`"))
            } else {
                Ok(())
            }
        })
        .await
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
