//! The reads of executions: the list (with its filters and cursor), one execution, its log
//! and its children, each a read of `DbClient` mapped to its document.

use super::Shared;
use crate::{
    error::ApiError,
    extract::{Id, QueryOf, parse_id},
    types::{EventsAnswer, EventsQuery, ExecutionView, ListAnswer, ListQuery, PageQuery},
    views,
};
use axum::{Json, extract::State};
use chrono::{DateTime, Utc};
use concepts::{
    ClockFn, DbClient, ExecutionId, ExecutionSummary, ListExecutionsFilter, Pagination,
    PendingStateKind, Version,
};

/// Rows or events of a page unless `limit` says otherwise.
pub(crate) const DEFAULT_LIMIT: usize = 100;
/// The most rows or events of a page.
pub(crate) const MAX_LIMIT: usize = 1_000;

/// `limit`, checked: 1 to [`MAX_LIMIT`].
pub(crate) fn limit(limit: Option<usize>) -> Result<usize, ApiError> {
    match limit.unwrap_or(DEFAULT_LIMIT) {
        0 => Err(ApiError::malformed_query("`limit` must be at least 1")),
        n if n > MAX_LIMIT => Err(ApiError::malformed_query(format!(
            "`limit` is at most {MAX_LIMIT}; read further pages with `cursor`"
        ))),
        n => Ok(n),
    }
}

/// A cursor, `<created_at>~<id>` of the last row of the previous page.
fn cursor(text: &str) -> Result<(DateTime<Utc>, ExecutionId), ApiError> {
    let malformed = || {
        ApiError::malformed_query(format!(
            "`{text}` is not a cursor: pass the `next_cursor` of the previous page as it is"
        ))
    };
    let (at, id) = text.split_once('~').ok_or_else(malformed)?;
    let at = DateTime::parse_from_rfc3339(at).map_err(|_| malformed())?;
    let id = id.parse().map_err(|_| malformed())?;
    Ok((at.with_timezone(&Utc), id))
}

fn cursor_of(row: &ExecutionSummary) -> String {
    format!(
        "{}~{}",
        row.created_at
            .to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
        row.execution_id
    )
}

fn time(name: &str, text: &str) -> Result<DateTime<Utc>, ApiError> {
    DateTime::parse_from_rfc3339(text)
        .map(|at| at.with_timezone(&Utc))
        .map_err(|err| {
            ApiError::malformed_query(format!(
                "`{name}={text}` is not a time: {err} (RFC 3339, e.g. 2026-01-31T12:00:00Z)"
            ))
        })
}

/// One page of `filter`, newest first, and the cursor of the next.
async fn page(
    db: &dyn DbClient,
    filter: ListExecutionsFilter,
    after: Option<&str>,
    limit: usize,
) -> Result<ListAnswer, ApiError> {
    let pagination = Pagination {
        cursor: after.map(cursor).transpose()?,
        length: limit,
    };
    let rows = db
        .list_executions(filter, pagination)
        .await
        .map_err(|err| ApiError::store("cannot list executions", &err))?;
    let next_cursor = if rows.len() < limit {
        None
    } else {
        rows.last().map(cursor_of)
    };
    Ok(ListAnswer {
        executions: rows.iter().map(views::summary).collect(),
        next_cursor,
    })
}

pub(crate) async fn list<C: ClockFn>(
    State(state): Shared<C>,
    QueryOf(query): QueryOf<ListQuery>,
) -> Result<Json<ListAnswer>, ApiError> {
    let ListQuery {
        state: only_state,
        function,
        top_level,
        parent,
        created_after,
        created_before,
        id_prefix,
        cursor,
        limit: rows,
    } = query;
    let filter = ListExecutionsFilter {
        ffqn: function
            .map(|text| {
                text.parse().map_err(|err| {
                    ApiError::malformed_query(format!("`function={text}` is not a function: {err}"))
                })
            })
            .transpose()?,
        state: only_state
            .map(|text| text.parse::<PendingStateKind>())
            .transpose()
            .map_err(ApiError::malformed_query)?,
        top_level_only: top_level.unwrap_or(false),
        parent: parent.as_deref().map(parse_id).transpose()?,
        created_after: created_after
            .map(|text| time("created_after", &text))
            .transpose()?,
        created_before: created_before
            .map(|text| time("created_before", &text))
            .transpose()?,
        id_prefix,
    };
    let limit = limit(rows)?;
    Ok(Json(
        page(state.db.as_ref(), filter, cursor.as_deref(), limit).await?,
    ))
}

/// `NotFound` unless `execution_id` exists: one event read.
async fn exists(db: &dyn DbClient, execution_id: &ExecutionId) -> Result<(), ApiError> {
    db.list_events(execution_id, Version(0), 1)
        .await
        .map(drop)
        .map_err(|err| ApiError::db(&format!("cannot read {execution_id}"), execution_id, err))
}

pub(crate) async fn children<C: ClockFn>(
    State(state): Shared<C>,
    Id(execution_id): Id,
    QueryOf(query): QueryOf<PageQuery>,
) -> Result<Json<ListAnswer>, ApiError> {
    let limit = limit(query.limit)?;
    exists(state.db.as_ref(), &execution_id).await?;
    let filter = ListExecutionsFilter {
        parent: Some(execution_id),
        ..ListExecutionsFilter::default()
    };
    Ok(Json(
        page(state.db.as_ref(), filter, query.cursor.as_deref(), limit).await?,
    ))
}

pub(crate) async fn show<C: ClockFn>(
    State(state): Shared<C>,
    Id(execution_id): Id,
) -> Result<Json<ExecutionView>, ApiError> {
    let log =
        state.db.get(&execution_id).await.map_err(|err| {
            ApiError::db(&format!("cannot read {execution_id}"), &execution_id, err)
        })?;
    views::execution(&log)
        .map(Json)
        .ok_or_else(|| ApiError::no_execution(&execution_id))
}

pub(crate) async fn events<C: ClockFn>(
    State(state): Shared<C>,
    Id(execution_id): Id,
    QueryOf(query): QueryOf<EventsQuery>,
) -> Result<Json<EventsAnswer>, ApiError> {
    let limit = limit(query.limit)?;
    let from = query.from.unwrap_or(0);
    let events = state
        .db
        .list_events(&execution_id, Version(from), limit)
        .await
        .map_err(|err| ApiError::db(&format!("cannot read {execution_id}"), &execution_id, err))?;
    let next = (events.len() == limit)
        .then(|| from.saturating_add(u32::try_from(limit).unwrap_or(u32::MAX)));
    let events = (from..)
        .zip(&events)
        .map(|(version, event)| views::event(version, event))
        .collect();
    Ok(Json(EventsAnswer { events, next }))
}
