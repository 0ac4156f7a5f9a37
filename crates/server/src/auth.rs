//! The guards every request passes before its handler: the bearer token, compared in
//! constant time, and the read-only mode, which lets only reads through; and, on a loopback
//! server without a token, the name a request is addressed to ([`foreign_name`]).

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
            let token = bearer_token(given).unwrap_or_default();
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

/// The token of an `Authorization` header's value `Bearer <token>`, the scheme's name in any
/// case (as HTTP's authentication schemes are); `None` for another scheme. The web UI reads
/// its header with it too.
#[must_use]
pub fn bearer_token(value: &[u8]) -> Option<&[u8]> {
    let (scheme, token) = value.split_at_checked(7)?;
    scheme.eq_ignore_ascii_case(b"bearer ").then_some(token)
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

/// The name `request` is addressed to when another site could own it: `None` for an IP
/// address, `localhost` or a name under `.localhost` (or no name: a browser always sends
/// one). A server on loopback without a token answers only those. Otherwise a page whose own
/// name its owner points at 127.0.0.1 (DNS rebinding) would be same-origin with the server,
/// and could read its pages and write through it.
pub(crate) fn foreign_name<B>(request: &axum::http::Request<B>) -> Option<String> {
    let authority = match request.uri().authority() {
        Some(authority) => authority.as_str(),
        None => {
            let host = request.headers().get(header::HOST)?;
            match host.to_str() {
                Ok(host) => host,
                Err(_) => return Some(String::from_utf8_lossy(host.as_bytes()).into_owned()),
            }
        }
    };
    let host = match authority.strip_prefix('[') {
        // `[::1]:8080`: an IPv6 address has colons of its own.
        Some(bracketed) => bracketed
            .split_once(']')
            .map_or(bracketed, |(host, _)| host),
        None => authority
            .rsplit_once(':')
            .map_or(authority, |(host, _port)| host),
    };
    let host = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
    let local = host.parse::<std::net::IpAddr>().is_ok()
        || host == "localhost"
        || host.ends_with(".localhost");
    (!local).then(|| authority.to_string())
}
