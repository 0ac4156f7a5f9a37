//! `/executions`: the list, its filters kept in the URL (the API's, checked by the API's
//! [`server::listing::Listing`]), cursor paging, each row's state as a badge, its duration
//! and its parent; the first page of a list updates itself.

use crate::{Shared, extract::Query, layout};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use concepts::{ClockFn, ExecutionId};
use maud::{Markup, html};
use serde::Deserialize;
use server::{
    ApiError,
    listing::{self, Listing},
    types::{ListAnswer, ListQuery, StateData, SummaryView},
};

/// The list's query as a form sends it: an empty field is no filter.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct ListParams {
    pub(crate) state: Option<String>,
    pub(crate) function: Option<String>,
    pub(crate) top_level: Option<String>,
    pub(crate) parent: Option<String>,
    pub(crate) created_after: Option<String>,
    pub(crate) created_before: Option<String>,
    pub(crate) id_prefix: Option<String>,
    pub(crate) parked: Option<String>,
    pub(crate) cursor: Option<String>,
    pub(crate) limit: Option<String>,
}

fn set(value: Option<&String>) -> Option<String> {
    value
        .map(|text| text.trim().to_string())
        .filter(|text| !text.is_empty())
}

impl ListParams {
    /// The API's query of these parameters.
    fn to_query(&self) -> Result<ListQuery, ApiError> {
        let limit = set(self.limit.as_ref())
            .map(|text| {
                text.parse::<usize>().map_err(|_| {
                    ApiError::malformed_query(format!("`limit={text}` is not a whole number"))
                })
            })
            .transpose()?;
        Ok(ListQuery {
            state: set(self.state.as_ref()),
            function: set(self.function.as_ref()),
            top_level: set(self.top_level.as_ref()).map(|flag| flag != "false"),
            parked: set(self.parked.as_ref()).map(|flag| flag != "false"),
            parent: set(self.parent.as_ref()),
            created_after: set(self.created_after.as_ref()),
            created_before: set(self.created_before.as_ref()),
            id_prefix: set(self.id_prefix.as_ref()),
            cursor: set(self.cursor.as_ref()),
            limit,
        })
    }

    /// The query string of the filters (not the cursor): the URL of the list's first page,
    /// and its live topic.
    pub(crate) fn filters(&self) -> String {
        layout::query(&[
            ("state", self.state.as_deref()),
            ("function", self.function.as_deref()),
            ("top_level", self.top_level.as_deref()),
            ("parent", self.parent.as_deref()),
            ("created_after", self.created_after.as_deref()),
            ("created_before", self.created_before.as_deref()),
            ("id_prefix", self.id_prefix.as_deref()),
            ("parked", self.parked.as_deref()),
            ("limit", self.limit.as_deref()),
        ])
    }

    /// The checked listing.
    pub(crate) fn listing(&self) -> Result<Listing, ApiError> {
        Listing::try_from(self.to_query()?)
    }
}

/// How long it ran (finished) or has existed (unfinished), from `now`.
fn duration(row: &SummaryView, now: DateTime<Utc>) -> String {
    match &row.state.data {
        StateData::Finished { finished_at, .. } => layout::duration(
            finished_at
                .signed_duration_since(row.created_at)
                .num_milliseconds(),
        ),
        _ => format!(
            "{} so far",
            layout::duration(now.signed_duration_since(row.created_at).num_milliseconds())
        ),
    }
}

/// The rows of a page (its `<tbody>`): the part that updates itself.
pub(crate) fn rows(answer: &ListAnswer, now: DateTime<Utc>) -> Markup {
    html! {
        tbody #live-rows {
            @for row in &answer.executions {
                tr {
                    td { (layout::execution_link(&row.id)) }
                    td { code { (row.function) } }
                    td { (layout::badge(&row.state)) }
                    td { (layout::time(row.created_at)) }
                    td.num { (duration(row, now)) }
                    td {
                        @if let Some((parent, _)) = row.id.parse::<ExecutionId>().ok().and_then(|id| id.split_to_parent()) {
                            (layout::execution_link(parent.as_str()))
                        }
                    }
                }
            }
            @if answer.executions.is_empty() {
                tr { td.empty colspan="6" { "No execution matches." } }
            }
        }
    }
}

/// The table of a page.
pub(crate) fn table(answer: &ListAnswer, now: DateTime<Utc>, live: Option<&str>) -> Markup {
    html! {
        table.list data-live=[live] {
            thead { tr { th { "Execution" } th { "Function" } th { "State" } th { "Created (UTC)" } th { "Duration" } th { "Parent" } } }
            (rows(answer, now))
        }
    }
}

const STATES: [&str; 4] = ["pending", "locked", "blocked", "finished"];

fn filters<C: ClockFn>(ui: &crate::Ui<C>, params: &ListParams) -> Markup {
    let value = |field: &Option<String>| field.clone().unwrap_or_default();
    let functions: Vec<String> = ui
        .catalog
        .functions()
        .map(|function| function.ffqn().to_string())
        .collect();
    html! {
        form.filters method="get" action="/executions" {
            label { "State "
                select name="state" {
                    option value="" { "any" }
                    @for state in STATES {
                        option value=(state) selected[params.state.as_deref() == Some(state)] { (state) }
                    }
                }
            }
            label { "Function "
                input name="function" list="functions" value=(value(&params.function)) placeholder="any";
                datalist #functions { @for function in &functions { option value=(function) {} } }
            }
            label { input type="checkbox" name="top_level" value="true" checked[params.top_level.as_deref().is_some_and(|flag| !flag.is_empty() && flag != "false")]; " top-level only" }
            label { "Children of " input name="parent" value=(value(&params.parent)) placeholder="E_…"; }
            label { "Created after " input name="created_after" value=(value(&params.created_after)) placeholder="2026-01-31T12:00:00Z"; }
            label { "before " input name="created_before" value=(value(&params.created_before)) placeholder="RFC 3339"; }
            label { "Id starts with " input name="id_prefix" value=(value(&params.id_prefix)) placeholder="E_01…"; }
            label title="Executions whose replay diverged from their log: they wait for code that agrees with it" { input type="checkbox" name="parked" value="true" checked[params.parked.as_deref().is_some_and(|flag| !flag.is_empty() && flag != "false")]; " parked only" }
            button type="submit" { "Filter" }
            a href="/executions" { "Clear" }
        }
    }
}

pub(crate) async fn page<C: ClockFn>(
    axum::extract::State(ui): Shared<C>,
    Query(params): Query<ListParams>,
) -> Response {
    let answer = match params.listing() {
        Ok(listing) => listing::page(ui.db.as_ref(), listing).await,
        Err(err) => Err(err),
    };
    let answer = match answer {
        Ok(answer) => answer,
        Err(err) => return layout::api_error(&err),
    };
    let now = ui.clock.now();
    let filters_query = params.filters();
    let first_page = set(params.cursor.as_ref()).is_none();
    let topic = first_page.then(|| format!("/live?list={}", layout::url_encode(&filters_query)));
    let next = answer.next_cursor.as_ref().map(|cursor| {
        let mut query = filters_query.clone();
        if !query.is_empty() {
            query.push('&');
        }
        query.push_str(&layout::query(&[("cursor", Some(cursor))]));
        format!("/executions?{query}")
    });
    let body = html! {
        h1 { "Executions" }
        (filters(&ui, &params))
        (table(&answer, now, topic.as_deref()))
        nav.pages {
            @if !first_page { a href={ "/executions?" (filters_query) } { "First page" } }
            @if let Some(next) = &next { a.next href=(next) { "Next page" } }
        }
    };
    layout::page("Executions", body).into_response()
}
