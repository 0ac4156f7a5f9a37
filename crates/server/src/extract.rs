//! Extractors whose rejections are the API's JSON errors ([`ApiError`]) rather than axum's
//! plain text: a JSON body, a query string, an execution id or a schedule's name in the path.

use crate::error::ApiError;
use axum::{
    extract::{FromRequest, FromRequestParts, Path, Query, Request},
    http::request::Parts,
};
use concepts::ExecutionId;
use serde::de::DeserializeOwned;

/// A JSON body (`Content-Type: application/json`, within the body limit).
pub(crate) struct Body<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let axum::Json(value) = axum::Json::<T>::from_request(request, state).await?;
        Ok(Self(value))
    }
}

/// A query string.
pub(crate) struct QueryOf<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for QueryOf<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Query(value) = Query::<T>::from_request_parts(parts, state).await?;
        Ok(Self(value))
    }
}

/// The execution id of the path, `/executions/{id}/...`.
pub(crate) struct Id(pub ExecutionId);

impl<S: Send + Sync> FromRequestParts<S> for Id {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Path(text) = Path::<String>::from_request_parts(parts, state).await?;
        parse_id(&text).map(Self)
    }
}

/// The text of the path's one parameter (a schedule's name, `/schedules/{name}/...`), as it
/// was percent-decoded; one that is not UTF-8 is `malformed_id`.
pub(crate) struct Segment(pub String);

impl<S: Send + Sync> FromRequestParts<S> for Segment {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Path(text) = Path::<String>::from_request_parts(parts, state).await?;
        Ok(Self(text))
    }
}

/// An execution id given by a client; a malformed one is `malformed_id`.
///
/// # Errors
/// The text is not an execution id.
pub fn parse_id(text: &str) -> Result<ExecutionId, ApiError> {
    text.parse()
        .map_err(|err| ApiError::malformed_id(format!("`{text}` is not an execution id: {err}")))
}
