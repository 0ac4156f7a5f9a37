//! The guards every request passes before its handler: the bearer token, compared in
//! constant time, and the read-only mode, which lets only reads through.

use crate::{ApiOptions, error::ApiError};
use axum::{
    extract::{Request, State},
    http::{Method, header},
    middleware::Next,
    response::{IntoResponse, Response},
};
use std::sync::Arc;
use subtle::ConstantTimeEq;

/// What the guards check, from the options.
#[derive(Debug)]
pub(crate) struct Guard {
    token: Option<Vec<u8>>,
    read_only: bool,
}

impl Guard {
    pub(crate) fn new(options: &ApiOptions) -> Self {
        Self {
            token: options
                .token
                .as_ref()
                .map(|token| token.as_bytes().to_vec()),
            read_only: options.read_only,
        }
    }

    /// `Ok` when `request` may reach its handler.
    fn check(&self, request: &Request) -> Result<(), ApiError> {
        if let Some(expected) = &self.token {
            let given = request
                .headers()
                .get(header::AUTHORIZATION)
                .ok_or_else(|| {
                    ApiError::unauthorized(
                        "this server needs a token: send `Authorization: Bearer <token>`",
                    )
                })?
                .as_bytes();
            let token = given
                .strip_prefix(b"Bearer ")
                .or_else(|| given.strip_prefix(b"bearer "))
                .unwrap_or_default();
            if !token_matches(expected, token) {
                return Err(ApiError::unauthorized(
                    "the token is wrong: send `Authorization: Bearer <token>` with the server's \
                     token",
                ));
            }
        }
        if self.read_only && !matches!(*request.method(), Method::GET | Method::HEAD) {
            return Err(ApiError::read_only());
        }
        Ok(())
    }
}

/// True when `given` is the `expected` token: compared in constant time over the token's
/// bytes; a length that differs is refused all the same, and reveals only the length. The
/// web UI checks its cookie with it too.
#[must_use]
pub fn token_matches(expected: &[u8], given: &[u8]) -> bool {
    bool::from(given.ct_eq(expected))
}

/// The middleware: refuses what [`Guard::check`] refuses, passes the rest on.
pub(crate) async fn guard(
    State(guard): State<Arc<Guard>>,
    request: Request,
    next: Next,
) -> Response {
    match guard.check(&request) {
        Ok(()) => next.run(request).await,
        Err(err) => err.into_response(),
    }
}
