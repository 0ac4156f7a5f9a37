//! The web UI in a real browser: headless Chromium, driven over WebDriver (Debian's
//! `chromedriver`), against the pages of a real `stele serve --http` running the demo's
//! functions on SQLite and on PostgreSQL. One journey per backend: the overview, the list
//! filtered by state, a `fanout` workflow's child tree expanded and a child followed back to
//! its parent, a long `sleeper` cancelled with the button and its state changing without a
//! reload, an `approval` promise answered through the form and the workflow finishing, and a
//! `<script>` parameter that does not run. Each step saves a screenshot under the target
//! directory (`target/tmp/ui-screenshots`).
//!
//! Without `chromedriver` the tests say they were skipped and why; under `CI=true` they fail.

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};
use std::{
    net::TcpListener,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};
use test_support::postgres::{TestDatabase, TestServer};

/// The longest a step may take before the test fails.
const SAFETY: Duration = Duration::from_secs(60);

/// What a page's script writes if an injected value ever runs.
const HOSTILE: &str =
    "<script>window.__pwned = 1</script>\"><img src=x onerror=\"window.__pwned = 2\">";

fn stele(args: &[&str]) -> Command {
    test_support::process::clean_command(env!("CARGO_BIN_EXE_stele"), args)
}

/// `stele --db DB submit FUNCTION PARAMS`: the new execution's id.
fn submit(db: &str, function: &str, params: &Value) -> String {
    let output = stele(&[
        "--db",
        db,
        "submit",
        function,
        "--params",
        &params.to_string(),
    ])
    .output()
    .expect("run stele submit");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let line = String::from_utf8(output.stdout).expect("utf-8");
    let (id, rest) = line.split_once(' ').expect("an id and a word");
    assert_eq!(rest, "created\n", "{line:?}");
    id.to_string()
}

/// `stele executions wait ID`.
fn wait(db: &str, id: &str) {
    let output = stele(&["--db", db, "executions", "wait", id, "--timeout", "60s"])
        .output()
        .expect("run stele executions wait");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// `stele serve --http 127.0.0.1:0` on `db`, killed when dropped.
struct Served {
    child: Child,
    base: String,
}

impl Served {
    fn start(db: &str) -> Self {
        let mut child = stele(&[
            "--db",
            db,
            "serve",
            "--http",
            "127.0.0.1:0",
            "--concurrency",
            "8",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start stele serve");
        let lines = test_support::process::read_lines(child.stderr.take().expect("stderr"));
        let first = lines
            .recv_timeout(SAFETY)
            .expect("serve says what it serves");
        let (_, rest) = first
            .split_once("the web UI on http://")
            .unwrap_or_else(|| panic!("{first}"));
        let (address, _) = rest.split_once('/').unwrap_or_else(|| panic!("{first}"));
        Self {
            child,
            base: format!("http://{address}"),
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `chromedriver` on a free port, killed when dropped.
struct Driver {
    child: Child,
    url: String,
}

/// Where the browser and its driver are: `STELE_CHROMEDRIVER` and `STELE_CHROMIUM`, else
/// Debian's paths.
fn programs() -> (PathBuf, PathBuf) {
    let path = |var: &str, default: &str| {
        std::env::var_os(var).map_or_else(|| PathBuf::from(default), PathBuf::from)
    };
    (
        path("STELE_CHROMEDRIVER", "/usr/bin/chromedriver"),
        path("STELE_CHROMIUM", "/usr/bin/chromium"),
    )
}

impl Driver {
    /// The driver, or `None` once `test` is skipped because the browser is not installed.
    fn or_skip(test: &str) -> Option<(Self, PathBuf)> {
        let (driver, browser) = programs();
        if let Some(missing) = [&driver, &browser].into_iter().find(|path| !path.exists()) {
            let reason = test_utils::skip_reason(
                format!("{} is not installed", missing.display()),
                "install Debian's chromium and chromium-driver packages (.ci/run does), or name \
                 them in STELE_CHROMIUM and STELE_CHROMEDRIVER",
            );
            test_utils::skip(test, &reason);
            return None;
        }
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free port")
            .port();
        let child = Command::new(&driver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|err| panic!("start {}: {err}", driver.display()));
        let deadline = Instant::now() + SAFETY;
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "chromedriver did not listen on {port}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Some((
            Self {
                child,
                url: format!("http://127.0.0.1:{port}"),
            },
            browser,
        ))
    }

    async fn session(&self, browser: &Path, profile: &Path) -> Client {
        let mut capabilities = serde_json::Map::new();
        capabilities.insert(
            "goog:chromeOptions".to_string(),
            json!({
                "binary": browser,
                "args": [
                    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                    "--no-first-run", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
                    "--window-size=1280,1400",
                    format!("--user-data-dir={}", profile.display()),
                ],
            }),
        );
        ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(capabilities)
            .connect(&self.url)
            .await
            .expect("a WebDriver session")
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The browser on one node's pages, saving screenshots as it goes.
struct Journey {
    client: Client,
    base: String,
    shots: PathBuf,
    backend: &'static str,
}

impl Journey {
    async fn open(&self, path: &str) {
        self.client
            .goto(&format!("{}{path}", self.base))
            .await
            .unwrap_or_else(|err| panic!("open {path}: {err}"));
    }

    async fn shot(&self, step: &str) {
        let png = self.client.screenshot().await.expect("a screenshot");
        let path = self.shots.join(format!("{}-{step}.png", self.backend));
        std::fs::write(&path, png).unwrap_or_else(|err| panic!("write {}: {err}", path.display()));
    }

    async fn text(&self, css: &str) -> String {
        self.client
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|err| panic!("find {css}: {err}"))
            .text()
            .await
            .expect("its text")
    }

    async fn click(&self, css: &str) {
        self.client
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|err| panic!("find {css}: {err}"))
            .click()
            .await
            .unwrap_or_else(|err| panic!("click {css}: {err}"));
    }

    /// Waits until `css` matches an element whose text contains `text`; fails with what the
    /// element said instead and a screenshot (`<backend>-failed.png`).
    async fn until_text(&self, css: &str, text: &str) {
        let deadline = Instant::now() + SAFETY;
        loop {
            let found = match self.client.find(Locator::Css(css)).await {
                Ok(element) => element.text().await.ok(),
                Err(_) => None,
            };
            if found.as_deref().is_some_and(|found| found.contains(text)) {
                return;
            }
            if Instant::now() >= deadline {
                self.shot("failed").await;
                panic!("no {css} with {text:?} in time; it says {found:?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until the page shown is `path` (a click's navigation has happened).
    async fn until_path(&self, path: &str) {
        let deadline = Instant::now() + SAFETY;
        loop {
            let url = self.client.current_url().await.expect("a URL");
            if url.path() == path {
                return;
            }
            assert!(Instant::now() < deadline, "never at {path}: {url}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn script(&self, script: &str) -> Value {
        self.client
            .execute(script, vec![])
            .await
            .expect("the script runs")
    }
}

async fn journey(backend: &'static str, db: &str, test: &str) {
    let Some((driver, browser)) = Driver::or_skip(test) else {
        return;
    };
    let served = Served::start(db);
    let fanout = submit(
        db,
        "stele:demo/workflows.fanout",
        &json!({"children": 3, "fail_probability": 0, "work_ms": 10}),
    );
    let sleeper = submit(
        db,
        "stele:demo/workflows.sleeper",
        &json!({"sleep_ms": 600_000}),
    );
    let approval = submit(
        db,
        "stele:demo/workflows.approval",
        &json!({"subject": HOSTILE}),
    );
    wait(db, &fanout);

    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ui-screenshots");
    std::fs::create_dir_all(&shots).expect("the screenshots' directory");
    let profile = tempfile::tempdir().expect("a browser profile");
    let client = driver.session(&browser, profile.path()).await;
    let journey = Journey {
        client,
        base: served.base.clone(),
        shots,
        backend,
    };

    // The overview: a row per function the node runs.
    journey.open("/").await;
    assert_eq!(journey.text("h1").await, "Overview");
    journey
        .until_text("table.overview", "stele:demo/workflows.fanout")
        .await;
    journey.shot("overview").await;

    // The list, filtered by state through the form: the filter is kept in the URL, and every
    // row is finished.
    journey.open("/executions").await;
    journey
        .client
        .find(Locator::Css("select[name=state]"))
        .await
        .expect("the state filter")
        .select_by_value("finished")
        .await
        .expect("select finished");
    journey.click("form.filters button[type=submit]").await;
    // The form's GET navigates: wait for the filtered page, whose URL keeps the filter.
    let deadline = Instant::now() + SAFETY;
    loop {
        let url = journey.client.current_url().await.expect("a URL");
        if url
            .query()
            .is_some_and(|query| query.contains("state=finished"))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the filter never reached the URL: {url}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Every row of the filtered page is finished (read until the new page is the one shown).
    let deadline = Instant::now() + SAFETY;
    loop {
        let states = journey
            .script(
                "return [...document.querySelectorAll('#live-rows .badge')].map(b => b.dataset.state)",
            )
            .await;
        let states = states.as_array().cloned().unwrap_or_default();
        if states.len() >= 4 && states.iter().all(|state| state == "finished") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the fanout and its children, all finished: {states:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    journey.shot("list-finished").await;

    // The fanout's child tree: a child expands (to its own children: none), its page leads
    // back to the parent.
    journey.open(&format!("/executions/{fanout}")).await;
    let children = journey
        .script("return document.querySelectorAll('#children > li > details.child').length")
        .await;
    assert_eq!(children, json!(3), "three children in the tree");
    journey
        .click("#children > li:first-child > details.child > summary")
        .await;
    journey
        .until_text("#children > li:first-child ul.tree li.empty", "no children")
        .await;
    journey.shot("fanout-tree").await;
    journey
        .click("#children > li:first-child > details.child > summary a.id")
        .await;
    journey.until_text("p.crumbs", "child of").await;
    let child_url = journey.client.current_url().await.expect("a URL");
    assert!(
        child_url
            .path()
            .contains(&format!("{fanout}.n%3Achildren_"))
            || child_url.path().contains(&format!("{fanout}.n:children_")),
        "{child_url}"
    );
    journey.shot("child").await;
    journey.click("p.crumbs a.parent").await;
    journey.until_path(&format!("/executions/{fanout}")).await;
    journey.until_text("#children", "children_1").await;

    // The sleeper, cancelled with the button: the answer and the new state arrive in the
    // page, which is not reloaded (a mark set on the window survives).
    journey.open(&format!("/executions/{sleeper}")).await;
    journey
        .script("window.__same_page = true; return null")
        .await;
    journey
        .click("section.actions details.action:first-of-type > summary")
        .await;
    journey
        .click("section.actions details.action:first-of-type button.confirm")
        .await;
    journey
        .until_text("#action-answer", &format!("cancelled {sleeper}"))
        .await;
    journey.until_text("#state", "cancelled").await;
    assert_eq!(
        journey.script("return window.__same_page === true").await,
        json!(true),
        "the page was reloaded"
    );
    journey.shot("sleeper-cancelled").await;

    // The approval: once its promise exists the page offers the form; the answer finishes
    // the workflow, seen live. Its subject, markup, is shown as text and never runs.
    let deadline = Instant::now() + SAFETY;
    loop {
        journey.open(&format!("/executions/{approval}")).await;
        let forms = journey
            .script("return document.querySelectorAll('form[action$=\"/complete\"]').length")
            .await;
        if forms == json!(1) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the approval's promise never showed its form"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(journey.script("return window.__pwned === undefined && document.querySelectorAll('main img, main script').length === 0").await, json!(true), "an injected value ran");
    assert!(
        journey.text(".json").await.contains(HOSTILE),
        "the subject is shown as text"
    );
    journey.shot("approval-hostile-subject").await;
    let complete = "section.actions details.action:has(form[action$=\"/complete\"])";
    journey.click(&format!("{complete} > summary")).await;
    journey.click(&format!("{complete} button.confirm")).await;
    journey.until_text("#action-answer", "has its answer").await;
    journey.until_text("#state", "finished: ok").await;
    journey.until_text("#result", "true").await;
    assert_eq!(
        journey.script("return window.__pwned === undefined").await,
        json!(true)
    );
    journey.shot("approval-answered").await;

    // A schedule: listed, its ticks fired by the node and shown with their executions' states,
    // paused through its form (answered in place), its page then saying so.
    let created = stele(&[
        "--db",
        db,
        "schedules",
        "create",
        "ui-heartbeat",
        "stele:demo/activities.flaky",
        "--every",
        "1s",
        "--params",
        r#"{"fail_probability":0,"work_ms":10}"#,
    ])
    .output()
    .expect("run stele schedules create");
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    journey.open("/schedules").await;
    journey.until_text("table.list", "every 1s (UTC)").await;
    journey
        .click("table.list a[href='/schedules/ui-heartbeat']")
        .await;
    journey.until_path("/schedules/ui-heartbeat").await;
    let deadline = Instant::now() + SAFETY;
    loop {
        let finished = journey
            .script("return document.querySelectorAll('table.ticks .badge[data-state=finished]').length")
            .await;
        if finished.as_u64().is_some_and(|n| n >= 2) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "two ticks ran and show as finished"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        journey.open("/schedules/ui-heartbeat").await;
    }
    journey.shot("schedule").await;
    journey
        .click("section.actions details.action:first-of-type > summary")
        .await;
    journey
        .click("section.actions details.action:first-of-type button.confirm")
        .await;
    journey
        .until_text("#action-answer", "schedule ui-heartbeat changed")
        .await;
    journey.open("/schedules/ui-heartbeat").await;
    journey.until_text("h1", "paused").await;
    journey.shot("schedule-paused").await;

    journey.client.close().await.expect("close the session");
    drop(served);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_pages_work_in_a_browser_on_sqlite() {
    let dir = tempfile::tempdir().expect("a directory");
    let db = dir.path().join("ui.db");
    journey(
        "sqlite",
        db.to_str().expect("utf-8"),
        "the_pages_work_in_a_browser_on_sqlite",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_pages_work_in_a_browser_on_postgres() {
    let test = "the_pages_work_in_a_browser_on_postgres";
    let Some(server) = TestServer::or_skip(test) else {
        return;
    };
    let database = TestDatabase::create(&server).await;
    journey("postgres", &database.url, test).await;
}
