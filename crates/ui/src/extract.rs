//! The extractors of the pages: axum's `Query` and `Form`, whose refusals are pages that say
//! what was wrong (axum's own are plain text).

use crate::layout::error_page;
use axum::{
    extract::{FromRequest, FromRequestParts, Request},
    http::{StatusCode, request::Parts},
    response::Response,
};
use serde::de::DeserializeOwned;

/// The query string, deserialized; one that does not fit is a 400 page naming why.
pub(crate) struct Query<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for Query<T> {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Response> {
        match axum::extract::Query::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(value)) => Ok(Self(value)),
            Err(rejection) => Err(error_page(
                rejection.status(),
                "Bad request",
                &format!(
                    "the address's query is not one this page takes: {}",
                    rejection.body_text()
                ),
            )),
        }
    }
}

/// A form's fields, deserialized; a body that is not a form of this page (another content
/// type, a missing field, one too large) is a page with axum's status naming why.
pub(crate) struct Form<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for Form<T> {
    type Rejection = Response;

    async fn from_request(request: Request, state: &S) -> Result<Self, Response> {
        match axum::Form::from_request(request, state).await {
            Ok(axum::Form(value)) => Ok(Self(value)),
            Err(rejection) => {
                let status = rejection.status();
                let message = if status == StatusCode::PAYLOAD_TOO_LARGE {
                    "the form is larger than this server takes (the API's body limit, 1 MiB by \
                     default)"
                        .to_string()
                } else {
                    let reason = rejection.body_text();
                    format!("the form is not one this page sends: {reason}")
                };
                Err(error_page(status, "Refused", &message))
            }
        }
    }
}
