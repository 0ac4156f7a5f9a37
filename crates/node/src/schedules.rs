//! A schedule as a node's catalog checks it before it is stored: its function must be one the
//! catalog runs (a schedule of a function nobody runs would pile up executions), its
//! parameters must be what that function takes, and its executions are created with the
//! function's settings. The CLI's `stele schedules create` and `update` use it, and so does
//! [`crate::NodeBuilder::schedule`], whose schedules the node keeps stored as declared.

use crate::Catalog;
use chrono::{DateTime, Utc};
use concepts::{
    ClockFn, DbConnection, DbError, DuplicateKind, FunctionFqn,
    schedule::{
        ChangeScheduleRequest, CreateScheduleRequest, Definition, RunSettings, ScheduleChange,
    },
};
use std::{sync::Arc, time::Duration};
use tracing::{info, warn};

/// Why a schedule is refused before anything is written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleRefused {
    /// The catalog runs no such function.
    #[error("{ffqn} is not a function this node runs (it runs {known})")]
    UnknownFunction {
        /// The function.
        ffqn: FunctionFqn,
        /// The functions it runs, comma-separated.
        known: String,
    },
    /// The function cannot take the parameters.
    #[error("{ffqn} cannot take these parameters: {reason}")]
    ParamsRefused {
        /// The function.
        ffqn: FunctionFqn,
        /// Why.
        reason: String,
    },
}

/// The settings of `definition`'s executions, after checking its function and parameters
/// against `catalog`.
///
/// # Errors
/// [`ScheduleRefused`] when the catalog does not run the function or it cannot take the
/// parameters.
pub fn run_settings(
    catalog: &Catalog,
    definition: &Definition,
) -> Result<RunSettings, ScheduleRefused> {
    let ffqn = &definition.ffqn;
    let Some(function) = catalog.get(ffqn) else {
        let known: Vec<String> = catalog.functions().map(|f| f.ffqn().to_string()).collect();
        return Err(ScheduleRefused::UnknownFunction {
            ffqn: ffqn.clone(),
            known: if known.is_empty() {
                "none".to_owned()
            } else {
                known.join(", ")
            },
        });
    };
    function
        .check(&definition.params.0)
        .map_err(|reason| ScheduleRefused::ParamsRefused {
            ffqn: ffqn.clone(),
            reason,
        })?;
    let defaults = function.defaults();
    Ok(RunSettings {
        component_id: defaults.component_id.clone(),
        max_retries: defaults.max_retries,
        retry_exp_backoff: defaults.retry_exp_backoff,
    })
}

/// The `create_schedule` of `definition` at `now`, checked against `catalog`.
///
/// # Errors
/// As [`run_settings`].
pub fn create_request(
    catalog: &Catalog,
    definition: Definition,
    now: DateTime<Utc>,
) -> Result<CreateScheduleRequest, ScheduleRefused> {
    let settings = run_settings(catalog, &definition)?;
    Ok(CreateScheduleRequest {
        definition,
        settings,
        now,
    })
}

/// The update of the schedule of `definition`'s name to `definition` at `now`, checked
/// against `catalog`.
///
/// # Errors
/// As [`run_settings`].
pub fn update_request(
    catalog: &Catalog,
    definition: Definition,
    now: DateTime<Utc>,
) -> Result<ChangeScheduleRequest, ScheduleRefused> {
    let settings = run_settings(catalog, &definition)?;
    Ok(ChangeScheduleRequest {
        name: definition.name.clone(),
        change: ScheduleChange::Update {
            definition: Box::new(definition),
            settings,
        },
        now,
    })
}

/// How many times [`keep`] tries a schedule's write before it gives up (logged).
const KEEP_ATTEMPTS: u32 = 10;

/// Stores each schedule as declared, once: created when missing, updated when it differs.
/// A write that fails is tried again after a second, up to [`KEEP_ATTEMPTS`] times, then
/// logged as an error; the node runs on.
pub(crate) async fn keep<C: ClockFn>(
    db: Arc<dyn DbConnection>,
    clock: C,
    schedules: Vec<(Definition, RunSettings)>,
) {
    for (definition, settings) in schedules {
        let name = definition.name.clone();
        for attempt in 1..=KEEP_ATTEMPTS {
            match store(db.as_ref(), &clock, &definition, &settings).await {
                Ok(what) => {
                    info!(schedule = %name, "{what}");
                    break;
                }
                Err(err) if err.is_retriable() && attempt < KEEP_ATTEMPTS => {
                    warn!(schedule = %name, "cannot store the schedule yet, trying again: {err}");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                Err(err) => {
                    tracing::error!(schedule = %name, "cannot store the schedule: {err}");
                    break;
                }
            }
        }
    }
}

/// Creates `definition`, or updates the stored one when it differs; what it did.
async fn store<C: ClockFn>(
    db: &dyn DbConnection,
    clock: &C,
    definition: &Definition,
    settings: &RunSettings,
) -> Result<&'static str, DbError> {
    let req = CreateScheduleRequest {
        definition: definition.clone(),
        settings: settings.clone(),
        now: clock.now(),
    };
    match db.create_schedule(req).await {
        Ok(concepts::schedule::ScheduleCreated::Created) => Ok("schedule created"),
        Ok(concepts::schedule::ScheduleCreated::AlreadyExisted) => {
            Ok("schedule stored as declared")
        }
        Err(DbError::Duplicate(DuplicateKind::ScheduleConflict { .. })) => {
            let req = ChangeScheduleRequest {
                name: definition.name.clone(),
                change: ScheduleChange::Update {
                    definition: Box::new(definition.clone()),
                    settings: settings.clone(),
                },
                now: clock.now(),
            };
            db.change_schedule(req).await?;
            Ok("schedule updated to its declaration")
        }
        Err(err) => Err(err),
    }
}
