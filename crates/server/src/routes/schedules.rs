//! The schedules: create and update (checked against the node's catalog, as `stele schedules`
//! is), list, show with the next fire times and the last ticks, pause, resume, trigger,
//! backfill and delete; each the library's write, its typed answer mapped to a status.

use super::Shared;
use crate::{
    error::ApiError,
    extract::{Body, QueryOf, Segment},
};
use axum::{Json, http::StatusCode};
use chrono::{DateTime, Utc};
use concepts::{
    ClockFn,
    schedule::{
        ChangeScheduleRequest, ScheduleChange, ScheduleChanged, ScheduleCreated, ScheduleName,
        ScheduleRow, Tick, TriggerScheduleRequest, TriggerTicks, Triggered,
    },
};
use node::schedules::{ScheduleDraft, ScheduleRefused};
use serde::{Deserialize, Serialize};

/// `GET /schedules`: a page in name order.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListQuery {
    /// The page after this name.
    after: Option<String>,
    /// At most this many, up to 1,000 (100 by default).
    limit: Option<usize>,
}

/// A page of schedules.
#[derive(Debug, Serialize)]
pub(crate) struct ListAnswer {
    schedules: Vec<ScheduleRow>,
    /// The `after` of the next page, when this one is full.
    next_after: Option<ScheduleName>,
}

/// `GET /schedules/{name}`: how many next fire times and last ticks.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ShowQuery {
    next: Option<usize>,
    ticks: Option<usize>,
}

/// One schedule with what comes and what happened.
#[derive(Debug, Serialize)]
pub(crate) struct ShowAnswer {
    schedule: ScheduleRow,
    next_fire_times: Vec<DateTime<Utc>>,
    /// Newest first.
    ticks: Vec<Tick>,
}

/// What a create or an update did.
#[derive(Debug, Serialize)]
pub(crate) struct WrittenAnswer {
    /// False when the schedule was already so: nothing was written.
    written: bool,
    schedule: ScheduleRow,
}

/// `POST /schedules/{name}/pause`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PauseBody {
    #[serde(default)]
    note: String,
}

/// `POST /schedules/{name}/backfill`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct BackfillBody {
    from: DateTime<Utc>,
    to: DateTime<Utc>,
}

/// The body of `resume` and `trigger`: `{}`. A write takes a JSON body, which a browser
/// sends to another origin only after asking (the crate docs' security section).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NoFields {}

/// What a change did.
#[derive(Debug, Serialize)]
pub(crate) struct ChangedAnswer {
    /// False when the schedule was already so: nothing was written.
    changed: bool,
    /// For a delete: its last run, when it had not finished (it goes on).
    running: Option<concepts::ExecutionId>,
}

/// What a trigger or a backfill fired.
#[derive(Debug, Serialize)]
pub(crate) struct TriggeredAnswer {
    fired: Vec<concepts::ExecutionId>,
    already_fired: Vec<concepts::ExecutionId>,
}

const MAX_LIMIT: usize = 1_000;

fn parse_name(text: &str) -> Result<ScheduleName, ApiError> {
    text.parse()
        .map_err(|err| ApiError::malformed_id(format!("{err}")))
}

fn refused(err: ScheduleRefused) -> ApiError {
    match err {
        ScheduleRefused::UnknownFunction { .. } => ApiError::malformed_body(err.to_string()),
        ScheduleRefused::ParamsRefused { .. } => ApiError::params_refused(err.to_string()),
    }
}

fn definition(draft: &ScheduleDraft) -> Result<concepts::schedule::Definition, ApiError> {
    draft
        .definition()
        .map_err(|err| ApiError::malformed_body(format!("field {err}")))
}

pub(crate) async fn list<C: ClockFn>(
    axum::extract::State(state): Shared<C>,
    QueryOf(query): QueryOf<ListQuery>,
) -> Result<Json<ListAnswer>, ApiError> {
    let limit = query.limit.unwrap_or(100);
    if limit == 0 || limit > MAX_LIMIT {
        return Err(ApiError::malformed_query(format!(
            "limit {limit}: give 1 to {MAX_LIMIT}"
        )));
    }
    let after = query.after.as_deref().map(parse_name).transpose()?;
    let schedules = (state.db.list_schedules(after.as_ref(), limit).await)
        .map_err(|err| ApiError::store("cannot list the schedules", &err))?;
    let next_after = (schedules.len() == limit)
        .then(|| schedules.last().map(|row| row.name().clone()))
        .flatten();
    Ok(Json(ListAnswer {
        schedules,
        next_after,
    }))
}

pub(crate) async fn show<C: ClockFn>(
    axum::extract::State(state): Shared<C>,
    Segment(name): Segment,
    QueryOf(query): QueryOf<ShowQuery>,
) -> Result<Json<ShowAnswer>, ApiError> {
    let name = parse_name(&name)?;
    let (next, ticks) = (query.next.unwrap_or(5), query.ticks.unwrap_or(20));
    if next > MAX_LIMIT || ticks > MAX_LIMIT {
        return Err(ApiError::malformed_query(format!(
            "next and ticks go up to {MAX_LIMIT}"
        )));
    }
    let context = format!("cannot show schedule {name}");
    let schedule = (state.db.get_schedule(&name).await)
        .map_err(|err| ApiError::schedule(&context, &name, err))?;
    let ticks = (state.db.schedule_ticks(&name, ticks).await)
        .map_err(|err| ApiError::schedule(&context, &name, err))?;
    Ok(Json(ShowAnswer {
        next_fire_times: schedule.next_fire_times(state.clock.now(), next),
        schedule,
        ticks,
    }))
}

pub(crate) async fn create<C: ClockFn>(
    axum::extract::State(state): Shared<C>,
    Body(draft): Body<ScheduleDraft>,
) -> Result<(StatusCode, Json<WrittenAnswer>), ApiError> {
    let definition = definition(&draft)?;
    let name = definition.name.clone();
    let req = node::schedules::create_request(&state.catalog, definition, state.clock.now())
        .map_err(refused)?;
    let context = format!("cannot create schedule {name}");
    let created = (state.db.create_schedule(req).await)
        .map_err(|err| ApiError::schedule(&context, &name, err))?;
    let schedule = (state.db.get_schedule(&name).await)
        .map_err(|err| ApiError::schedule(&context, &name, err))?;
    let (status, written) = match created {
        ScheduleCreated::Created => (StatusCode::CREATED, true),
        ScheduleCreated::AlreadyExisted => (StatusCode::OK, false),
    };
    Ok((status, Json(WrittenAnswer { written, schedule })))
}

pub(crate) async fn update<C: ClockFn>(
    axum::extract::State(state): Shared<C>,
    Segment(name): Segment,
    Body(draft): Body<ScheduleDraft>,
) -> Result<Json<WrittenAnswer>, ApiError> {
    let name = parse_name(&name)?;
    let definition = definition(&draft)?;
    if definition.name != name {
        return Err(ApiError::malformed_body(format!(
            "the body names schedule {}, the path {name}: a schedule is not renamed",
            definition.name
        )));
    }
    let req = node::schedules::update_request(&state.catalog, definition, state.clock.now())
        .map_err(refused)?;
    let context = format!("cannot update schedule {name}");
    let changed = (state.db.change_schedule(req).await)
        .map_err(|err| ApiError::schedule(&context, &name, err))?;
    let schedule = (state.db.get_schedule(&name).await)
        .map_err(|err| ApiError::schedule(&context, &name, err))?;
    Ok(Json(WrittenAnswer {
        written: changed == ScheduleChanged::Changed,
        schedule,
    }))
}

/// Makes `change` of the schedule of the path.
async fn change<C: ClockFn>(
    state: &crate::ApiState<C>,
    name: &str,
    change: ScheduleChange,
) -> Result<Json<ChangedAnswer>, ApiError> {
    let name = parse_name(name)?;
    let req = ChangeScheduleRequest {
        name: name.clone(),
        change,
        now: state.clock.now(),
    };
    let context = format!("cannot change schedule {name}");
    let changed = (state.db.change_schedule(req).await)
        .map_err(|err| ApiError::schedule(&context, &name, err))?;
    Ok(Json(match changed {
        ScheduleChanged::Changed => ChangedAnswer {
            changed: true,
            running: None,
        },
        ScheduleChanged::Unchanged => ChangedAnswer {
            changed: false,
            running: None,
        },
        ScheduleChanged::Deleted { running } => ChangedAnswer {
            changed: true,
            running,
        },
    }))
}

pub(crate) async fn pause<C: ClockFn>(
    axum::extract::State(state): Shared<C>,
    Segment(name): Segment,
    Body(body): Body<PauseBody>,
) -> Result<Json<ChangedAnswer>, ApiError> {
    change(&state, &name, ScheduleChange::Pause { note: body.note }).await
}

pub(crate) async fn resume<C: ClockFn>(
    axum::extract::State(state): Shared<C>,
    Segment(name): Segment,
    Body(NoFields {}): Body<NoFields>,
) -> Result<Json<ChangedAnswer>, ApiError> {
    change(&state, &name, ScheduleChange::Resume).await
}

pub(crate) async fn delete<C: ClockFn>(
    axum::extract::State(state): Shared<C>,
    Segment(name): Segment,
) -> Result<Json<ChangedAnswer>, ApiError> {
    change(&state, &name, ScheduleChange::Delete).await
}

/// Fires `ticks` of the schedule of the path.
async fn fire<C: ClockFn>(
    state: &crate::ApiState<C>,
    name: &str,
    ticks: TriggerTicks,
) -> Result<Json<TriggeredAnswer>, ApiError> {
    let name = parse_name(name)?;
    let req = TriggerScheduleRequest {
        name: name.clone(),
        ticks,
        now: state.clock.now(),
    };
    let context = format!("cannot fire schedule {name}");
    let Triggered {
        fired,
        already_fired,
        ..
    } = (state.db.trigger_schedule(req).await)
        .map_err(|err| ApiError::schedule(&context, &name, err))?;
    Ok(Json(TriggeredAnswer {
        fired,
        already_fired,
    }))
}

pub(crate) async fn trigger<C: ClockFn>(
    axum::extract::State(state): Shared<C>,
    Segment(name): Segment,
    Body(NoFields {}): Body<NoFields>,
) -> Result<Json<TriggeredAnswer>, ApiError> {
    fire(&state, &name, TriggerTicks::Now).await
}

pub(crate) async fn backfill<C: ClockFn>(
    axum::extract::State(state): Shared<C>,
    Segment(name): Segment,
    Body(body): Body<BackfillBody>,
) -> Result<Json<TriggeredAnswer>, ApiError> {
    let ticks = TriggerTicks::Backfill {
        from: body.from,
        to: body.to,
    };
    fire(&state, &name, ticks).await
}
