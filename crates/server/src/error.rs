//! [`ApiError`]: every refusal the API answers, its status, its `error` kind and a message a
//! person can act on, as the JSON document `ErrorBody`; the store's, the submit's and axum's
//! own rejections are mapped here, in one place.

use crate::types::ErrorBody;
use axum::{
    extract::rejection::{JsonRejection, PathRejection, QueryRejection},
    http::{StatusCode, header},
    response::{IntoResponse, Response},
};
use concepts::{DbError, ExecutionId, ValidationError};
use node::SubmitError;

/// A refused request: its status, its kind (the crate docs' table) and its message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    status: StatusCode,
    kind: &'static str,
    message: String,
    differences: Option<Vec<String>>,
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            kind,
            message: message.into(),
            differences: None,
        }
    }

    /// The status.
    #[must_use]
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The kind, `error` of the document.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        self.kind
    }

    /// The message.
    #[must_use]
    pub fn message(&self) -> &str {
        &self.message
    }

    pub(crate) fn malformed_body(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "malformed_body", message)
    }

    /// A query string the API refuses (400), with what to write instead.
    pub fn malformed_query(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "malformed_query", message)
    }

    /// An execution id that does not parse (400).
    pub fn malformed_id(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "malformed_id", message)
    }

    pub(crate) fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }

    /// A request to a loopback server without a token, addressed to a name another site
    /// could own ([`crate::auth::foreign_name`]).
    pub(crate) fn host_refused(name: &str) -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            "host_refused",
            format!(
                "this server listens on loopback without a token, so it answers only requests \
                 addressed to localhost or an IP address, not to `{name}` (a page of another \
                 site could otherwise reach it through DNS rebinding); to serve it under \
                 another name (behind a proxy), give it a token (`--http-token`)"
            ),
        )
    }

    pub(crate) fn read_only() -> Self {
        Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "read_only",
            "this server is read-only: it serves GET requests only (started with --read-only)",
        )
    }

    pub(crate) fn no_route(path: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no route {path}; the API is under /api/v1 (see the server crate's docs)"),
        )
    }

    pub(crate) fn method_not_allowed() -> Self {
        Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "this route does not take this method (see the server crate's docs)",
        )
    }

    /// No execution `execution_id`.
    pub fn no_execution(execution_id: &ExecutionId) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no execution {execution_id}"),
        )
    }

    pub(crate) fn unavailable(context: &str, err: &DbError) -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            format!("{context}: {err}; the store is unreachable, retry later"),
        )
    }

    /// A store error while working on `execution_id`: not found, a conflict, a refusal of
    /// the model, the store unreachable, or an internal error, each with `context`
    /// (`cannot cancel E_...`) as the CLI words it.
    pub fn db(context: &str, execution_id: &ExecutionId, err: DbError) -> Self {
        match &err {
            DbError::NotFound(_) => Self::no_execution(execution_id),
            _ => Self::refusal(context, err),
        }
    }

    /// A store error of a write of schedule `name` with `context`: not found, a conflict, a
    /// refusal of the model, or the store's.
    pub fn schedule(context: &str, name: &concepts::schedule::ScheduleName, err: DbError) -> Self {
        match err {
            DbError::NotFound(_) => Self::not_found(format!("no schedule {name}")),
            err => Self::refusal(context, err),
        }
    }

    /// Nothing at what the request names (404).
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// Parameters the function cannot take (422).
    pub(crate) fn params_refused(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, "params_refused", message)
    }

    /// A store error of a write with `context`: a conflict, a refusal of the model, the store
    /// unreachable, or an internal error.
    pub fn refusal(context: &str, err: DbError) -> Self {
        match &err {
            DbError::Duplicate(kind) => Self::new(
                StatusCode::CONFLICT,
                "conflict",
                format!("{context}: {kind}"),
            ),
            DbError::Validation(too_long @ ValidationError::ReasonTooLong { .. }) => Self::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "reason_too_long",
                format!("{context}: {too_long}"),
            ),
            DbError::Validation(ValidationError::InvalidRequest(reason)) => Self::new(
                StatusCode::CONFLICT,
                "refused",
                format!("{context}: {reason}"),
            ),
            DbError::Validation(invalid) => Self::new(
                StatusCode::CONFLICT,
                "refused",
                format!("{context}: {invalid}"),
            ),
            _ => Self::store(context, &err),
        }
    }

    /// A failure of the store itself: 503 when it is unreachable or closed (retrying later
    /// may succeed), 500 otherwise.
    pub fn store(context: &str, err: &DbError) -> Self {
        if err.is_retriable() || matches!(err, DbError::Closed) {
            Self::unavailable(context, err)
        } else {
            Self::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                format!("{context}: {err}"),
            )
        }
    }
}

impl From<SubmitError> for ApiError {
    fn from(err: SubmitError) -> Self {
        match &err {
            SubmitError::NotTopLevel { .. } => Self::malformed_id(err.to_string()),
            SubmitError::ParamsRefused { .. } => Self::params_refused(err.to_string()),
            SubmitError::Conflict { differences, .. } => {
                let mut conflict = Self::new(StatusCode::CONFLICT, "conflict", err.to_string());
                conflict.differences = Some(differences.iter().map(ToString::to_string).collect());
                conflict
            }
            SubmitError::Db(db) => Self::store("cannot submit", db),
        }
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        match rejection.status() {
            StatusCode::PAYLOAD_TOO_LARGE => Self::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                "the body is larger than this server takes (1 MiB by default)",
            ),
            StatusCode::UNSUPPORTED_MEDIA_TYPE => Self::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "the body must be JSON, sent with `Content-Type: application/json`",
            ),
            _ => Self::malformed_body(format!(
                "the body is not the expected JSON: {}",
                rejection.body_text()
            )),
        }
    }
}

impl From<QueryRejection> for ApiError {
    fn from(rejection: QueryRejection) -> Self {
        Self::malformed_query(rejection.body_text())
    }
}

impl From<PathRejection> for ApiError {
    fn from(rejection: PathRejection) -> Self {
        Self::malformed_id(rejection.body_text())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (
            self.status,
            axum::Json(ErrorBody {
                error: self.kind.to_string(),
                message: self.message,
                differences: self.differences,
            }),
        )
            .into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
        }
        response
    }
}
