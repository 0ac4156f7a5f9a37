//! The frame every page shares (head, navigation, the live toggle), the headers of every
//! response (a content security policy that runs only this server's script), and the small
//! pieces pages are made of: state badges, times, durations, links.

use axum::{
    extract::Request,
    http::{HeaderValue, StatusCode, header},
    middleware::Next,
    response::{Html, IntoResponse, Response},
};
use chrono::{DateTime, Utc};
use maud::{DOCTYPE, Markup, html};
use server::types::{StateData, StateView};
use std::fmt::Write as _;

/// Scripts and styles of this server only, nothing inline; no frame may hold a page.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                      connect-src 'self'; form-action 'self'; base-uri 'none'; \
                      frame-ancestors 'none'";

/// Adds the security headers to every response of the UI.
pub(crate) async fn headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    response
}

/// A whole page: `title` in the head and as the tab's name, `body` in `<main>`.
pub(crate) fn page(title: &str, body: Markup) -> Html<String> {
    Html(
        html! {
            (DOCTYPE)
            html lang="en" {
                head {
                    meta charset="utf-8";
                    meta name="viewport" content="width=device-width, initial-scale=1";
                    title { (title) " · Stele" }
                    link rel="stylesheet" href="/assets/app.css";
                    script src="/assets/app.js" defer {}
                }
                body {
                    header.top {
                        a.brand href="/" { "Stele" }
                        nav {
                            a href="/" { "Overview" }
                            a href="/executions" { "Executions" }
                            a href="/schedules" { "Schedules" }
                        }
                        button #live-toggle type="button" hidden aria-pressed="false" { "Pause live updates" }
                    }
                    main { (body) }
                }
            }
        }
        .into_string(),
    )
}

/// An error as a page, with its status.
pub(crate) fn error_page(status: StatusCode, title: &str, message: &str) -> Response {
    (
        status,
        page(
            title,
            html! {
                h1 { (title) }
                p.message.refused role="alert" { (message) }
                p { a href="/executions" { "All executions" } }
            },
        ),
    )
        .into_response()
}

/// The API's refusal as a page.
pub(crate) fn api_error(err: &server::ApiError) -> Response {
    let title = match err.status() {
        StatusCode::NOT_FOUND => "Not found",
        StatusCode::BAD_REQUEST => "Bad request",
        StatusCode::CONFLICT => "Refused",
        StatusCode::SERVICE_UNAVAILABLE => "Store unavailable",
        _ => "Error",
    };
    error_page(err.status(), title, err.message())
}

/// The state's kind: `pending`, `locked`, `blocked`, `finished`, and for a finished one the
/// kind of its result.
pub(crate) fn state_class(state: &StateData) -> (&'static str, String) {
    match state {
        StateData::Pending { .. } => ("pending", "pending".to_string()),
        StateData::Parked { .. } => ("parked", "parked".to_string()),
        StateData::Locked { .. } => ("locked", "locked".to_string()),
        StateData::Blocked { .. } => ("blocked", "blocked".to_string()),
        StateData::Finished { result_kind, .. } => ("finished", result_kind.clone()),
    }
}

/// The state as a badge: its kind, and for a finished execution how it ended.
pub(crate) fn badge(state: &StateView) -> Markup {
    let (kind, label) = state_class(&state.data);
    let tone = match (&state.data, label.as_str()) {
        (StateData::Finished { .. }, "ok") => "ok",
        (StateData::Finished { .. }, _) | (StateData::Parked { .. }, _) => "bad",
        _ => kind,
    };
    let label = match &state.data {
        StateData::Finished { .. } => format!("finished: {label}"),
        _ => label,
    };
    html! { span.badge.(tone) data-state=(kind) title=(state.summary) { (label) } }
}

/// `12:00:01.234`, with the whole time (and the date) on hover.
pub(crate) fn time(at: DateTime<Utc>) -> Markup {
    html! {
        time datetime=(at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true))
            title=(at.format("%Y-%m-%d %H:%M:%S%.6f UTC")) {
            (at.format("%Y-%m-%d %H:%M:%S%.3f"))
        }
    }
}

/// `850 ms`, `12.3 s`, `4 min 5 s`, `3 h 2 min`, `2 d 3 h`.
pub(crate) fn duration(millis: i64) -> String {
    let millis = millis.max(0);
    match millis {
        0..1_000 => format!("{millis} ms"),
        1_000..60_000 => format!("{:.1} s", millis as f64 / 1000.0),
        60_000..3_600_000 => format!("{} min {} s", millis / 60_000, millis / 1000 % 60),
        3_600_000..86_400_000 => format!("{} h {} min", millis / 3_600_000, millis / 60_000 % 60),
        _ => format!("{} d {} h", millis / 86_400_000, millis / 3_600_000 % 24),
    }
}

/// The link to an execution's page.
pub(crate) fn execution_link(id: &str) -> Markup {
    html! { a.id href={ "/executions/" (url_encode(id)) } { code { (id) } } }
}

/// Percent-encodes everything but unreserved characters, for a path segment or a query
/// value.
pub(crate) fn url_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(byte));
        } else {
            let _ = write!(out, "%{byte:02X}");
        }
    }
    out
}

/// `a=1&b=2`, of the pairs whose value is set.
pub(crate) fn query(pairs: &[(&str, Option<&str>)]) -> String {
    pairs
        .iter()
        .filter_map(|(name, value)| {
            value
                .filter(|value| !value.is_empty())
                .map(|value| format!("{name}={}", url_encode(value)))
        })
        .collect::<Vec<_>>()
        .join("&")
}
