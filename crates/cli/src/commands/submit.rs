//! `stele submit`: create one top-level execution, idempotently when the caller names its id.

use super::{CliError, Exit, bad_input, note, print, render, with_store};
use cli::{
    database::{DatabaseUrl, OpenMode},
    workers::{
        approval::ApprovalParams, fanout::FanoutParams, flaky::FlakyParams, sleeper::SleeperParams,
        slow::SlowParams,
    },
    workload::{self, DemoFunctions},
};
use concepts::{
    ClockFn as _, ComponentId, CreateConflict, CreateOutcome, CreateRequest, DbError,
    DuplicateKind, ExecutionId, ExecutionMetadata, FunctionFqn, Json,
};
use executor::Now;
use serde::de::DeserializeOwned;
use std::{collections::BTreeMap, time::Duration};

#[derive(Debug, clap::Args)]
pub struct SubmitArgs {
    /// The function, e.g. stele:demo/activities.flaky (`stele serve` runs the demo's
    /// functions; a stub stele:stub.<name> is a promise that `executions complete` resolves).
    ffqn: String,
    /// The parameters, as one JSON value: each demo function takes an object, e.g.
    /// '{"fail_probability":0.35,"work_ms":100}' for flaky.
    #[arg(long, value_name = "JSON", allow_hyphen_values = true)]
    params: String,
    /// The execution id, E_<ULID>: the idempotency key of a submit that may be retried. A
    /// fresh id when omitted.
    #[arg(long, value_name = "ID")]
    id: Option<String>,
}

/// Retries of a function that is not one of the demo's (the typed client's defaults).
const OTHER_MAX_RETRIES: u32 = 3;
const OTHER_RETRY_BACKOFF: Duration = Duration::from_secs(1);

pub async fn run(url: &DatabaseUrl, args: SubmitArgs) -> Result<(), CliError> {
    // Everything is checked before the database is opened.
    let ffqn: FunctionFqn = args
        .ffqn
        .parse()
        .map_err(|err| bad_input("function", err))?;
    let params: serde_json::Value =
        serde_json::from_str(&args.params).map_err(|err| bad_input("--params", err))?;
    let functions = DemoFunctions::new();
    check_params(&functions, &ffqn, &params)?;
    let now = Now.now();
    let execution_id = match &args.id {
        Some(id) => {
            let id: ExecutionId = id.parse().map_err(|err| bad_input("--id", err))?;
            if !id.is_top_level() {
                return Err(bad_input(
                    "--id",
                    format!("{id} is a child's id; a submitted execution is top-level (E_<ULID>)"),
                ));
            }
            id
        }
        None => ExecutionId::generate_at(now),
    };
    let (component_id, max_retries, retry_exp_backoff) = match functions.by_ffqn(&ffqn) {
        Some(function) => (
            function.component_id.clone(),
            function.max_retries,
            function.retry_exp_backoff,
        ),
        None => {
            if ffqn.is_stub() {
                note(&format!(
                    "{ffqn} is a stub: no executor runs it; `stele executions complete ID \
                     --json VALUE` finishes it"
                ));
            } else {
                note(&format!(
                    "{ffqn} is not a function of `stele serve`: the execution waits for a \
                     worker of it"
                ));
            }
            (
                ComponentId::new("cli", "stele-submit").expect("a legal component id"),
                OTHER_MAX_RETRIES,
                OTHER_RETRY_BACKOFF,
            )
        }
    };
    let request = CreateRequest {
        created_at: now,
        execution_id: execution_id.clone(),
        ffqn: ffqn.clone(),
        params: Json(params),
        parent: None,
        scheduled_at: now,
        retry_exp_backoff,
        max_retries,
        component_id,
        metadata: ExecutionMetadata(BTreeMap::from([(
            "submitted_by".to_string(),
            "stele submit".to_string(),
        )])),
        scheduled_by: None,
    };
    let outcome = with_store(url, OpenMode::ExistingOnly, async |db| {
        db.create(request)
            .await
            .map_err(|err| refused(&ffqn, &execution_id, err))
    })
    .await?;
    match outcome {
        CreateOutcome::Created => print(&format!("{execution_id} created\n")),
        CreateOutcome::AlreadyExisted { pending_state } => print(&format!(
            "{execution_id} already existed with this function and these parameters, nothing \
             written: {}\n",
            render::state(&pending_state)
        )),
    }
}

/// The error of a refused `create`: a conflicting repeat names what differs.
fn refused(ffqn: &FunctionFqn, execution_id: &ExecutionId, err: DbError) -> CliError {
    if let DbError::Duplicate(DuplicateKind::ExecutionConflict { differences, .. }) = &err {
        let what: Vec<&str> = differences
            .iter()
            .map(|difference| match difference {
                CreateConflict::Function => "another function",
                CreateConflict::Params => "other parameters",
                CreateConflict::Parent => "another parent",
                _ => "other settings",
            })
            .collect();
        return CliError::new(
            Exit::Usage,
            format!(
                "cannot submit {ffqn} as {execution_id}: it already exists with {}; repeat a \
                 submit with the same function and parameters, or choose another --id",
                what.join(" and ")
            ),
        );
    }
    CliError::request(format!("cannot submit {ffqn} as {execution_id}"), err)
}

/// Refuses parameters that a demo function cannot decode: they would fail its execution at
/// once. Other functions take any JSON value.
fn check_params(
    functions: &DemoFunctions,
    ffqn: &FunctionFqn,
    params: &serde_json::Value,
) -> Result<(), CliError> {
    let Some(function) = functions.by_ffqn(ffqn) else {
        return Ok(());
    };
    let fits = match function.name {
        "flaky" => decodes::<FlakyParams>(params),
        "slow" => decodes::<SlowParams>(params),
        "fanout" => decodes::<FanoutParams>(params),
        "sleeper" => decodes::<SleeperParams>(params),
        "approval" => decodes::<ApprovalParams>(params),
        _ => Ok(()),
    };
    fits.map_err(|err| {
        bad_input(
            "--params",
            format!(
                "{ffqn} expects other parameters: {err} (for example '{}')",
                workload::params_of(function.name, 0)
            ),
        )
    })
}

fn decodes<T: DeserializeOwned>(params: &serde_json::Value) -> Result<(), serde_json::Error> {
    T::deserialize(params).map(drop)
}
