//! The reads of executions: the list (through `listing.rs`), one execution, its log and its
//! children, each a read of `DbClient` mapped to its document.

use super::Shared;
use crate::{
    error::ApiError,
    extract::{Id, QueryOf},
    listing::{self, Listing},
    types::{EventsAnswer, EventsQuery, ExecutionView, ListAnswer, ListQuery, PageQuery},
    views,
};
use axum::{Json, extract::State};
use concepts::{ClockFn, DbClient, ExecutionId, Version};

pub(crate) async fn list<C: ClockFn>(
    State(state): Shared<C>,
    QueryOf(query): QueryOf<ListQuery>,
) -> Result<Json<ListAnswer>, ApiError> {
    Ok(Json(
        listing::page(state.db.as_ref(), Listing::try_from(query)?).await?,
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
    let listing = Listing::children(execution_id.clone(), query.cursor, query.limit)?;
    exists(state.db.as_ref(), &execution_id).await?;
    Ok(Json(listing::page(state.db.as_ref(), listing).await?))
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
    let limit = listing::limit(query.limit)?;
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
