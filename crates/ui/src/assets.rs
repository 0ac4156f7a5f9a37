//! The UI's own stylesheet and script, compiled into the binary: no third-party file is
//! served, and a page needs nothing but this server.

use axum::{http::header, response::IntoResponse};

const CSS: &str = include_str!("../assets/app.css");
const JS: &str = include_str!("../assets/app.js");

/// Cached for an hour: they change only with the binary.
const CACHE: &str = "public, max-age=3600";

pub(crate) async fn css() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, CACHE),
        ],
        CSS,
    )
}

pub(crate) async fn js() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, CACHE),
        ],
        JS,
    )
}
