//! `/schedules`: every schedule with its state, spec, function, runs and next tick; and
//! `/schedules/{name}`: its definition, its next fire times and its last ticks with their
//! executions as badges, and the actions (pause with a note, resume, trigger now), each a
//! `POST` behind a confirmation with the page's form token, answered with the sentence the
//! `stele` command prints. A read-only node shows no action and refuses them.

use crate::{Shared, Ui, actions, extract::Form, layout};
use axum::{
    extract::Path,
    http::{HeaderMap, StatusCode},
    response::{Html, IntoResponse, Response},
};
use concepts::{
    ClockFn, DbError,
    schedule::{
        ChangeScheduleRequest, ScheduleChange, ScheduleChanged, ScheduleName, ScheduleRow, Tick,
        TriggerScheduleRequest, TriggerTicks,
    },
};
use maud::{Markup, html};
use serde::Deserialize;
use server::ApiError;

/// The most schedules the list shows.
const LISTED: usize = 1_000;
/// The ticks a schedule's page shows.
const TICKS: usize = 50;
/// The next fire times a schedule's page shows.
const NEXT: usize = 5;

fn spec(row: &ScheduleRow) -> String {
    format!("{} ({})", row.definition.spec, row.definition.zone.name())
}

fn status_badge(row: &ScheduleRow) -> Markup {
    let status = row.status();
    let tone = match status {
        "active" => "ok",
        "paused" => "blocked",
        _ => "finished",
    };
    html! { span.badge.(tone) data-state=(status) { (status) } }
}

fn schedule_link(name: &ScheduleName) -> Markup {
    html! { a href={ "/schedules/" (layout::url_encode(name.as_str())) } { code { (name) } } }
}

pub(crate) async fn list<C: ClockFn>(axum::extract::State(ui): Shared<C>) -> Response {
    let rows = match ui.db.list_schedules(None, LISTED).await {
        Ok(rows) => rows,
        Err(err) => return layout::api_error(&ApiError::store("cannot list the schedules", &err)),
    };
    let now = ui.clock.now();
    let body = html! {
        h1 { "Schedules" }
        table.list {
            thead { tr { th { "Schedule" } th { "Status" } th { "Spec" } th { "Function" } th.num { "Runs" } th { "Next tick (UTC)" } } }
            tbody {
                @for row in &rows {
                    tr {
                        td { (schedule_link(row.name())) }
                        td { (status_badge(row)) }
                        td { code { (spec(row)) } }
                        td { code { (row.definition.ffqn) } }
                        td.num { (row.runs) }
                        td { @if let Some(at) = row.next_fire_times(now, 1).first() { (layout::time(*at)) } @else { "–" } }
                    }
                }
                @if rows.is_empty() {
                    tr { td.empty colspan="6" { "No schedule yet: `stele schedules create`, or POST /api/v1/schedules." } }
                }
            }
        }
    };
    layout::page("Schedules", body).into_response()
}

async fn ticks_table<C: ClockFn>(ui: &Ui<C>, ticks: &[Tick]) -> Markup {
    let mut rows = Vec::with_capacity(ticks.len());
    for tick in ticks {
        let state = match tick.execution_id() {
            Some(id) => match ui.db.get(id).await {
                Ok(log) => Some(Ok(server::views::state(&log.pending_state))),
                Err(_) => Some(Err(())),
            },
            None => None,
        };
        rows.push((tick, state));
    }
    html! {
        table.list.ticks {
            thead { tr { th { "Tick (UTC)" } th { "Outcome" } th { "Execution" } th { "State" } } }
            tbody {
                @for (tick, state) in &rows {
                    tr {
                        td { (layout::time(tick.at)) }
                        td { (tick.outcome) }
                        td { @if let Some(id) = tick.execution_id() { (layout::execution_link(id.as_str())) } }
                        td {
                            @match state {
                                Some(Ok(state)) => (layout::badge(state)),
                                Some(Err(())) => "pruned",
                                None => "",
                            }
                        }
                    }
                }
                @if rows.is_empty() { tr { td.empty colspan="4" { "No tick yet." } } }
            }
        }
    }
}

fn forms<C: ClockFn>(ui: &Ui<C>, row: &ScheduleRow) -> Markup {
    if ui.read_only {
        return html! {};
    }
    let path = format!("/schedules/{}", layout::url_encode(row.name().as_str()));
    html! {
        section.actions {
            h2 { "Actions" }
            @if row.paused.is_some() {
                details.action {
                    summary { "Resume…" }
                    form method="post" action={ (path) "/resume" } data-action {
                        input type="hidden" name="form_token" value=(ui.form_token);
                        p.warn { "Ticks fire again from now; those that fell while it was paused are recorded as skipped." }
                        button.confirm type="submit" { "Confirm: resume" }
                    }
                }
            } @else {
                details.action {
                    summary { "Pause…" }
                    form method="post" action={ (path) "/pause" } data-action {
                        input type="hidden" name="form_token" value=(ui.form_token);
                        label { "Note " input name="note" size="40" placeholder="why"; }
                        p.warn { "No tick fires until it is resumed." }
                        button.confirm type="submit" { "Confirm: pause" }
                    }
                }
            }
            details.action {
                summary { "Trigger now…" }
                form method="post" action={ (path) "/trigger" } data-action {
                    input type="hidden" name="form_token" value=(ui.form_token);
                    p.warn { "Fires one execution of " code { (row.definition.ffqn) } " now, whatever runs." }
                    button.confirm type="submit" { "Confirm: trigger" }
                }
            }
            output #action-answer role="status" {}
        }
    }
}

fn parse_name(text: &str) -> Result<ScheduleName, ApiError> {
    text.parse()
        .map_err(|err| ApiError::malformed_id(format!("{err}")))
}

fn no_schedule(name: &ScheduleName) -> Response {
    layout::error_page(
        StatusCode::NOT_FOUND,
        "Not found",
        &format!("no schedule {name}"),
    )
}

/// The page of schedule `name`, with `message` (an action's answer) on top.
async fn render<C: ClockFn>(ui: &Ui<C>, name: &ScheduleName, message: Option<Markup>) -> Response {
    let row = match ui.db.get_schedule(name).await {
        Ok(row) => row,
        Err(DbError::NotFound(_)) => return no_schedule(name),
        Err(err) => return layout::api_error(&ApiError::store("cannot read the schedule", &err)),
    };
    let ticks = match ui.db.schedule_ticks(name, TICKS).await {
        Ok(ticks) => ticks,
        Err(err) => return layout::api_error(&ApiError::store("cannot read its ticks", &err)),
    };
    let definition = &row.definition;
    let next = row.next_fire_times(ui.clock.now(), NEXT);
    let limit = definition
        .max_runs
        .map_or_else(|| "no limit".to_owned(), |max| format!("at most {max}"));
    let body = html! {
        h1 { "Schedule " code { (definition.name) } " " (status_badge(&row)) }
        @if let Some(message) = message { (message) }
        dl.facts {
            @if let Some(pause) = &row.paused {
                dt { "Paused" } dd { "since " (layout::time(pause.since)) @if !pause.note.is_empty() { ": " (crate::json::text(&pause.note)) } }
            }
            dt { "Function" } dd { code { (definition.ffqn) } }
            dt { "Parameters" } dd { (crate::json::render(&definition.params.0)) }
            dt { "Spec" } dd { code { (spec(&row)) } }
            dt { "Overlap" } dd { (definition.overlap) }
            dt { "Catch-up window" } dd { (layout::duration(i64::try_from(definition.catchup_window.as_millis()).unwrap_or(i64::MAX))) }
            dt { "Runs" } dd { (row.runs) " (" (limit) ")" }
            @if let Some(end) = definition.end { dt { "Ends" } dd { (layout::time(end)) } }
            dt { "Created" } dd { (layout::time(row.created_at)) }
            dt { "Next ticks" } dd {
                @for (i, at) in next.iter().enumerate() { @if i > 0 { ", " } (layout::time(*at)) }
                @if next.is_empty() { "none" }
            }
        }
        (forms(ui, &row))
        h2 { "Last ticks" }
        (ticks_table(ui, &ticks).await)
    };
    layout::page(&format!("Schedule {name}"), body).into_response()
}

pub(crate) async fn page<C: ClockFn>(
    axum::extract::State(ui): Shared<C>,
    Path(text): Path<String>,
) -> Response {
    match parse_name(&text) {
        Ok(name) => render(&ui, &name, None).await,
        Err(err) => layout::api_error(&err),
    }
}

/// The form of the actions.
#[derive(Debug, Deserialize)]
pub(crate) struct ActionForm {
    form_token: String,
    note: Option<String>,
}

/// The schedule an admitted action names; the refusal of one that is not.
fn admitted<C: ClockFn>(
    ui: &Ui<C>,
    headers: &HeaderMap,
    form: &ActionForm,
    text: &str,
) -> Result<ScheduleName, Box<Response>> {
    if let Some(refused) = actions::refusal(ui, headers, &form.form_token) {
        return Err(Box::new(refused));
    }
    parse_name(text).map_err(|err| Box::new(layout::api_error(&err)))
}

/// The answer: the sentence alone for the script, else the schedule's page with it.
async fn answer<C: ClockFn>(
    ui: &Ui<C>,
    headers: &HeaderMap,
    name: &ScheduleName,
    sentence: Result<String, ApiError>,
) -> Response {
    let (status, message) = match sentence {
        Ok(text) => (
            StatusCode::OK,
            html! { p.message.done role="status" { (text) } },
        ),
        Err(err) => (
            err.status(),
            html! { p.message.refused role="alert" { (err.message()) } },
        ),
    };
    if headers.contains_key(actions::IN_PLACE) {
        return (status, Html(message.into_string())).into_response();
    }
    let page = render(ui, name, Some(message)).await;
    (status, page).into_response()
}

async fn change<C: ClockFn>(
    ui: &Ui<C>,
    headers: &HeaderMap,
    text: &str,
    form: &ActionForm,
    change: ScheduleChange,
) -> Response {
    let name = match admitted(ui, headers, form, text) {
        Ok(name) => name,
        Err(refused) => return *refused,
    };
    let req = ChangeScheduleRequest {
        name: name.clone(),
        change,
        now: ui.clock.now(),
    };
    let sentence = match ui.db.change_schedule(req).await {
        Ok(ScheduleChanged::Unchanged) => {
            Ok(format!("schedule {name} was already so, nothing written"))
        }
        Ok(_) => Ok(format!("schedule {name} changed")),
        Err(err) => Err(ApiError::schedule(
            &format!("cannot change schedule {name}"),
            &name,
            err,
        )),
    };
    answer(ui, headers, &name, sentence).await
}

pub(crate) async fn pause<C: ClockFn>(
    axum::extract::State(ui): Shared<C>,
    Path(text): Path<String>,
    headers: HeaderMap,
    Form(form): Form<ActionForm>,
) -> Response {
    let note = form.note.clone().unwrap_or_default().trim().to_owned();
    change(&ui, &headers, &text, &form, ScheduleChange::Pause { note }).await
}

pub(crate) async fn resume<C: ClockFn>(
    axum::extract::State(ui): Shared<C>,
    Path(text): Path<String>,
    headers: HeaderMap,
    Form(form): Form<ActionForm>,
) -> Response {
    change(&ui, &headers, &text, &form, ScheduleChange::Resume).await
}

pub(crate) async fn trigger<C: ClockFn>(
    axum::extract::State(ui): Shared<C>,
    Path(text): Path<String>,
    headers: HeaderMap,
    Form(form): Form<ActionForm>,
) -> Response {
    let name = match admitted(&ui, &headers, &form, &text) {
        Ok(name) => name,
        Err(refused) => return *refused,
    };
    let req = TriggerScheduleRequest {
        name: name.clone(),
        ticks: TriggerTicks::Now,
        now: ui.clock.now(),
    };
    let sentence = match ui.db.trigger_schedule(req).await {
        Ok(triggered) => Ok(match triggered.fired.first() {
            Some(id) => format!("{id} fired"),
            None => format!("schedule {name} fired nothing new"),
        }),
        Err(err) => Err(ApiError::schedule(
            &format!("cannot fire schedule {name}"),
            &name,
            err,
        )),
    };
    answer(&ui, &headers, &name, sentence).await
}
