//! `stele submit`: create one top-level execution, idempotently when the caller names its id,
//! through `node::submit`'s steps and the demo's catalog (the HTTP API's `POST /executions` is
//! the same operation).

use super::{CliError, Exit, bad_input, note, print, render, with_store};
use ::node::{Prepared, Submission, SubmitError, Submitted};
use cli::{
    database::{DatabaseUrl, OpenMode},
    workload::{self, DemoFunctions},
};
use concepts::{ClockFn as _, ExecutionId, ExecutionMetadata, FunctionFqn};
use executor::Now;
use std::collections::BTreeMap;

#[derive(Debug, clap::Args)]
pub struct SubmitArgs {
    /// The function, e.g. stele:demo/activities.flaky (`stele serve` runs the demo's
    /// functions; a stub `stele:stub.<name>` is a promise that `executions complete` resolves).
    ffqn: String,
    /// The parameters, as one JSON value: each demo function takes an object, e.g.
    /// '{"fail_probability":0.35,"work_ms":100}' for flaky.
    #[arg(long, value_name = "JSON", allow_hyphen_values = true)]
    params: String,
    /// The execution id, `E_<ULID>`: the idempotency key of a submit that may be retried. A
    /// fresh id when omitted.
    #[arg(long, value_name = "ID")]
    id: Option<String>,
}

pub async fn run(url: &DatabaseUrl, args: SubmitArgs) -> Result<(), CliError> {
    // Everything is checked before the database is opened.
    let ffqn: FunctionFqn = args
        .ffqn
        .parse()
        .map_err(|err| bad_input("function", err))?;
    let params: serde_json::Value =
        serde_json::from_str(&args.params).map_err(|err| bad_input("--params", err))?;
    let execution_id = args
        .id
        .as_deref()
        .map(|id| {
            id.parse::<ExecutionId>()
                .map_err(|err| bad_input("--id", err))
        })
        .transpose()?;
    let functions = DemoFunctions::new();
    let catalog = workload::catalog(&functions);
    let submission = Submission {
        ffqn: ffqn.clone(),
        params,
        execution_id,
        metadata: ExecutionMetadata(BTreeMap::from([(
            "submitted_by".to_string(),
            "stele submit".to_string(),
        )])),
    };
    let prepared = Prepared::new(&catalog, submission, Now.now())
        .map_err(|err| refused(&functions, &ffqn, None, err))?;
    if catalog.get(&ffqn).is_none() {
        if ffqn.is_stub() {
            note(&format!(
                "{ffqn} is a stub: no executor runs it; `stele executions complete ID --json \
                 VALUE` finishes it"
            ));
        } else {
            note(&format!(
                "{ffqn} is not a function of `stele serve`: the execution waits for a worker \
                 of it"
            ));
        }
    }
    let execution_id = prepared.execution_id().clone();
    let submitted = with_store(url, OpenMode::ExistingOnly, async |db| {
        prepared
            .submit(db.as_ref())
            .await
            .map_err(|err| refused(&functions, &ffqn, Some(&execution_id), err))
    })
    .await?;
    match submitted {
        Submitted::Created { execution_id, .. } => print(&format!("{execution_id} created\n")),
        Submitted::AlreadyExisted {
            execution_id,
            pending_state,
        } => print(&format!(
            "{execution_id} already existed with this function and these parameters, nothing \
             written: {}\n",
            render::state(&pending_state)
        )),
    }
}

/// The error of a refused submit: bad input (exit 2) says what to change, a conflicting
/// repeat names what differs.
fn refused(
    functions: &DemoFunctions,
    ffqn: &FunctionFqn,
    execution_id: Option<&ExecutionId>,
    err: SubmitError,
) -> CliError {
    match err {
        SubmitError::NotTopLevel { .. } => bad_input("--id", err),
        SubmitError::ParamsRefused { .. } => {
            let example = functions
                .by_ffqn(ffqn)
                .map(|function| {
                    format!(" (for example '{}')", workload::params_of(function.name, 0))
                })
                .unwrap_or_default();
            bad_input("--params", format!("{err}{example}"))
        }
        SubmitError::Conflict {
            ref execution_id, ..
        } => CliError::new(
            Exit::Usage,
            format!(
                "cannot submit {ffqn} as {execution_id}: it already exists with {}; repeat a \
                 submit with the same function and parameters, or choose another --id",
                err.what_differs().unwrap_or_default()
            ),
        ),
        SubmitError::Db(err) => {
            let context = match execution_id {
                Some(id) => format!("cannot submit {ffqn} as {id}"),
                None => format!("cannot submit {ffqn}"),
            };
            CliError::request(context, err)
        }
    }
}
