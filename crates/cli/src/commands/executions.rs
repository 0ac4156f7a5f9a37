//! `stele executions`: the read-only inspection `list` and `show` (which never create a
//! database nor migrate one), and the dispatch of the operator's commands of `operate`.

use super::{
    CliError, bad_input, operate, parse_execution_id, print, print_json, render, with_store,
};
use cli::database::{DatabaseUrl, OpenMode};
use concepts::{
    DbConnection, ExecutionEvent, ExecutionEventInner, ExecutionId, ExecutionLog, ExecutionSummary,
    FunctionFqn, HistoryEvent, JoinSetId, JoinSetRequest, JoinSetResponseEventOuter,
    ListExecutionsFilter, Pagination, PendingState, PendingStateKind, Version,
};
use serde::Serialize;
use std::{collections::HashMap, fmt::Write as _};

#[derive(Debug, clap::Subcommand)]
pub enum ExecutionsCommand {
    /// List executions, newest first.
    List(ListArgs),
    /// Show one execution: its event log as a timeline, its join set responses and its state.
    Show(ShowArgs),
    /// Print one execution's history as JSON (its log, its responses and its children's
    /// functions and parameters): what `workflow::Replayer` replays in a test, without a store,
    /// to check that changed workflow code still agrees with it.
    Export(ExportArgs),
    /// Wait until an execution finishes and print its result (read-only).
    ///
    /// The result is printed whatever it is (exit 0); `--json` gives its kind and value to
    /// scripts. An unknown id is exit 3, a --timeout that runs out exit 1.
    Wait(operate::WaitArgs),
    /// Cancel an execution that has not finished, and every unfinished descendant.
    ///
    /// Each finishes with `Cancelled` and the reason; a parent waiting for one gets that
    /// result. Prints how many executions were cancelled, or, for an execution that had already
    /// finished, how it finished (not an error: nothing is written, exit 0).
    Cancel(operate::CancelArgs),
    /// Complete a durable promise (an execution of a stub function `stele:stub.<name>`) with
    /// a value, answering the workflow that awaits it.
    ///
    /// Completing it again with the same value is not an error (nothing written). Another
    /// value after it was completed, an execution that is not a stub and malformed JSON are
    /// bad input (exit 2); an unknown id is exit 3.
    Complete(operate::CompleteArgs),
    /// Remove finished executions: each top-level execution that finished before the given
    /// age, with its whole tree, in batches of one transaction each.
    ///
    /// A tree with a member that has not finished is kept (and counted). Prints the trees and
    /// executions removed and the trees kept.
    Prune(operate::PruneArgs),
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
    /// Only parked executions: their replay diverged from their log, and they wait for code
    /// that agrees with it (`show` says where it diverged).
    #[arg(long)]
    parked: bool,
    /// At most this many rows (1 to 1000000).
    #[arg(long, default_value_t = 50, value_name = "N", allow_negative_numbers = true,
          value_parser = super::whole_number(1, 1_000_000))]
    limit: u32,
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

#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    /// The execution id.
    id: String,
}

pub async fn run(url: &DatabaseUrl, command: ExecutionsCommand) -> Result<(), CliError> {
    match command {
        ExecutionsCommand::List(args) => list(url, args).await,
        ExecutionsCommand::Show(args) => show(url, args).await,
        ExecutionsCommand::Export(args) => export(url, args).await,
        ExecutionsCommand::Wait(args) => operate::wait(url, args).await,
        ExecutionsCommand::Cancel(args) => operate::cancel(url, args).await,
        ExecutionsCommand::Complete(args) => operate::complete(url, args).await,
        ExecutionsCommand::Prune(args) => operate::prune(url, args).await,
    }
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
    let filter = ListExecutionsFilter {
        ffqn,
        state,
        top_level_only: args.top_level,
        pending_from: args.parked.then_some(concepts::PARKED_UNTIL),
        ..ListExecutionsFilter::default()
    };
    let pagination = Pagination {
        cursor: None,
        length: args.limit as usize,
    };
    let rows = with_store(url, OpenMode::Inspection, async |db| {
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
    if rows.len() == args.limit as usize {
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

async fn export(url: &DatabaseUrl, args: ExportArgs) -> Result<(), CliError> {
    let execution_id = parse_execution_id(&args.id)?;
    let history = with_store(url, OpenMode::Inspection, async |db| {
        workflow::RecordedHistory::read(db.as_ref(), &execution_id)
            .await
            .map_err(|err| match err {
                concepts::DbError::NotFound(_) => CliError::no_execution(&execution_id, url),
                other => CliError::db(format!("cannot read execution {execution_id}"), other),
            })
    })
    .await?;
    print_json(&history)
}

async fn show(url: &DatabaseUrl, args: ShowArgs) -> Result<(), CliError> {
    let execution_id = parse_execution_id(&args.id)?;
    let json = args.json;
    let (log, children) = with_store(url, OpenMode::Inspection, async |db| {
        let log = db.get(&execution_id).await.map_err(|err| match err {
            concepts::DbError::NotFound(_) => CliError::no_execution(&execution_id, url),
            other => CliError::db(format!("cannot read execution {execution_id}"), other),
        })?;
        let children = if json {
            String::new()
        } else {
            children_tree(db.as_ref(), &log).await?
        };
        Ok((log, children))
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
    print(&format!("{}{children}", timeline(&log)))
}

/// The most children `show` lists, over every level of the tree.
const CHILDREN_SHOWN: usize = 100;

/// The children an execution's log requested, in request order.
fn child_requests(log: &ExecutionLog) -> Vec<ExecutionId> {
    log.events
        .iter()
        .filter_map(|event| match &event.event {
            ExecutionEventInner::HistoryEvent {
                event:
                    HistoryEvent::JoinSetRequest {
                        request: JoinSetRequest::ChildExecutionRequest { child_execution_id },
                        ..
                    },
            } => Some(child_execution_id.clone()),
            _ => None,
        })
        .collect()
}

/// The children of `log` and theirs, as an indented tree of one line each: id, function and
/// state (or result). At most [`CHILDREN_SHOWN`] lines; the rest is counted.
async fn children_tree(db: &dyn DbConnection, log: &ExecutionLog) -> Result<String, CliError> {
    let direct = child_requests(log);
    if direct.is_empty() {
        return Ok(String::new());
    }
    let mut text = format!("\nChildren ({}):\n", direct.len());
    let mut stack: Vec<(ExecutionId, usize)> = direct.into_iter().rev().map(|id| (id, 1)).collect();
    let mut shown = 0;
    while let Some((id, depth)) = stack.pop() {
        if shown == CHILDREN_SHOWN {
            let _ = writeln!(text, "  ... and {} more not shown", stack.len() + 1);
            break;
        }
        shown += 1;
        let child = db
            .get(&id)
            .await
            .map_err(|err| CliError::db(format!("cannot read child {id}"), err))?;
        let function = child.ffqn().map(ToString::to_string).unwrap_or_default();
        let outcome = child.finished_result().map_or_else(
            || render::state_detail(&child.pending_state),
            render::result,
        );
        let indent = "  ".repeat(depth);
        let _ = writeln!(text, "{indent}- {id}  {function}  {outcome}");
        stack.extend(
            child_requests(&child)
                .into_iter()
                .rev()
                .map(|grandchild| (grandchild, depth + 1)),
        );
    }
    Ok(text)
}

/// For each `JoinNext` (by version), the number (from 1) of the response that answers it: the
/// k-th `JoinNext` of a join set is answered by that set's k-th response in arrival order.
fn answering_responses(log: &ExecutionLog) -> HashMap<usize, usize> {
    let mut positions: HashMap<&JoinSetId, Vec<usize>> = HashMap::new();
    for (index, response) in log.responses.iter().enumerate() {
        positions
            .entry(&response.event.join_set_id)
            .or_default()
            .push(index + 1);
    }
    let mut awaited: HashMap<&JoinSetId, usize> = HashMap::new();
    let mut answers = HashMap::new();
    for (version, event) in log.events.iter().enumerate() {
        if let ExecutionEventInner::HistoryEvent {
            event: HistoryEvent::JoinNext { join_set_id, .. },
        } = &event.event
        {
            let nth = awaited.entry(join_set_id).or_default();
            if let Some(answer) = positions.get(join_set_id).and_then(|p| p.get(*nth)) {
                answers.insert(version, *answer);
            }
            *nth += 1;
        }
    }
    answers
}

/// The human form of `show`: a header, the events, the responses.
fn timeline(log: &ExecutionLog) -> String {
    let mut text = String::new();
    let origin = log
        .events
        .first()
        .map_or_else(chrono::DateTime::default, |event| event.created_at);
    let _ = writeln!(text, "Execution  {}", log.execution_id);
    if let Some(concepts::Created {
        ffqn,
        params,
        parent,
        retry_exp_backoff,
        max_retries,
        component_id,
        ..
    }) = log.events.first().and_then(|event| event.event.created())
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
    match log.parked() {
        Some((reason, since)) => {
            let _ = writeln!(
                text,
                "State      Parked since {}: {reason}",
                render::datetime(since)
            );
            let _ = writeln!(text, "           It waits: {}", concepts::PARKED_EXPLAINED);
        }
        None => {
            let _ = writeln!(
                text,
                "State      {}",
                render::state_detail(&log.pending_state)
            );
        }
    }
    if let Some(status) = log.status() {
        let _ = writeln!(text, "Status     {status}");
    }
    if let Some(result) = log.finished_result() {
        let _ = writeln!(text, "Result     {}", render::result(result));
    }
    let _ = writeln!(text, "Next version {}", log.next_version);

    let answers = answering_responses(log);
    let mut events = render::table(["VERSION", "TIME", "ELAPSED", "EVENT", "DETAILS"]);
    for (version, event) in log.events.iter().enumerate() {
        let mut details = render::event_details(origin, event);
        if let Some(answer) = answers.get(&version) {
            let _ = write!(details, "; answered by response #{answer}");
        }
        events.add_row([
            version.to_string(),
            render::time(event.created_at),
            render::offset(origin, event.created_at),
            render::event_name(&event.event).to_string(),
            details,
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
