//! Live updates: `/live` streams the parts of a page that change, as server-sent events.
//!
//! A topic is an execution (its state, timeline and join sets) or the first page of a list
//! (its rows). The first tab that opens a topic starts its one task; the task reads the
//! store once per interval while any tab listens (for an execution, whether its log has an
//! event past the last one rendered, one indexed read; for a list, the rows of its page),
//! renders what changed once and sends it to every tab on the topic, and ends with the last
//! tab or the node's shutdown. An execution's whole log is read again when it has a new event
//! and, while it is unfinished, every [`REFRESH`] (its words and its responses, which are not
//! events, stay current). A tab that opens a topic already watched gets the last rendering
//! without a read.

use crate::{
    Shared, Ui,
    extract::Query,
    pages::{execution, list},
};
use axum::{
    http::Uri,
    response::{
        IntoResponse, Response,
        sse::{Event, KeepAlive, Sse},
    },
};
use concepts::{ClockFn, ExecutionId, Version};
use futures_util::stream;
use node::ShutdownSignal;
use serde::{Deserialize, Serialize};
use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};
use tokio::sync::broadcast;

/// An unfinished execution's part is read and rendered again at least this often, so that its
/// words ("its lease expires in 4 s") stay true and the responses to its join sets (stored
/// beside its log, not as events) appear.
const REFRESH: Duration = Duration::from_secs(5);

/// What a tab watches.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Topic {
    Execution(ExecutionId),
    /// The filters' query string of a list's first page.
    List(String),
}

/// One rendering: the element it replaces and its HTML.
#[derive(Debug, Serialize)]
struct Update {
    target: &'static str,
    html: String,
}

struct Watched {
    sender: broadcast::Sender<Arc<str>>,
    last: Mutex<Option<Arc<str>>>,
}

/// The topics watched, each by one task.
pub(crate) struct Hub {
    interval: Duration,
    signal: ShutdownSignal,
    topics: Mutex<HashMap<Topic, Arc<Watched>>>,
}

impl Hub {
    pub(crate) fn new(interval: Duration, signal: ShutdownSignal) -> Self {
        Self {
            interval,
            signal,
            topics: Mutex::new(HashMap::new()),
        }
    }

    /// The receiver of `topic`'s renderings and its last one; `true` when the topic is new
    /// and its task must be started.
    fn subscribe(&self, topic: &Topic) -> (Arc<Watched>, broadcast::Receiver<Arc<str>>, bool) {
        let mut topics = self
            .topics
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(watched) = topics.get(topic) {
            return (watched.clone(), watched.sender.subscribe(), false);
        }
        let (sender, receiver) = broadcast::channel(16);
        let watched = Arc::new(Watched {
            sender,
            last: Mutex::new(None),
        });
        topics.insert(topic.clone(), watched.clone());
        (watched, receiver, true)
    }

    /// Forgets `topic` when no tab listens any more; `true` when it was forgotten.
    fn release(&self, topic: &Topic, watched: &Arc<Watched>) -> bool {
        let mut topics = self
            .topics
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if watched.sender.receiver_count() > 0 {
            return false;
        }
        if topics
            .get(topic)
            .is_some_and(|current| Arc::ptr_eq(current, watched))
        {
            topics.remove(topic);
        }
        true
    }
}

fn encode(target: &'static str, html: String) -> Option<Arc<str>> {
    serde_json::to_string(&Update { target, html })
        .ok()
        .map(Arc::from)
}

/// What the task keeps between reads.
#[derive(Default)]
struct Seen {
    /// Events of the execution rendered last.
    events: Option<u32>,
    rendered_at: Option<Instant>,
    finished: bool,
    /// The list's rows rendered last: id, version, state.
    rows: Option<Vec<(String, u32, String)>>,
}

async fn render<C: ClockFn>(ui: &Ui<C>, topic: &Topic, seen: &mut Seen) -> Option<Arc<str>> {
    match topic {
        Topic::Execution(id) => {
            if let Some(known) = seen.events {
                let stale =
                    !seen.finished && seen.rendered_at.is_none_or(|at| at.elapsed() >= REFRESH);
                let newer = ui.db.list_events(id, Version(known), 1).await.ok()?;
                if newer.is_empty() && !stale {
                    return None;
                }
            }
            let read = execution::read(ui, id).await.ok()?;
            seen.events = Some(read.view.events);
            seen.rendered_at = Some(Instant::now());
            seen.finished = read.view.result.is_some();
            encode(
                "live-execution",
                execution::live(&read, ui.clock.now()).into_string(),
            )
        }
        Topic::List(query) => {
            let uri: Uri = format!("/?{query}").parse().ok()?;
            let axum::extract::Query(params) =
                axum::extract::Query::<list::ListParams>::try_from_uri(&uri).ok()?;
            let page = server::listing::page(ui.db.as_ref(), params.listing().ok()?)
                .await
                .ok()?;
            let rows: Vec<_> = page
                .executions
                .iter()
                .map(|row| (row.id.clone(), row.next_version, row.state.summary.clone()))
                .collect();
            if seen.rows.as_ref() == Some(&rows) {
                return None;
            }
            seen.rows = Some(rows);
            encode("live-rows", list::rows(&page, ui.clock.now()).into_string())
        }
    }
}

/// The task of one topic: reads, renders and sends while a tab listens.
async fn watch<C: ClockFn>(ui: Arc<Ui<C>>, topic: Topic, watched: Arc<Watched>) {
    let mut seen = Seen::default();
    let mut first = true;
    loop {
        if !first {
            tokio::select! {
                () = tokio::time::sleep(ui.live.interval) => {}
                () = ui.live.signal.clone().fired() => break,
            }
        }
        first = false;
        if watched.sender.receiver_count() == 0 && ui.live.release(&topic, &watched) {
            return;
        }
        if let Some(update) = render(&ui, &topic, &mut seen).await {
            *watched
                .last
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(update.clone());
            let _ = watched.sender.send(update);
        }
    }
    ui.live.release(&topic, &watched);
}

#[derive(Debug, Deserialize)]
pub(crate) struct LiveParams {
    execution: Option<String>,
    list: Option<String>,
}

/// `/live?execution=ID` or `/live?list=QUERY`: the topic's renderings as `update` events.
pub(crate) async fn stream<C: ClockFn>(
    axum::extract::State(ui): Shared<C>,
    Query(params): Query<LiveParams>,
) -> Response {
    let topic = match (params.execution, params.list) {
        (Some(id), None) => match server::parse_id(&id) {
            Ok(id) => Topic::Execution(id),
            Err(err) => return crate::layout::api_error(&err),
        },
        (None, Some(query)) => Topic::List(query),
        _ => {
            return crate::layout::error_page(
                axum::http::StatusCode::BAD_REQUEST,
                "Bad request",
                "name one topic: /live?execution=ID or /live?list=QUERY",
            );
        }
    };
    let (watched, receiver, new) = ui.live.subscribe(&topic);
    if new {
        tokio::spawn(watch(ui.clone(), topic, watched.clone()));
    }
    let last = watched
        .last
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    let signal = ui.live.signal.clone();
    let updates = stream::unfold(
        (last, receiver, signal),
        |(last, mut receiver, signal)| async move {
            if let Some(update) = last {
                return Some((update, (None, receiver, signal)));
            }
            loop {
                let next = tokio::select! {
                    next = receiver.recv() => next,
                    () = signal.clone().fired() => return None,
                };
                match next {
                    Ok(update) => return Some((update, (None, receiver, signal))),
                    Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        },
    );
    let events = futures_util::StreamExt::map(updates, |update| {
        Ok::<_, std::convert::Infallible>(Event::default().event("update").data(&*update))
    });
    Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response()
}
