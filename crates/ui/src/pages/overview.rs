//! `/`: the overview. Per function, its unfinished executions by state, and what finished
//! (ok or not) and was retried in the last 5 minutes and the hour: the figures of the node's
//! metrics ([`node::recent::Recent`]) when the UI is given them, else the executions created
//! in the last hour that finished, read from the store; the oldest due execution's age (one
//! bounded read per function, `DbClient::due_backlog`, as the node's gauge reads it); the
//! leases held and by which executors.
//!
//! Read through the listing the API serves, a bounded page per state ([`SAMPLE`] rows), so
//! that the page costs the same on a store of any size; a count that reaches the bound is
//! shown as at least that many.

use crate::{Shared, layout};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, TimeDelta, Utc};
use concepts::ClockFn;
use maud::{Markup, html};
use server::{
    ApiError,
    listing::{self, Listing},
    types::{ListQuery, StateData, SummaryView},
};
use std::{collections::BTreeMap, time::Duration};

/// Rows read per state at most.
const SAMPLE: usize = 1_000;

/// Counts of one function.
#[derive(Debug, Default)]
struct Counts {
    pending: usize,
    locked: usize,
    blocked: usize,
    ok_5m: usize,
    failed_5m: usize,
    ok_1h: usize,
    failed_1h: usize,
    retried_5m: Option<u64>,
    retried_1h: Option<u64>,
}

/// A count, `1000+` when it reached the bound of what was read.
fn count(n: usize, capped: bool) -> String {
    if capped && n > 0 {
        format!("≥{n}")
    } else {
        n.to_string()
    }
}

async fn rows(
    db: &dyn concepts::DbClient,
    state: &str,
    created_after: Option<DateTime<Utc>>,
) -> Result<(Vec<SummaryView>, bool), ApiError> {
    let listing = Listing::try_from(ListQuery {
        state: Some(state.to_string()),
        created_after: created_after
            .map(|at| at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)),
        limit: Some(SAMPLE),
        ..ListQuery::default()
    })?;
    let page = listing::page(db, listing).await?;
    let capped = page.next_cursor.is_some();
    Ok((page.executions, capped))
}

pub(crate) async fn page<C: ClockFn>(axum::extract::State(ui): Shared<C>) -> Response {
    let now = ui.clock.now();
    let hour_ago = now - TimeDelta::hours(1);
    let read = async {
        Ok::<_, ApiError>((
            rows(ui.db.as_ref(), "pending", None).await?,
            rows(ui.db.as_ref(), "locked", None).await?,
            rows(ui.db.as_ref(), "blocked", None).await?,
            // The node's own counts replace these when the UI has them: not read then.
            if ui.recent.is_some() {
                (Vec::new(), false)
            } else {
                rows(ui.db.as_ref(), "finished", Some(hour_ago)).await?
            },
        ))
    };
    let (pending, locked, blocked, finished) = match read.await {
        Ok(read) => read,
        Err(err) => return layout::api_error(&err),
    };
    // The oldest due execution of each function, exact however long the backlog: one read of
    // the index the locks read, as the node's gauge reads it.
    let mut oldest_due_at: Option<(String, DateTime<Utc>)> = None;
    for function in ui.catalog.functions().filter(|f| !f.ffqn().is_stub()) {
        match ui.db.due_backlog(function.ffqn(), now, 0).await {
            Ok(backlog) => {
                if let Some(at) = backlog.oldest_due_at
                    && oldest_due_at
                        .as_ref()
                        .is_none_or(|(_, oldest)| at < *oldest)
                {
                    oldest_due_at = Some((function.ffqn().to_string(), at));
                }
            }
            Err(err) => {
                return layout::api_error(&ApiError::store("reading the due backlog", &err));
            }
        }
    }
    let mut counts: BTreeMap<String, Counts> = ui
        .catalog
        .functions()
        .map(|function| (function.ffqn().to_string(), Counts::default()))
        .collect();
    let mut oldest_due: Option<&SummaryView> = None;
    for row in &pending.0 {
        counts.entry(row.function.clone()).or_default().pending += 1;
        // A promise waits for an answer from outside, never for an executor.
        if let StateData::Pending { scheduled_at } = &row.state.data
            && *scheduled_at <= now
            && !crate::actions::is_promise(&row.function)
            && oldest_due.is_none_or(|oldest| match &oldest.state.data {
                StateData::Pending { scheduled_at: old } => scheduled_at < old,
                _ => true,
            })
        {
            oldest_due = Some(row);
        }
    }
    let mut leases: BTreeMap<&str, (usize, Option<DateTime<Utc>>)> = BTreeMap::new();
    for row in &locked.0 {
        counts.entry(row.function.clone()).or_default().locked += 1;
        if let StateData::Locked {
            executor_id,
            lock_expires_at,
            ..
        } = &row.state.data
        {
            let held = leases.entry(executor_id).or_default();
            held.0 += 1;
            held.1 = Some(
                held.1
                    .map_or(*lock_expires_at, |at| at.min(*lock_expires_at)),
            );
        }
    }
    for row in &blocked.0 {
        counts.entry(row.function.clone()).or_default().blocked += 1;
    }
    let five_ago = now - TimeDelta::minutes(5);
    for row in &finished.0 {
        if let StateData::Finished {
            finished_at,
            result_kind,
            ..
        } = &row.state.data
        {
            let entry = counts.entry(row.function.clone()).or_default();
            let ok = result_kind == "ok";
            if *finished_at >= hour_ago {
                if ok {
                    entry.ok_1h += 1
                } else {
                    entry.failed_1h += 1
                }
            }
            if *finished_at >= five_ago {
                if ok {
                    entry.ok_5m += 1
                } else {
                    entry.failed_5m += 1
                }
            }
        }
    }
    // What this node counted itself (its metrics): exact, and with the retries.
    let counted_by_node = ui.recent.as_ref().map(|recent| {
        // Counted by the node: what it did not count is none, whatever the store says.
        for entry in counts.values_mut() {
            (entry.ok_5m, entry.failed_5m, entry.retried_5m) = (0, 0, Some(0));
            (entry.ok_1h, entry.failed_1h, entry.retried_1h) = (0, 0, Some(0));
        }
        for (window, minutes) in [
            (Duration::from_secs(300), 5),
            (Duration::from_secs(3600), 60),
        ] {
            for (function, seen) in recent.within(window) {
                let entry = counts.entry(function).or_default();
                let (ok, failed) = (
                    usize::try_from(seen.ok).unwrap_or(usize::MAX),
                    usize::try_from(seen.failed).unwrap_or(usize::MAX),
                );
                if minutes == 5 {
                    (entry.ok_5m, entry.failed_5m, entry.retried_5m) =
                        (ok, failed, Some(seen.retried));
                } else {
                    (entry.ok_1h, entry.failed_1h, entry.retried_1h) =
                        (ok, failed, Some(seen.retried));
                }
            }
        }
        recent.counted_for()
    });
    let capped_finished = finished.1 && counted_by_node.is_none();
    let retried = |value: Option<u64>| value.map_or_else(|| "—".to_string(), |n| n.to_string());
    let body = html! {
        h1 { "Overview" }
        (summary(oldest_due_at.as_ref(), oldest_due, now))
        h2 { "Functions" }
        table.overview {
            thead {
                tr { th rowspan="2" { "Function" } th colspan="3" { "Unfinished" } th colspan="3" { "Last 5 min" } th colspan="3" { "Last hour" } }
                tr { th.num { "pending" } th.num { "locked" } th.num { "blocked" } th.num { "finished ok" } th.num { "not ok" } th.num { "retried" } th.num { "finished ok" } th.num { "not ok" } th.num { "retried" } }
            }
            tbody {
                @for (function, c) in &counts {
                    tr {
                        td { a href={ "/executions?" (layout::query(&[("function", Some(function))])) } { code { (function) } } }
                        td.num { a href={ "/executions?" (layout::query(&[("function", Some(function)), ("state", Some("pending"))])) } { (count(c.pending, pending.1)) } }
                        td.num { a href={ "/executions?" (layout::query(&[("function", Some(function)), ("state", Some("locked"))])) } { (count(c.locked, locked.1)) } }
                        td.num { a href={ "/executions?" (layout::query(&[("function", Some(function)), ("state", Some("blocked"))])) } { (count(c.blocked, blocked.1)) } }
                        td.num { (count(c.ok_5m, capped_finished)) } td.num.bad[c.failed_5m > 0] { (count(c.failed_5m, capped_finished)) } td.num { (retried(c.retried_5m)) }
                        td.num { (count(c.ok_1h, capped_finished)) } td.num.bad[c.failed_1h > 0] { (count(c.failed_1h, capped_finished)) } td.num { (retried(c.retried_1h)) }
                    }
                }
            }
        }
        p.note {
            @match counted_by_node {
                Some(counted) => { "The last 5 minutes and hour are what this node's executors finished and retried (its metrics, counted for " (layout::duration(i64::try_from(counted.as_millis()).unwrap_or(i64::MAX))) " so far). " }
                None => { "The last 5 minutes and hour are read from the store: executions created in the last hour that finished since; retries are counted by a node's metrics, which this server was not given. " }
            }
            "Unfinished counts read at most " (SAMPLE) " executions per state; ≥ marks one that reached it."
        }
        h2 { "Leases" }
        @if leases.is_empty() { p { "No execution is locked." } } @else {
            table.leases {
                thead { tr { th { "Executor" } th { "Leases held" } th { "Next expiry" } } }
                tbody {
                    @for (executor, (held, next)) in &leases {
                        tr { td { code { (executor) } } td.num { (count(*held, locked.1)) } td { @if let Some(next) = next { (layout::time(*next)) } } }
                    }
                }
            }
        }
    };
    layout::page("Overview", body).into_response()
}

/// The oldest due execution: its function and due time (`oldest`, exact), and the row of
/// the pending executions read that was due then, if that page held it (for its link).
fn summary(
    oldest: Option<&(String, DateTime<Utc>)>,
    row: Option<&SummaryView>,
    now: DateTime<Utc>,
) -> Markup {
    let row = row.filter(|row| {
        // To the microsecond, as the SQL backends keep the due time.
        matches!(&row.state.data, StateData::Pending { scheduled_at }
            if oldest.is_some_and(|(_, at)| at.timestamp_micros() == scheduled_at.timestamp_micros()))
    });
    html! {
        p.oldest #oldest-due {
            @match oldest {
                Some((function, at)) => {
                    "The oldest due execution, "
                    @match row { Some(row) => (layout::execution_link(&row.id)), None => { "one of " code { (function) } } }
                    ", has waited "
                    strong { (layout::duration(now.signed_duration_since(*at).num_milliseconds())) }
                    " for an executor."
                }
                None => "No execution is due: every pending one waits for its time.",
            }
        }
    }
}
