//! The writes (submit, cancel, complete) and the long poll of a result: each the library
//! operation the `stele` command calls, its typed answer mapped to a status.

use super::Shared;
use crate::{
    error::ApiError,
    extract::{Body, Id, QueryOf, parse_id},
    types::{
        CancelAnswer, CancelBody, CompleteAnswer, CompleteBody, SubmitAnswer, SubmitBody,
        WaitAnswer, WaitQuery,
    },
    views,
};
use axum::{Json, extract::State, http::StatusCode};
use concepts::{
    CancelOutcome, CancelRequest, ClockFn, CompleteOutcome, CompleteRequest, ExecutionMetadata,
    Json as Value, SupportedFunctionReturnValue,
};
use node::{HumanDuration, Submission, Submitted};
use std::{collections::BTreeMap, time::Duration};

/// How long a `wait` without a `timeout` waits (at most the server's maximum).
const DEFAULT_WAIT: Duration = Duration::from_secs(30);

/// What a cancel without a reason records.
const DEFAULT_REASON: &str = "cancelled through the HTTP API";

/// A submit stores the caller's W3C `traceparent` header with the execution, so that its runs
/// join the caller's trace; a header that is not in the W3C format is ignored, as the
/// recommendation says.
pub(crate) async fn submit<C: ClockFn>(
    State(state): Shared<C>,
    headers: axum::http::HeaderMap,
    Body(body): Body<SubmitBody>,
) -> Result<(StatusCode, Json<SubmitAnswer>), ApiError> {
    let ffqn = body.function.parse().map_err(|err| {
        ApiError::malformed_body(format!(
            "`{}` is not a function: {err} (`<namespace>:<package>/<interface>.<function>`)",
            body.function
        ))
    })?;
    let execution_id = body.id.as_deref().map(parse_id).transpose()?;
    let submission = Submission {
        ffqn,
        params: body.params,
        execution_id,
        metadata: {
            let metadata = ExecutionMetadata(BTreeMap::from([(
                "submitted_by".to_string(),
                "http".to_string(),
            )]));
            match headers
                .get(ExecutionMetadata::TRACEPARENT)
                .and_then(|value| value.to_str().ok())
                .and_then(concepts::trace::TraceParent::parse)
            {
                Some(parent) => metadata.with_trace(parent),
                None => metadata,
            }
        },
    };
    let now = state.clock.now();
    let submitted = node::Prepared::new(&state.catalog, submission, now)?
        .submit(state.db.as_ref())
        .await?;
    let (status, created, pending_state) = match submitted {
        Submitted::Created {
            execution_id,
            pending_state,
        } => (StatusCode::CREATED, true, (execution_id, pending_state)),
        Submitted::AlreadyExisted {
            execution_id,
            pending_state,
        } => (StatusCode::OK, false, (execution_id, pending_state)),
    };
    let (execution_id, pending_state) = pending_state;
    Ok((
        status,
        Json(SubmitAnswer {
            id: execution_id.to_string(),
            created,
            state: views::state(&pending_state),
        }),
    ))
}

pub(crate) async fn cancel<C: ClockFn>(
    State(state): Shared<C>,
    Id(execution_id): Id,
    Body(body): Body<CancelBody>,
) -> Result<Json<CancelAnswer>, ApiError> {
    let request = CancelRequest {
        execution_id: execution_id.clone(),
        now: state.clock.now(),
        reason: body.reason.unwrap_or_else(|| DEFAULT_REASON.to_string()),
    };
    let outcome = state.db.cancel(request).await.map_err(|err| {
        ApiError::db(&format!("cannot cancel {execution_id}"), &execution_id, err)
    })?;
    let id = execution_id.to_string();
    Ok(Json(match outcome {
        CancelOutcome::Cancelled { executions } => CancelAnswer::Cancelled { id, executions },
        CancelOutcome::AlreadyFinished { result } => CancelAnswer::AlreadyFinished {
            id,
            result: views::result(&result),
        },
    }))
}

pub(crate) async fn complete<C: ClockFn>(
    State(state): Shared<C>,
    Id(execution_id): Id,
    Body(body): Body<CompleteBody>,
) -> Result<Json<CompleteAnswer>, ApiError> {
    let request = CompleteRequest {
        execution_id: execution_id.clone(),
        now: state.clock.now(),
        value: SupportedFunctionReturnValue::InfallibleOrResultOk(Value(body.value)),
    };
    let outcome = state.db.complete(request).await.map_err(|err| {
        ApiError::db(
            &format!("cannot complete {execution_id}"),
            &execution_id,
            err,
        )
    })?;
    let outcome = match outcome {
        CompleteOutcome::Completed => "completed",
        CompleteOutcome::AlreadyCompleted => "already_completed",
    };
    Ok(Json(CompleteAnswer {
        id: execution_id.to_string(),
        outcome: outcome.to_string(),
    }))
}

/// Waits for the result, at most the timeout asked (cut to the server's maximum), and
/// answers 202 "still running" when it passed first or the server began to stop. The polls of
/// one execution share one wait of the store (`waits.rs`).
pub(crate) async fn wait<C: ClockFn>(
    State(state): Shared<C>,
    Id(execution_id): Id,
    QueryOf(query): QueryOf<WaitQuery>,
) -> Result<(StatusCode, Json<WaitAnswer>), ApiError> {
    let timeout = match query.timeout.as_deref() {
        Some(text) => Duration::from(
            text.parse::<HumanDuration>()
                .map_err(|err| ApiError::malformed_query(format!("`timeout={text}`: {err}")))?,
        ),
        None => DEFAULT_WAIT,
    }
    .min(state.options.max_wait);
    let waited = state.long_polls.wait(&execution_id, timeout);
    let stopping = async {
        match &state.stopping {
            Some(signal) => signal.clone().fired().await,
            None => std::future::pending().await,
        }
    };
    let result = tokio::select! {
        result = waited => result.map_err(|err| {
            ApiError::db(&format!("cannot wait for {execution_id}"), &execution_id, err)
        })?,
        () = stopping => None,
    };
    let id = execution_id.to_string();
    Ok(match result {
        Some(result) => (
            StatusCode::OK,
            Json(WaitAnswer {
                id,
                finished: true,
                result: Some(views::result(&result)),
            }),
        ),
        None => (
            StatusCode::ACCEPTED,
            Json(WaitAnswer {
                id,
                finished: false,
                result: None,
            }),
        ),
    })
}
