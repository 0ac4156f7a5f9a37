//! The pages: the overview (`overview.rs`), the list (`list.rs`), one execution
//! (`execution.rs`) and the schedules (`schedules.rs`), each read from the store through the API's own reads and documents.

pub(crate) mod execution;
pub(crate) mod list;
pub(crate) mod overview;
pub(crate) mod schedules;

use crate::layout;
use axum::{http::StatusCode, response::Response};

/// Any other path.
pub(crate) async fn not_found() -> Response {
    layout::error_page(
        StatusCode::NOT_FOUND,
        "Not found",
        "no such page: the executions are under /executions, the API under /api/v1",
    )
}
