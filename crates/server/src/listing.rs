//! A page of executions: the query of `GET /executions` checked into a [`Listing`] (its
//! filter, cursor and limit), and [`page`], its read and the cursor of the next page. The
//! web UI lists through the same two, so that a filter means the same on a page and in the
//! API.

use crate::{
    error::ApiError,
    extract::parse_id,
    types::{ListAnswer, ListQuery},
    views,
};
use chrono::{DateTime, Utc};
use concepts::{
    DbClient, ExecutionId, ExecutionSummary, ListExecutionsFilter, PARKED_UNTIL, Pagination,
    PendingStateKind,
};

/// Rows or events of a page unless `limit` says otherwise.
pub const DEFAULT_LIMIT: usize = 100;
/// The most rows or events of a page.
pub const MAX_LIMIT: usize = 1_000;

/// `limit`, checked: 1 to [`MAX_LIMIT`].
pub(crate) fn limit(limit: Option<usize>) -> Result<usize, ApiError> {
    match limit.unwrap_or(DEFAULT_LIMIT) {
        0 => Err(ApiError::malformed_query("`limit` must be at least 1")),
        n if n > MAX_LIMIT => Err(ApiError::malformed_query(format!(
            "`limit` is at most {MAX_LIMIT}; read further pages with `cursor`"
        ))),
        n => Ok(n),
    }
}

/// A cursor, `<created_at>~<id>` of the last row of the previous page.
fn cursor(text: &str) -> Result<(DateTime<Utc>, ExecutionId), ApiError> {
    let malformed = || {
        ApiError::malformed_query(format!(
            "`{text}` is not a cursor: pass the `next_cursor` of the previous page as it is"
        ))
    };
    let (at, id) = text.split_once('~').ok_or_else(malformed)?;
    let at = DateTime::parse_from_rfc3339(at).map_err(|_| malformed())?;
    let id = id.parse().map_err(|_| malformed())?;
    Ok((at.with_timezone(&Utc), id))
}

fn cursor_of(row: &ExecutionSummary) -> String {
    format!(
        "{}~{}",
        row.created_at
            .to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
        row.execution_id
    )
}

fn time(name: &str, text: &str) -> Result<DateTime<Utc>, ApiError> {
    DateTime::parse_from_rfc3339(text)
        .map(|at| at.with_timezone(&Utc))
        .map_err(|err| {
            ApiError::malformed_query(format!(
                "`{name}={text}` is not a time: {err} (RFC 3339, e.g. 2026-01-31T12:00:00Z)"
            ))
        })
}

/// What one page lists: the filter, the cursor it starts after and its length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listing {
    /// The filters, checked.
    pub filter: ListExecutionsFilter,
    /// The `next_cursor` of the previous page, as the client gave it.
    pub cursor: Option<String>,
    /// Rows, 1 to [`MAX_LIMIT`].
    pub limit: usize,
}

impl Listing {
    /// The children of `parent`, a page after `cursor`.
    ///
    /// # Errors
    /// A limit out of range.
    pub fn children(
        parent: ExecutionId,
        cursor: Option<String>,
        rows: Option<usize>,
    ) -> Result<Self, ApiError> {
        Ok(Self {
            filter: ListExecutionsFilter {
                parent: Some(parent),
                ..ListExecutionsFilter::default()
            },
            cursor,
            limit: limit(rows)?,
        })
    }
}

impl TryFrom<ListQuery> for Listing {
    type Error = ApiError;

    /// The query checked: every refusal is a `malformed_query` (or `malformed_id` for the
    /// parent) saying what to write instead.
    fn try_from(query: ListQuery) -> Result<Self, ApiError> {
        let ListQuery {
            state: only_state,
            function,
            top_level,
            parent,
            created_after,
            created_before,
            id_prefix,
            parked,
            cursor,
            limit: rows,
        } = query;
        let filter = ListExecutionsFilter {
            ffqn: function
                .map(|text| {
                    text.parse().map_err(|err| {
                        ApiError::malformed_query(format!(
                            "`function={text}` is not a function: {err}"
                        ))
                    })
                })
                .transpose()?,
            state: only_state
                .map(|text| text.parse::<PendingStateKind>())
                .transpose()
                .map_err(ApiError::malformed_query)?,
            top_level_only: top_level.unwrap_or(false),
            parent: parent.as_deref().map(parse_id).transpose()?,
            created_after: created_after
                .map(|text| time("created_after", &text))
                .transpose()?,
            created_before: created_before
                .map(|text| time("created_before", &text))
                .transpose()?,
            id_prefix: id_prefix
                .map(|prefix| {
                    if prefix.chars().any(char::is_control) {
                        Err(ApiError::malformed_query(format!(
                            "`id_prefix={}` holds a control character; an id has none",
                            prefix.escape_debug()
                        )))
                    } else {
                        Ok(prefix)
                    }
                })
                .transpose()?,
            pending_from: parked.unwrap_or(false).then_some(PARKED_UNTIL),
        };
        Ok(Self {
            filter,
            cursor,
            limit: limit(rows)?,
        })
    }
}

/// One page of `listing`, newest first, and the cursor of the next (`None` on the last).
///
/// # Errors
/// A malformed cursor; the store's failure.
pub async fn page(db: &dyn DbClient, listing: Listing) -> Result<ListAnswer, ApiError> {
    let Listing {
        filter,
        cursor: after,
        limit,
    } = listing;
    let pagination = Pagination {
        cursor: after.as_deref().map(cursor).transpose()?,
        length: limit,
    };
    let rows = db
        .list_executions(filter, pagination)
        .await
        .map_err(|err| ApiError::store("cannot list executions", &err))?;
    let next_cursor = if rows.len() < limit {
        None
    } else {
        rows.last().map(cursor_of)
    };
    Ok(ListAnswer {
        executions: rows.iter().map(views::summary).collect(),
        next_cursor,
    })
}
