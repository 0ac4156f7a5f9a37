//! Signing a browser in to a node that has a token: the token given once in a form and kept
//! in an `HttpOnly`, `SameSite=Strict` cookie, which the guard accepts beside the API's
//! `Authorization: Bearer` header.

use crate::{
    Shared, Ui,
    extract::{Form, Query},
    layout,
};
use axum::{
    extract::{Request, State},
    http::{HeaderMap, HeaderValue, Method, StatusCode, header},
    middleware::Next,
    response::{IntoResponse, Redirect, Response},
};
use concepts::ClockFn;
use maud::html;
use serde::Deserialize;
use std::sync::Arc;

/// The cookie that carries the token.
const COOKIE: &str = "stele_token";

/// The token a request carries: its bearer header, else its cookie.
fn carried(headers: &HeaderMap) -> Option<Vec<u8>> {
    if let Some(bearer) = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| server::bearer_token(value.as_bytes()))
    {
        return Some(bearer.to_vec());
    }
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|cookies| cookies.split(';'))
        .find_map(|cookie| cookie.trim().strip_prefix(COOKIE)?.strip_prefix('='))
        .map(|token| token.as_bytes().to_vec())
}

/// Lets a request through when the node has no token or the request carries it; sends a
/// page's reader to `/login`, refuses anything else with 401.
pub(crate) async fn guard<C: ClockFn>(
    State(ui): State<Arc<Ui<C>>>,
    request: Request,
    next: Next,
) -> Response {
    let Some(expected) = &ui.token else {
        return next.run(request).await;
    };
    if carried(request.headers()).is_some_and(|given| server::token_matches(expected, &given)) {
        return next.run(request).await;
    }
    if request.method() == Method::GET {
        let wanted = request
            .uri()
            .path_and_query()
            .map_or("/", |path| path.as_str());
        return Redirect::to(&format!("/login?next={}", layout::url_encode(wanted)))
            .into_response();
    }
    layout::error_page(
        StatusCode::UNAUTHORIZED,
        "Sign in first",
        "this node needs its token: open any page to sign in",
    )
}

#[derive(Debug, Deserialize)]
pub(crate) struct NextQuery {
    next: Option<String>,
}

/// Only a path of this server: `/...`, never `//host` or a scheme, nor what a browser reads
/// as `//host` (`/\host`, `/<tab>/host`: it takes a backslash for a slash and drops tabs and
/// line breaks), nor what a `Location` header cannot hold.
fn local(next: Option<&str>) -> &str {
    match next {
        Some(path)
            if path.starts_with('/')
                && !path.starts_with("//")
                && !path.contains('\\')
                && !path.chars().any(char::is_control) =>
        {
            path
        }
        _ => "/",
    }
}

pub(crate) async fn form(Query(query): Query<NextQuery>) -> Response {
    sign_in(local(query.next.as_deref()), None, StatusCode::OK)
}

fn sign_in(next: &str, refused: Option<&str>, status: StatusCode) -> Response {
    let body = html! {
        h1 { "Sign in" }
        p { "This node needs its token (" code { "--http-token" } " or " code { "STELE_HTTP_TOKEN" } ")." }
        @if let Some(refused) = refused { p.message.refused role="alert" { (refused) } }
        form.login method="post" action="/login" {
            input type="hidden" name="next" value=(next);
            label { "Token " input type="password" name="token" autocomplete="current-password" required; }
            button type="submit" { "Sign in" }
        }
    };
    (status, layout::page("Sign in", body)).into_response()
}

#[derive(Debug, Deserialize)]
pub(crate) struct LoginForm {
    token: String,
    next: Option<String>,
}

pub(crate) async fn login<C: ClockFn>(
    State(ui): Shared<C>,
    Form(form): Form<LoginForm>,
) -> Response {
    let next = local(form.next.as_deref()).to_string();
    match &ui.token {
        None => Redirect::to(&next).into_response(),
        Some(expected) if server::token_matches(expected, form.token.as_bytes()) => {
            let mut response = Redirect::to(&next).into_response();
            // The token is kept as given; one a cookie cannot hold is refused below.
            let fits = form
                .token
                .bytes()
                .all(|byte| byte.is_ascii_graphic() && !matches!(byte, b';' | b',' | b'"' | b'\\'));
            match HeaderValue::from_str(&format!(
                "{COOKIE}={}; HttpOnly; SameSite=Strict; Path=/",
                form.token
            )) {
                Ok(cookie) if fits => {
                    response.headers_mut().insert(header::SET_COOKIE, cookie);
                    response
                }
                _ => sign_in(
                    &next,
                    Some("this token cannot be kept in a cookie: send it as a bearer header"),
                    StatusCode::BAD_REQUEST,
                ),
            }
        }
        Some(_) => sign_in(&next, Some("the token is wrong"), StatusCode::UNAUTHORIZED),
    }
}
