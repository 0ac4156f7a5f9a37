//! A schedule written as text ([`ScheduleDraft`]: the CLI's options, the HTTP API's body),
//! and as a node's catalog checks it before it is stored: its function must be one the
//! catalog runs (a schedule of a function nobody runs would pile up executions), its
//! parameters must be what that function takes, and its executions are created with the
//! function's settings. The CLI's `stele schedules create` and `update` use it, and so does
//! [`crate::NodeBuilder::schedule`], whose schedules the node keeps stored as declared.

use crate::{Catalog, HumanDuration};
use chrono::{DateTime, Utc};
use concepts::{
    ClockFn, DbConnection, DbError, DuplicateKind, FunctionFqn, Json,
    schedule::{
        ChangeScheduleRequest, CreateScheduleRequest, Definition, RunSettings, ScheduleChange,
        ScheduleName, Spec,
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

/// A schedule as text, the way a person or a program writes it (the CLI's options, the HTTP
/// API's body): every field checked by [`ScheduleDraft::definition`], which names the field
/// it refuses.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleDraft {
    /// The name.
    pub name: String,
    /// The function, `<namespace>:<package>/<interface>.<function>`.
    pub function: String,
    /// The parameters of every tick's execution (`null` when absent).
    #[serde(default)]
    pub params: serde_json::Value,
    /// A cron expression (five fields, or six with seconds first); or else `every`.
    pub cron: Option<String>,
    /// An interval (`15m`); or else `cron`.
    pub every: Option<String>,
    /// With `every`: the offset of each tick from the multiples of the interval.
    pub offset: Option<String>,
    /// The IANA time zone of a cron expression (`UTC` when absent).
    pub timezone: Option<String>,
    /// `skip` (when absent), `buffer-one`, `allow-all` or `cancel-other`.
    pub overlap: Option<String>,
    /// How old a missed tick may be and still fire (5 minutes when absent).
    pub catchup_window: Option<String>,
    /// Each tick's execution is due up to this much after the tick (none when absent).
    pub jitter: Option<String>,
    /// At most this many executions.
    pub max_runs: Option<u64>,
    /// No tick after this time (RFC 3339) fires.
    pub end: Option<String>,
}

/// A field of a [`ScheduleDraft`] that is refused, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct DraftError {
    /// The field, as the draft names it (`cron`, `catchup_window`, ...).
    pub field: &'static str,
    /// Why.
    pub reason: String,
}

fn refused(field: &'static str, reason: impl std::fmt::Display) -> DraftError {
    DraftError {
        field,
        reason: reason.to_string(),
    }
}

fn duration(field: &'static str, text: Option<&str>) -> Result<Option<Duration>, DraftError> {
    text.map(|text| {
        text.parse::<HumanDuration>()
            .map(Duration::from)
            .map_err(|err| refused(field, err))
    })
    .transpose()
}

/// The longest catch-up window or jitter a draft takes: a century. Longer ones reach past the
/// calendar's bounds when ticks are fired.
pub const MAX_WINDOW: Duration = Duration::from_secs(36_500 * 86_400);

/// [`duration`], at most [`MAX_WINDOW`].
fn window(field: &'static str, text: Option<&str>) -> Result<Option<Duration>, DraftError> {
    match duration(field, text)? {
        Some(long) if long > MAX_WINDOW => Err(refused(
            field,
            format!(
                "`{}` is longer than {} (a century)",
                text.unwrap_or_default(),
                HumanDuration(MAX_WINDOW)
            ),
        )),
        checked => Ok(checked),
    }
}

impl ScheduleDraft {
    /// The definition the draft describes.
    ///
    /// # Errors
    /// The first field refused, in the order of the fields.
    pub fn definition(&self) -> Result<Definition, DraftError> {
        let name: ScheduleName = self.name.parse().map_err(|err| refused("name", err))?;
        let ffqn: FunctionFqn = (self.function.parse()).map_err(|err| refused("function", err))?;
        let spec: Spec = match (&self.cron, &self.every) {
            (Some(_), Some(_)) => {
                return Err(refused(
                    "cron",
                    "give a cron expression or an interval, not both",
                ));
            }
            (Some(cron), None) => cron.parse().map_err(|err| refused("cron", err))?,
            (None, Some(every)) => {
                duration("every", Some(every))?;
                duration("offset", self.offset.as_deref())?;
                let text = match &self.offset {
                    Some(offset) => format!("every {every} offset {offset}"),
                    None => format!("every {every}"),
                };
                text.parse().map_err(|err| refused("every", err))?
            }
            (None, None) => {
                return Err(refused(
                    "cron",
                    "a schedule needs a cron expression or an interval (every)",
                ));
            }
        };
        if self.offset.is_some() && self.every.is_none() {
            return Err(refused("offset", "an offset goes with an interval (every)"));
        }
        let mut definition = Definition::new(name, ffqn, Json(self.params.clone()), spec);
        if let Some(zone) = &self.timezone {
            definition.zone = zone.parse().map_err(|err| refused("timezone", err))?;
        }
        if let Some(overlap) = &self.overlap {
            definition.overlap = overlap.parse().map_err(|err| refused("overlap", err))?;
        }
        if let Some(window) = window("catchup_window", self.catchup_window.as_deref())? {
            definition.catchup_window = window;
        }
        if let Some(jitter) = window("jitter", self.jitter.as_deref())? {
            definition.jitter = jitter;
        }
        if self.max_runs == Some(0) {
            return Err(refused(
                "max_runs",
                "a schedule that may run 0 times never fires",
            ));
        }
        definition.max_runs = self.max_runs;
        definition.end = (self.end.as_deref())
            .map(|end| {
                end.parse::<DateTime<Utc>>().map_err(|err| {
                    refused("end", format!("`{end}` is not an RFC 3339 time ({err})"))
                })
            })
            .transpose()?;
        Ok(definition)
    }
}
