//! `/executions/{id}`: one execution. Its state and pending state in words, parameters and
//! result, the timeline, its join sets with their responses in arrival order (the part that
//! updates itself), the actions, its child tree (a page at a time, each child expandable to
//! its own children) and its events (a page at a time).

use crate::{Shared, Ui, actions, extract::Query, layout, timeline::Timeline};
use axum::{
    extract::Path,
    response::{Html, IntoResponse, Response},
};
use chrono::{DateTime, Utc};
use concepts::{ClockFn, ExecutionId};
use maud::{Markup, html};
use serde::Deserialize;
use server::{
    ApiError,
    listing::{self, Listing},
    types::{
        EventData, EventView, ExecutionView, HistoryView, ListAnswer, ResponseData, ResultView,
        StateData,
    },
    views,
};

/// Events per page of the table.
const EVENTS_PAGE: usize = 200;
/// Children per page of the tree.
const TREE_PAGE: usize = 100;

#[derive(Debug, Default, Deserialize)]
pub(crate) struct PageParams {
    /// The first event of the table's page.
    from: Option<u32>,
}

/// What a page of one execution is made of: its document and its whole log.
pub(crate) struct Read {
    pub(crate) view: ExecutionView,
    pub(crate) events: Vec<EventView>,
}

/// One read of the whole log.
pub(crate) async fn read<C: ClockFn>(ui: &Ui<C>, id: &ExecutionId) -> Result<Read, ApiError> {
    let log = ui
        .db
        .get(id)
        .await
        .map_err(|err| ApiError::db(&format!("cannot read {id}"), id, err))?;
    let view = views::execution(&log).ok_or_else(|| ApiError::no_execution(id))?;
    let events = (0..)
        .zip(&log.events)
        .map(|(version, event)| views::event(version, event))
        .collect();
    Ok(Read { view, events })
}

/// The pending state in words.
fn in_words(state: &StateData, created_at: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let ago =
        |at: DateTime<Utc>| layout::duration(now.signed_duration_since(at).num_milliseconds());
    match state {
        StateData::Parked { reason, since } => format!(
            "Parked{}: {}. It waits because {}.",
            since
                .map(|since| format!(" {} ago", ago(since)))
                .unwrap_or_default(),
            reason
                .as_deref()
                .unwrap_or("its replay diverged from its log"),
            concepts::PARKED_EXPLAINED
        ),
        StateData::Pending { scheduled_at } if *scheduled_at <= now => format!(
            "Due since {} ago, waiting for an executor to lock it.",
            ago(*scheduled_at)
        ),
        StateData::Pending { scheduled_at } => format!(
            "Waiting until {} (in {}): a backoff, a sleep or a schedule.",
            scheduled_at.format("%H:%M:%S%.3f"),
            layout::duration(scheduled_at.signed_duration_since(now).num_milliseconds())
        ),
        StateData::Locked {
            executor_id,
            lock_expires_at,
            ..
        } if *lock_expires_at > now => format!(
            "Running on executor {executor_id}; its lease expires in {}.",
            layout::duration(
                lock_expires_at
                    .signed_duration_since(now)
                    .num_milliseconds()
            )
        ),
        StateData::Locked {
            executor_id,
            lock_expires_at,
            ..
        } => format!(
            "Locked by executor {executor_id}, whose lease expired {} ago: the timers watcher \
             will make it due again.",
            ago(*lock_expires_at)
        ),
        StateData::Blocked {
            join_set_id,
            closing: true,
            ..
        } => format!(
            "Finishing: waiting for the children of join set {join_set_id} it did not await."
        ),
        StateData::Blocked { join_set_id, .. } => {
            format!("Waiting for the next response of join set {join_set_id}.")
        }
        StateData::Finished {
            finished_at,
            result_kind,
            ..
        } => format!(
            "Finished ({result_kind}) {} after it was created, {} ago.",
            layout::duration(
                finished_at
                    .signed_duration_since(created_at)
                    .num_milliseconds()
            ),
            ago(*finished_at)
        ),
    }
}

pub(crate) fn result(result: &ResultView) -> Markup {
    match result {
        ResultView::Ok { value } => html! { span.badge.ok { "ok" } (crate::json::render(value)) },
        ResultView::Error { value } => {
            html! { span.badge.bad { "error" } (crate::json::render(value)) }
        }
        ResultView::Timeout => html! { span.badge.bad { "timed out" } " every attempt timed out" },
        ResultView::UnhandledChildError {
            child_id,
            root_cause_id,
        } => html! {
            span.badge.bad { "unhandled child error" } " child " (layout::execution_link(child_id))
            " failed (root cause " (layout::execution_link(root_cause_id)) ")"
        },
        ResultView::Failed {
            failure,
            reason,
            detail,
        } => html! {
            span.badge.bad { "failed" } " " (failure) ": " (crate::json::text(reason))
            @if let Some(detail) = detail { pre.detail { (crate::json::text(detail)) } }
        },
        ResultView::Cancelled { reason } => {
            html! { span.badge.bad { "cancelled" } " " (crate::json::text(reason)) }
        }
    }
}

/// The part of the page that updates itself: state, timeline, join sets.
pub(crate) fn live(read: &Read, now: DateTime<Utc>) -> Markup {
    let view = &read.view;
    let to = match &view.state.data {
        StateData::Finished { finished_at, .. } => *finished_at,
        _ => now,
    };
    let timeline = Timeline::of(&read.events, &view.responses, now);
    let finished = matches!(view.state.data, StateData::Finished { .. });
    html! {
        section #live-execution data-finished[finished] {
            dl.facts {
                dt { "State" } dd #state { (layout::badge(&view.state)) }
                dt { "In words" } dd #pending { (in_words(&view.state.data, view.created_at, now)) }
                @if let Some(status) = &view.status {
                    dt { "Status" } dd #status { (crate::json::render(status)) }
                }
                dt { "Result" } dd #result {
                    @match &view.result { Some(found) => (result(found)), None => span.none { "not finished" } }
                }
                dt { "Events" } dd { (view.events) }
            }
            h2 { "Timeline" }
            (timeline.render(view.created_at, to))
            (join_sets(read))
        }
    }
}

/// Each join set, its requests in order and its responses in arrival order.
fn join_sets(read: &Read) -> Markup {
    let mut sets: Vec<(&str, usize, Vec<&ResponseData>)> = Vec::new();
    for event in &read.events {
        if let EventData::History { step } = &event.event {
            let (id, request) = match step {
                HistoryView::JoinSetCreate { join_set_id } => (join_set_id, false),
                HistoryView::ChildRequest { join_set_id, .. }
                | HistoryView::DelayRequest { join_set_id, .. } => (join_set_id, true),
                _ => continue,
            };
            match sets.iter_mut().find(|(name, ..)| *name == id.as_str()) {
                Some(set) => set.1 += usize::from(request),
                None => sets.push((id, usize::from(request), Vec::new())),
            }
        }
    }
    if sets.is_empty() {
        return html! {};
    }
    for response in &read.view.responses {
        if let Some(set) = sets
            .iter_mut()
            .find(|(name, ..)| *name == response.join_set_id)
        {
            set.2.push(&response.response);
        }
    }
    html! {
        h2 { "Join sets" }
        @for (name, requests, responses) in &sets {
            details.joinset open[responses.len() <= 20] {
                summary { code { (name) } ": " (requests) " requests, " (responses.len()) " responses" }
                ol.responses {
                    @for response in responses.iter().take(1000) {
                        li {
                            @match response {
                                ResponseData::DelayFinished { delay_id } => { "sleep " code { (delay_id) } " finished" }
                                ResponseData::ChildFinished { child_id, result: found } => {
                                    (layout::execution_link(child_id)) " "
                                    @match found { ResultView::Ok { .. } => span.badge.ok { "ok" }, _ => span.badge.bad { "not ok" } }
                                }
                            }
                        }
                    }
                    @if responses.len() > 1000 { li.cut { "… " (responses.len() - 1000) " more" } }
                }
            }
        }
    }
}

fn event_row(event: &EventView) -> Markup {
    let (kind, detail): (&str, Markup) = match &event.event {
        EventData::Created {
            function,
            scheduled_at,
            ..
        } => (
            "created",
            html! { code { (function) } ", scheduled at " (layout::time(*scheduled_at)) },
        ),
        EventData::Locked {
            executor_id,
            run_id,
            lock_expires_at,
            ..
        } => (
            "locked",
            html! { "by " code { (executor_id) } ", run " code { (run_id) } ", lease until " (layout::time(*lock_expires_at)) },
        ),
        EventData::Unlocked {
            backoff_expires_at,
            reason,
        } => (
            "unlocked",
            html! {
                (crate::json::text(reason))
                @if *backoff_expires_at == concepts::PARKED_UNTIL { "; parked until code agrees with its log" }
                @else { ", due again at " (layout::time(*backoff_expires_at)) }
            },
        ),
        EventData::TemporarilyFailed {
            backoff_expires_at,
            reason,
            ..
        } => (
            "temporarily failed",
            html! { (crate::json::cut(reason, 500).0) "; retried at " (layout::time(*backoff_expires_at)) },
        ),
        EventData::TemporarilyTimedOut { backoff_expires_at } => (
            "temporarily timed out",
            html! { "retried at " (layout::time(*backoff_expires_at)) },
        ),
        EventData::Finished { result: found } => ("finished", result(found)),
        EventData::History { step } => match step {
            HistoryView::Persist { value } => ("persisted", crate::json::render(value)),
            HistoryView::JoinSetCreate { join_set_id } => {
                ("join set created", html! { code { (join_set_id) } })
            }
            HistoryView::ChildRequest {
                join_set_id,
                child_id,
            } => (
                "child requested",
                html! { (layout::execution_link(child_id)) " in " code { (join_set_id) } },
            ),
            HistoryView::DelayRequest {
                join_set_id,
                delay_id,
                expires_at,
            } => (
                "sleep requested",
                html! { code { (delay_id) } " in " code { (join_set_id) } " until " (layout::time(*expires_at)) },
            ),
            HistoryView::JoinNext {
                join_set_id,
                closing,
                ..
            } => (
                "awaits next",
                html! { code { (join_set_id) } @if *closing { " (closing)" } },
            ),
            HistoryView::Schedule { id, scheduled_at } => (
                "scheduled",
                html! { (layout::execution_link(id)) " at " (layout::time(*scheduled_at)) },
            ),
        },
    };
    html! { tr { td.num { (event.version) } td { (layout::time(event.created_at)) } td { (kind) } td { (detail) } } }
}

fn events(read: &Read, from: u32) -> Markup {
    let id = layout::url_encode(&read.view.id);
    let start = usize::try_from(from)
        .unwrap_or(usize::MAX)
        .min(read.events.len());
    let page = &read.events[start..(start + EVENTS_PAGE).min(read.events.len())];
    let more = start + page.len() < read.events.len();
    html! {
        h2 #events { "Events" }
        table.events {
            thead { tr { th { "#" } th { "At (UTC)" } th { "Event" } th { "Detail" } } }
            tbody { @for event in page { (event_row(event)) } }
        }
        nav.pages {
            @if start > 0 { a href={ "/executions/" (id) "?from=" (start.saturating_sub(EVENTS_PAGE)) "#events" } { "Earlier events" } }
            @if more { a.next href={ "/executions/" (id) "?from=" (start + EVENTS_PAGE) "#events" } { "Later events" } }
        }
    }
}

/// A page of `parent`'s children.
pub(crate) async fn children<C: ClockFn>(
    ui: &Ui<C>,
    parent: &ExecutionId,
    cursor: Option<String>,
) -> Result<ListAnswer, ApiError> {
    let listing = Listing::children(parent.clone(), cursor, Some(TREE_PAGE))?;
    listing::page(ui.db.as_ref(), listing).await
}

/// A page of `parent`'s children as tree items, with the way to the next page.
fn tree_items(parent: &str, page: &ListAnswer) -> Markup {
    let parent_path = layout::url_encode(parent);
    html! {
        @for child in &page.executions {
            li {
                details.child data-tree={ "/executions/" (layout::url_encode(&child.id)) "/tree" } {
                    summary { (layout::badge(&child.state)) " " (layout::execution_link(&child.id)) " " code.fn { (child.function) } }
                    ul.tree {}
                }
            }
        }
        @if page.executions.is_empty() { li.empty { "no children" } }
        @if let Some(cursor) = &page.next_cursor {
            li.more {
                a data-more={ "/executions/" (parent_path) "/tree?" (layout::query(&[("cursor", Some(cursor))])) }
                  href={ "/executions?" (layout::query(&[("parent", Some(parent)), ("cursor", Some(cursor))])) } { "More children" }
            }
        }
    }
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct TreeParams {
    cursor: Option<String>,
}

/// `/executions/{id}/tree`: a page of its children as tree items (an HTML fragment).
pub(crate) async fn tree<C: ClockFn>(
    axum::extract::State(ui): Shared<C>,
    Path(text): Path<String>,
    Query(params): Query<TreeParams>,
) -> Response {
    let page = match server::parse_id(&text) {
        Ok(parent) => children(&ui, &parent, params.cursor).await,
        Err(err) => Err(err),
    };
    match page {
        Ok(page) => Html(tree_items(&text, &page).into_string()).into_response(),
        Err(err) => layout::api_error(&err),
    }
}

pub(crate) async fn page<C: ClockFn>(
    axum::extract::State(ui): Shared<C>,
    Path(text): Path<String>,
    Query(params): Query<PageParams>,
) -> Response {
    let id = match server::parse_id(&text) {
        Ok(id) => id,
        Err(err) => return layout::api_error(&err),
    };
    let read = match read(&ui, &id).await {
        Ok(read) => read,
        Err(err) => return layout::api_error(&err),
    };
    let children = match children(&ui, &id, None).await {
        Ok(children) => children,
        Err(err) => return layout::api_error(&err),
    };
    let now = ui.clock.now();
    render(&ui, &read, &children, params.from.unwrap_or(0), now, None).into_response()
}

/// The whole page; `message` answers an action taken without the script.
pub(crate) fn render<C: ClockFn>(
    ui: &Ui<C>,
    read: &Read,
    children: &ListAnswer,
    from: u32,
    now: DateTime<Utc>,
    message: Option<Markup>,
) -> Html<String> {
    let view = &read.view;
    let id = layout::url_encode(&view.id);
    let body = html! {
        p.crumbs {
            a href="/executions" { "Executions" } " › "
            @if let Some(parent) = &view.parent {
                "child of " a.parent href={ "/executions/" (layout::url_encode(&parent.id)) } { code { (parent.id) } } " (join set " code { (parent.join_set_id) } ") › "
            }
        }
        h1 { code.id { (view.id) } }
        p.function { code { (view.function) } " · component " code { (view.component) } " · created " (layout::time(view.created_at))
            " · up to " (view.max_retries) " retries, backoff from " (layout::duration(i64::try_from(view.retry_exp_backoff_ms).unwrap_or(i64::MAX))) }
        @if let Some(message) = message { (message) }
        div data-live={ "/live?execution=" (id) } { (live(read, now)) }
        (actions::forms(ui, view, &children.executions))
        h2 { "Parameters" }
        (crate::json::render(&view.params))
        @if !view.metadata.is_empty() {
            h2 { "Metadata" }
            dl.facts { @for (key, value) in &view.metadata { dt { (crate::json::text(key)) } dd { (crate::json::text(value)) } } }
        }
        h2 { "Children" }
        ul.tree #children { (tree_items(&view.id, children)) }
        p { a href={ "/executions?parent=" (id) } { "All children as a list" } }
        (events(read, from))
    };
    layout::page(&view.id, body)
}
