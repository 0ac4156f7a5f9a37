//! `stele executions list` and `stele executions show`: read-only inspection. Neither ever
//! creates a database.

use super::{CliError, Exit, print, print_json, render, with_store};
use cli::database::{DatabaseUrl, OpenMode};
use concepts::{
    ExecutionEvent, ExecutionEventInner, ExecutionId, ExecutionLog, ExecutionSummary, FunctionFqn,
    JoinSetResponseEventOuter, ListExecutionsFilter, Pagination, PendingState, PendingStateKind,
    Version,
};
use serde::Serialize;
use std::fmt::Write as _;

#[derive(Debug, clap::Subcommand)]
pub enum ExecutionsCommand {
    /// List executions, newest first.
    List(ListArgs),
    /// Show one execution: its event log as a timeline, its join set responses and its state.
    Show(ShowArgs),
}

#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// Only executions of this function, e.g. stele:demo/activities.flaky.
    #[arg(long, value_name = "FFQN")]
    ffqn: Option<String>,
    /// Only executions in this state: pending, locked, blocked or finished.
    #[arg(long, value_name = "STATE")]
    state: Option<String>,
    /// Only top-level executions (no children).
    #[arg(long)]
    top_level: bool,
    /// At most this many rows.
    #[arg(long, default_value_t = 50, value_name = "N")]
    limit: usize,
    /// Print a JSON array instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
pub struct ShowArgs {
    /// The execution id, e.g. E_01JZ8ZK3F8G3N9Q7V5W2X4Y6Z0 or E_01JZ8ZK3F8G3N9Q7V5W2X4Y6Z0.n:children_1.
    id: String,
    /// Print one JSON document (events, responses, state) instead of a timeline.
    #[arg(long)]
    json: bool,
}

pub async fn run(url: &DatabaseUrl, command: ExecutionsCommand) -> Result<(), CliError> {
    match command {
        ExecutionsCommand::List(args) => list(url, args).await,
        ExecutionsCommand::Show(args) => show(url, args).await,
    }
}

fn bad_input(what: &str, err: impl std::fmt::Display) -> CliError {
    CliError::new(Exit::Usage, format!("invalid {what}: {err}"))
}

/// One row of `list --json`.
#[derive(Serialize)]
struct ListRow<'a> {
    execution_id: &'a ExecutionId,
    ffqn: &'a FunctionFqn,
    state: PendingStateKind,
    pending_state: &'a PendingState,
    created_at: chrono::DateTime<chrono::Utc>,
    scheduled_at: chrono::DateTime<chrono::Utc>,
    next_version: Version,
}

async fn list(url: &DatabaseUrl, args: ListArgs) -> Result<(), CliError> {
    // Arguments are checked before the database is opened.
    let ffqn = args
        .ffqn
        .as_deref()
        .map(str::parse::<FunctionFqn>)
        .transpose()
        .map_err(|err| bad_input("--ffqn", err))?;
    let state = args
        .state
        .as_deref()
        .map(str::parse::<PendingStateKind>)
        .transpose()
        .map_err(|err| bad_input("--state", err))?;
    if args.limit == 0 {
        return Err(bad_input("--limit", "must be at least 1"));
    }
    let filter = ListExecutionsFilter {
        ffqn,
        state,
        top_level_only: args.top_level,
    };
    let pagination = Pagination {
        cursor: None,
        length: args.limit,
    };
    let rows = with_store(url, OpenMode::ExistingOnly, async |db| {
        db.list_executions(filter, pagination)
            .await
            .map_err(|err| CliError::db(format!("cannot list the executions in {url}"), err))
    })
    .await?;
    if args.json {
        let rows: Vec<ListRow<'_>> = rows.iter().map(list_row).collect();
        return print_json(&rows);
    }
    if rows.is_empty() {
        return print("no executions match\n");
    }
    let mut table = render::table(["ID", "FUNCTION", "STATE", "CREATED", "NEXT VERSION"]);
    for row in &rows {
        table.add_row([
            row.execution_id.to_string(),
            row.ffqn.to_string(),
            render::state(&row.pending_state),
            render::datetime(row.created_at),
            row.next_version.to_string(),
        ]);
    }
    let mut text = render::finish(&table);
    if rows.len() == args.limit {
        let _ = writeln!(
            text,
            "(the {} newest shown; --limit N shows more)",
            rows.len()
        );
    }
    print(&text)
}

fn list_row(row: &ExecutionSummary) -> ListRow<'_> {
    ListRow {
        execution_id: &row.execution_id,
        ffqn: &row.ffqn,
        state: row.pending_state.kind(),
        pending_state: &row.pending_state,
        created_at: row.created_at,
        scheduled_at: row.scheduled_at,
        next_version: row.next_version,
    }
}

/// One event of `show --json`, with its version.
#[derive(Serialize)]
struct VersionedEvent<'a> {
    version: Version,
    #[serde(flatten)]
    event: &'a ExecutionEvent,
}

/// The document of `show --json`.
#[derive(Serialize)]
struct ShowDocument<'a> {
    execution_id: &'a ExecutionId,
    ffqn: Option<&'a FunctionFqn>,
    state: PendingStateKind,
    pending_state: &'a PendingState,
    next_version: Version,
    events: Vec<VersionedEvent<'a>>,
    responses: &'a [JoinSetResponseEventOuter],
}

async fn show(url: &DatabaseUrl, args: ShowArgs) -> Result<(), CliError> {
    let execution_id: ExecutionId = args
        .id
        .parse()
        .map_err(|err| bad_input("execution id", err))?;
    let log = with_store(url, OpenMode::ExistingOnly, async |db| {
        db.get(&execution_id).await.map_err(|err| match err {
            concepts::DbError::NotFound(_) => CliError::new(
                Exit::NotFound,
                format!("no execution {execution_id} in {url}"),
            ),
            other => CliError::db(format!("cannot read execution {execution_id}"), other),
        })
    })
    .await?;
    if args.json {
        let events = log
            .events
            .iter()
            .zip(0u32..)
            .map(|(event, version)| VersionedEvent {
                version: Version(version),
                event,
            })
            .collect();
        return print_json(&ShowDocument {
            execution_id: &log.execution_id,
            ffqn: log.ffqn(),
            state: log.pending_state.kind(),
            pending_state: &log.pending_state,
            next_version: log.next_version,
            events,
            responses: &log.responses,
        });
    }
    print(&timeline(&log))
}

/// The human form of `show`: a header, the events, the responses.
fn timeline(log: &ExecutionLog) -> String {
    let mut text = String::new();
    let origin = log
        .events
        .first()
        .map_or_else(chrono::DateTime::default, |event| event.created_at);
    let _ = writeln!(text, "Execution  {}", log.execution_id);
    if let Some(ExecutionEventInner::Created {
        ffqn,
        params,
        parent,
        retry_exp_backoff,
        max_retries,
        component_id,
        ..
    }) = log.events.first().map(|event| &event.event)
    {
        let _ = writeln!(text, "Function   {ffqn} (component {component_id})");
        let _ = writeln!(text, "Params     {params}");
        if let Some((parent, join_set)) = parent {
            let _ = writeln!(text, "Parent     {parent} (join set {join_set})");
        }
        let _ = writeln!(
            text,
            "Retries    up to {max_retries}, first backoff {}",
            render::duration(*retry_exp_backoff)
        );
    }
    let _ = writeln!(text, "Created    {}", render::datetime(origin));
    let _ = writeln!(
        text,
        "State      {}",
        render::state_detail(&log.pending_state)
    );
    if let Some(result) = log.finished_result() {
        let _ = writeln!(text, "Result     {}", render::result(result));
    }
    let _ = writeln!(text, "Next version {}", log.next_version);

    let mut events = render::table(["VERSION", "TIME", "ELAPSED", "EVENT", "DETAILS"]);
    for (version, event) in log.events.iter().enumerate() {
        events.add_row([
            version.to_string(),
            render::time(event.created_at),
            render::offset(origin, event.created_at),
            render::event_name(&event.event).to_string(),
            render::event_details(origin, event),
        ]);
    }
    let _ = write!(
        text,
        "\nEvents ({}):\n{}",
        log.events.len(),
        render::finish(&events)
    );

    if log.responses.is_empty() {
        let _ = writeln!(text, "\nResponses: none");
    } else {
        let mut responses =
            render::table(["#", "TIME", "ELAPSED", "JOIN SET", "RESPONSE", "DETAILS"]);
        for (index, response) in log.responses.iter().enumerate() {
            let (kind, details) = render::response(response);
            responses.add_row([
                (index + 1).to_string(),
                render::time(response.created_at),
                render::offset(origin, response.created_at),
                response.event.join_set_id.to_string(),
                kind.to_string(),
                details,
            ]);
        }
        let _ = write!(
            text,
            "\nResponses ({}):\n{}",
            log.responses.len(),
            render::finish(&responses)
        );
    }
    text
}
