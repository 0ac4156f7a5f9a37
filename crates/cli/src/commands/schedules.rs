//! `stele schedules`: create, update, list, show, pause, resume, trigger, backfill and delete
//! the schedules whose ticks `stele serve` fires (its timers watcher runs the scheduler).
//! A schedule's function must be one of `stele serve`'s; everything is checked before the
//! database is opened, and a refused command writes nothing.

use super::{CliError, bad_input, print, print_json, render, with_store};
use ::node::schedules::{self as node_schedules, ScheduleDraft, ScheduleRefused};
use chrono::{DateTime, Utc};
use cli::{
    database::{DatabaseUrl, OpenMode},
    workload::{self, DemoFunctions},
};
use concepts::{
    ClockFn as _, DbConnection, ExecutionId, PendingState, PendingStateKind,
    schedule::{
        ChangeScheduleRequest, Definition, ScheduleChange, ScheduleChanged, ScheduleCreated,
        ScheduleName, ScheduleRow, Tick, TriggerScheduleRequest, TriggerTicks,
    },
};
use executor::Now;
use serde::Serialize;
use std::fmt::Write as _;

#[derive(Debug, clap::Subcommand)]
pub enum SchedulesCommand {
    /// Create a schedule: its function runs at each tick of its spec, on whichever
    /// `stele serve` sees the tick first, once.
    ///
    /// Creating it again with the same definition is not an error (nothing written); the name
    /// with another definition is refused (exit 2), naming what differs: update it instead.
    Create(DefinitionArgs),
    /// Replace a schedule's definition, for the ticks after the last one handled.
    Update(DefinitionArgs),
    /// List the schedules, by name.
    List(ListArgs),
    /// Show a schedule: its definition, its next fire times and its last ticks with their
    /// executions and how each is doing.
    Show(ShowArgs),
    /// Pause a schedule: no tick fires until it is resumed.
    Pause(PauseArgs),
    /// Resume a paused schedule: the ticks that fell while it was paused are recorded as
    /// skipped, the next one fires.
    Resume(NameArgs),
    /// Fire a schedule now, whatever its spec and its previous run.
    Trigger(NameArgs),
    /// Fire every tick of a schedule's spec in a past range (at most 1,000), due now; a tick
    /// that has its execution already is not fired again.
    Backfill(BackfillArgs),
    /// Delete a schedule and its recorded ticks; its executions are left as they are.
    Delete(NameArgs),
}

#[derive(Debug, clap::Args)]
pub struct DefinitionArgs {
    /// The schedule's name: letters, digits, `.`, `_` and `-`.
    name: String,
    /// The function each tick runs, one of `stele serve`'s, e.g. stele:demo/activities.flaky.
    function: String,
    /// A cron expression of five fields, or six with seconds first, on the wall clock of
    /// --timezone, e.g. '0 3 * * *'.
    #[arg(
        long,
        value_name = "EXPR",
        conflicts_with = "every",
        required_unless_present = "every"
    )]
    cron: Option<String>,
    /// An interval, e.g. 15m, counted from the Unix epoch (plus --offset).
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true)]
    every: Option<String>,
    /// With --every: how long after each multiple of the interval the tick falls.
    #[arg(
        long,
        value_name = "DURATION",
        requires = "every",
        allow_hyphen_values = true
    )]
    offset: Option<String>,
    /// The IANA time zone whose wall clock a cron expression reads, e.g. Europe/Prague.
    #[arg(long, value_name = "TZ", default_value = "UTC")]
    timezone: String,
    /// The parameters of every tick's execution, as one JSON value.
    #[arg(
        long,
        value_name = "JSON",
        default_value = "null",
        allow_hyphen_values = true
    )]
    params: String,
    /// What a tick does while the previous run is unfinished: skip, buffer-one, allow-all or
    /// cancel-other.
    #[arg(long, value_name = "POLICY", default_value = "skip")]
    overlap: String,
    /// How old a missed tick may be and still fire after a downtime.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "5m",
        allow_hyphen_values = true
    )]
    catchup_window: String,
    /// Each tick's execution is due up to this much after the tick.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "0s",
        allow_hyphen_values = true
    )]
    jitter: String,
    /// At most this many executions, if given.
    #[arg(long, value_name = "N", allow_negative_numbers = true,
          value_parser = super::whole_number(1, u32::MAX))]
    max_runs: Option<u32>,
    /// No tick after this time (RFC 3339, e.g. 2027-01-01T00:00:00Z) fires, if given.
    #[arg(long, value_name = "TIME")]
    end: Option<String>,
}

#[derive(Debug, clap::Args)]
pub struct NameArgs {
    /// The schedule's name.
    name: String,
}

#[derive(Debug, clap::Args)]
pub struct PauseArgs {
    /// The schedule's name.
    name: String,
    /// Why, shown by `show`.
    #[arg(long, value_name = "TEXT", default_value = "")]
    note: String,
}

#[derive(Debug, clap::Args)]
pub struct BackfillArgs {
    /// The schedule's name.
    name: String,
    /// The first time of the range (RFC 3339).
    #[arg(long, value_name = "TIME")]
    from: String,
    /// The last time of the range (RFC 3339), included.
    #[arg(long, value_name = "TIME")]
    to: String,
}

#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// Print the schedules as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
pub struct ShowArgs {
    /// The schedule's name.
    name: String,
    /// How many next fire times.
    #[arg(long, default_value_t = 5, value_name = "N", allow_negative_numbers = true,
          value_parser = super::whole_number(0, 1_000))]
    next: u32,
    /// How many of the last ticks.
    #[arg(long, default_value_t = 10, value_name = "N", allow_negative_numbers = true,
          value_parser = super::whole_number(0, 1_000))]
    ticks: u32,
    /// Print it as one JSON document.
    #[arg(long)]
    json: bool,
}

pub async fn run(url: &DatabaseUrl, command: SchedulesCommand) -> Result<(), CliError> {
    match command {
        SchedulesCommand::Create(args) => create(url, args, false).await,
        SchedulesCommand::Update(args) => create(url, args, true).await,
        SchedulesCommand::List(args) => list(url, args).await,
        SchedulesCommand::Show(args) => show(url, args).await,
        SchedulesCommand::Pause(args) => {
            let change = ScheduleChange::Pause { note: args.note };
            change_schedule(url, &args.name, change).await
        }
        SchedulesCommand::Resume(args) => {
            change_schedule(url, &args.name, ScheduleChange::Resume).await
        }
        SchedulesCommand::Delete(args) => {
            change_schedule(url, &args.name, ScheduleChange::Delete).await
        }
        SchedulesCommand::Trigger(args) => trigger(url, &args.name, TriggerTicks::Now).await,
        SchedulesCommand::Backfill(args) => {
            let ticks = TriggerTicks::Backfill {
                from: parse_time("--from", &args.from)?,
                to: parse_time("--to", &args.to)?,
            };
            trigger(url, &args.name, ticks).await
        }
    }
}

fn parse_name(name: &str) -> Result<ScheduleName, CliError> {
    name.parse().map_err(|err| bad_input("name", err))
}

fn parse_time(option: &str, text: &str) -> Result<DateTime<Utc>, CliError> {
    text.parse::<DateTime<Utc>>()
        .map_err(|err| bad_input(option, format!("`{text}` is not an RFC 3339 time ({err})")))
}

/// The definition the options describe, every field checked (`node::schedules::ScheduleDraft`),
/// a refused one named by its option.
fn definition(args: &DefinitionArgs) -> Result<Definition, CliError> {
    let params: serde_json::Value =
        serde_json::from_str(&args.params).map_err(|err| bad_input("--params", err))?;
    let draft = ScheduleDraft {
        name: args.name.clone(),
        function: args.function.clone(),
        params,
        cron: args.cron.clone(),
        every: args.every.clone(),
        offset: args.offset.clone(),
        timezone: Some(args.timezone.clone()),
        overlap: Some(args.overlap.clone()),
        catchup_window: Some(args.catchup_window.clone()),
        jitter: Some(args.jitter.clone()),
        max_runs: args.max_runs.map(u64::from),
        end: args.end.clone(),
    };
    draft.definition().map_err(|err| {
        let option = match err.field {
            "name" | "function" => err.field.to_owned(),
            field => format!("--{}", field.replace('_', "-")),
        };
        bad_input(&option, err.reason)
    })
}

/// The error of a schedule the demo's catalog refuses (exit 2).
fn refused(functions: &DemoFunctions, definition: &Definition, err: ScheduleRefused) -> CliError {
    let example = match &err {
        ScheduleRefused::ParamsRefused { ffqn, .. } => functions
            .by_ffqn(ffqn)
            .map(|function| format!(" (for example '{}')", workload::params_of(function.name, 0)))
            .unwrap_or_default(),
        ScheduleRefused::UnknownFunction { .. } => String::new(),
    };
    let option = match err {
        ScheduleRefused::ParamsRefused { .. } => "--params",
        ScheduleRefused::UnknownFunction { .. } => "function",
    };
    bad_input(
        option,
        format!("schedule {}: {err}{example}", definition.name),
    )
}

async fn create(url: &DatabaseUrl, args: DefinitionArgs, update: bool) -> Result<(), CliError> {
    let definition = definition(&args)?;
    let name = definition.name.clone();
    let functions = DemoFunctions::new();
    let catalog = workload::catalog(&functions);
    let now = Now.now();
    if update {
        let req = node_schedules::update_request(&catalog, definition.clone(), now)
            .map_err(|err| refused(&functions, &definition, err))?;
        let changed = with_store(url, OpenMode::ExistingOnly, async |db| {
            let context = format!("cannot update schedule {name}");
            db.change_schedule(req)
                .await
                .map_err(|err| CliError::request(context, err))
        })
        .await?;
        return print(&changed_line(&name, &changed));
    }
    let req = node_schedules::create_request(&catalog, definition.clone(), now)
        .map_err(|err| refused(&functions, &definition, err))?;
    let (created, row) = with_store(url, OpenMode::ExistingOnly, async |db| {
        let context = format!("cannot create schedule {name}");
        let created = db
            .create_schedule(req)
            .await
            .map_err(|err| CliError::request(&context, err))?;
        let row = db
            .get_schedule(&name)
            .await
            .map_err(|err| CliError::request(&context, err))?;
        Ok((created, row))
    })
    .await?;
    let next = next_line(&row);
    match created {
        ScheduleCreated::Created => print(&format!("schedule {name} created; {next}\n")),
        ScheduleCreated::AlreadyExisted => print(&format!(
            "schedule {name} already existed with this definition, nothing written; {next}\n"
        )),
    }
}

fn next_line(row: &ScheduleRow) -> String {
    match row.next_fire_times(Now.now(), 1).first() {
        Some(at) => format!("next tick {}", render::datetime(*at)),
        None => "no next tick".to_owned(),
    }
}

fn changed_line(name: &ScheduleName, changed: &ScheduleChanged) -> String {
    match changed {
        ScheduleChanged::Changed => format!("schedule {name} changed\n"),
        ScheduleChanged::Unchanged => format!("schedule {name} was already so, nothing written\n"),
        ScheduleChanged::Deleted { running: None } => format!("schedule {name} deleted\n"),
        ScheduleChanged::Deleted {
            running: Some(execution_id),
        } => format!("schedule {name} deleted; its last run {execution_id} goes on\n"),
    }
}

async fn change_schedule(
    url: &DatabaseUrl,
    name: &str,
    change: ScheduleChange,
) -> Result<(), CliError> {
    let name = parse_name(name)?;
    let req = ChangeScheduleRequest {
        name: name.clone(),
        change,
        now: Now.now(),
    };
    let changed = with_store(url, OpenMode::ExistingOnly, async |db| {
        let context = format!("cannot change schedule {name}");
        db.change_schedule(req)
            .await
            .map_err(|err| CliError::request(context, err))
    })
    .await?;
    print(&changed_line(&name, &changed))
}

async fn trigger(url: &DatabaseUrl, name: &str, ticks: TriggerTicks) -> Result<(), CliError> {
    let name = parse_name(name)?;
    let req = TriggerScheduleRequest {
        name: name.clone(),
        ticks,
        now: Now.now(),
    };
    let triggered = with_store(url, OpenMode::ExistingOnly, async |db| {
        let context = format!("cannot fire schedule {name}");
        db.trigger_schedule(req)
            .await
            .map_err(|err| CliError::request(context, err))
    })
    .await?;
    let mut text = String::new();
    for execution_id in &triggered.fired {
        let _ = writeln!(text, "{execution_id} fired");
    }
    for execution_id in &triggered.already_fired {
        let _ = writeln!(text, "{execution_id} had fired already, nothing written");
    }
    if text.is_empty() {
        text = format!("schedule {name} has no tick in the range, nothing fired\n");
    }
    print(&text)
}

async fn list(url: &DatabaseUrl, args: ListArgs) -> Result<(), CliError> {
    let rows = with_store(url, OpenMode::Inspection, async |db| {
        let mut rows = Vec::new();
        loop {
            let page = db
                .list_schedules(rows.last().map(ScheduleRow::name), 1_000)
                .await
                .map_err(|err| CliError::db("cannot list the schedules", err))?;
            let done = page.len() < 1_000;
            rows.extend(page);
            if done {
                return Ok(rows);
            }
        }
    })
    .await?;
    if args.json {
        return print_json(&rows);
    }
    let mut table = render::table(["NAME", "STATUS", "SPEC", "ZONE", "FUNCTION", "RUNS", "NEXT"]);
    for row in &rows {
        let definition = &row.definition;
        let next = row.next_fire_times(Now.now(), 1);
        table.add_row([
            definition.name.to_string(),
            row.status().to_owned(),
            definition.spec.to_string(),
            definition.zone.name().to_owned(),
            definition.ffqn.to_string(),
            row.runs.to_string(),
            next.first()
                .map_or_else(|| "-".to_owned(), |at| render::datetime(*at)),
        ]);
    }
    print(&render::finish(&table))
}

/// A tick with the state of its execution, if it has one and it is stored.
type ShownTick = (Tick, Option<PendingState>);

/// A tick of `show --json`.
#[derive(Serialize)]
struct TickDocument<'a> {
    #[serde(flatten)]
    tick: &'a Tick,
    /// The state of its execution, if it has one and it is stored.
    state: Option<PendingStateKind>,
}

/// The document of `show --json`.
#[derive(Serialize)]
struct ShowDocument<'a> {
    schedule: &'a ScheduleRow,
    next_fire_times: &'a [DateTime<Utc>],
    /// Newest first.
    ticks: Vec<TickDocument<'a>>,
}

async fn show(url: &DatabaseUrl, args: ShowArgs) -> Result<(), CliError> {
    let name = parse_name(&args.name)?;
    let (row, ticks) = with_store(url, OpenMode::Inspection, async |db| {
        let context = format!("cannot show schedule {name}");
        let row = db
            .get_schedule(&name)
            .await
            .map_err(|err| CliError::request(&context, err))?;
        let ticks = db
            .schedule_ticks(&name, args.ticks as usize)
            .await
            .map_err(|err| CliError::request(&context, err))?;
        Ok((row, with_states(db.as_ref(), ticks).await?))
    })
    .await?;
    let next = row.next_fire_times(Now.now(), args.next as usize);
    if args.json {
        let ticks = (ticks.iter())
            .map(|(tick, state)| TickDocument {
                tick,
                state: state.as_ref().map(PendingState::kind),
            })
            .collect();
        return print_json(&ShowDocument {
            schedule: &row,
            next_fire_times: &next,
            ticks,
        });
    }
    print(&show_text(&row, &next, &ticks))
}

async fn with_states(db: &dyn DbConnection, ticks: Vec<Tick>) -> Result<Vec<ShownTick>, CliError> {
    let mut shown = Vec::with_capacity(ticks.len());
    for tick in ticks {
        let state = match tick.execution_id() {
            Some(execution_id) => state_of(db, execution_id).await?,
            None => None,
        };
        shown.push((tick, state));
    }
    Ok(shown)
}

async fn state_of(
    db: &dyn DbConnection,
    execution_id: &ExecutionId,
) -> Result<Option<PendingState>, CliError> {
    match db.get(execution_id).await {
        Ok(log) => Ok(Some(log.pending_state)),
        // Pruned.
        Err(concepts::DbError::NotFound(_)) => Ok(None),
        Err(err) => Err(CliError::db(
            format!("cannot read execution {execution_id}"),
            err,
        )),
    }
}

fn show_text(row: &ScheduleRow, next: &[DateTime<Utc>], ticks: &[ShownTick]) -> String {
    let definition = &row.definition;
    let mut text = format!("schedule {}: {}\n", definition.name, row.status());
    let mut line = |key: &str, value: String| {
        let _ = writeln!(text, "  {key:<15}{value}");
    };
    if let Some(pause) = &row.paused {
        line(
            "paused",
            format!("since {}: {}", render::datetime(pause.since), pause.note),
        );
    }
    line("function", definition.ffqn.to_string());
    line("params", definition.params.0.to_string());
    line(
        "spec",
        format!("{} ({})", definition.spec, definition.zone.name()),
    );
    line("overlap", definition.overlap.to_string());
    line("catch-up", render::duration(definition.catchup_window));
    line("jitter", render::duration(definition.jitter));
    let limit = definition
        .max_runs
        .map_or_else(|| "no limit".to_owned(), |max| format!("at most {max}"));
    line("runs", format!("{} ({limit})", row.runs));
    if let Some(end) = definition.end {
        line("ends", render::datetime(end));
    }
    line("created", render::datetime(row.created_at));
    line("updated", render::datetime(row.updated_at));
    let next: Vec<_> = next.iter().map(|at| render::datetime(*at)).collect();
    line(
        "next",
        if next.is_empty() {
            "-".to_owned()
        } else {
            next.join(", ")
        },
    );
    if ticks.is_empty() {
        text.push_str("no ticks recorded\n");
        return text;
    }
    let mut table = render::table(["TICK", "OUTCOME", "EXECUTION", "STATE"]);
    for (tick, state) in ticks {
        let execution = tick
            .execution_id()
            .map(ToString::to_string)
            .unwrap_or_default();
        let state = match (state, tick.execution_id()) {
            (Some(state), _) => render::state(state),
            (None, Some(_)) => "pruned".to_owned(),
            (None, None) => String::new(),
        };
        table.add_row([
            render::datetime(tick.at),
            tick.outcome.to_string(),
            execution,
            state,
        ]);
    }
    text.push_str(&render::finish(&table));
    text
}
