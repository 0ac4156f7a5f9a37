//! The typed client of schedules (`docs/SEMANTICS.md` §19): a schedule of a typed function
//! ([`Function::schedule`]), and [`Schedules`], which stores, changes, pauses, resumes,
//! deletes, triggers and backfills schedules and reads them back, from any process and against
//! any backend. A node declares its own schedules in code with `NodeBuilder::schedule`; any
//! node's timers watcher fires them.

use crate::{error::ClientError, function::Function};
use chrono::{DateTime, Utc};
use concepts::{
    ClockFn, ComponentId, DbError, DbSchedules, DuplicateKind,
    schedule::{
        ChangeScheduleRequest, CreateScheduleRequest, Definition, RunSettings, ScheduleChange,
        ScheduleChanged, ScheduleCreated, ScheduleName, ScheduleRow, Spec, Tick,
        TriggerScheduleRequest, TriggerTicks, Triggered,
    },
};
use serde::Serialize;
use std::{sync::Arc, time::Duration};

impl<P: Serialize, R> Function<P, R> {
    /// A schedule named `name` that fires this function with `params` at each tick of
    /// `spec`, in UTC, with the default policies (skip on overlap, a five-minute catch-up
    /// window, no jitter, no limit, no end); its public fields change them.
    ///
    /// ```
    /// use workflow::Function;
    /// const REPORT: Function<String, u64> = Function::new("shop:reports/api.daily");
    /// let mut nightly = REPORT
    ///     .schedule("nightly-report", &"eu".to_string(), "0 3 * * *".parse()?)?;
    /// nightly.zone = "Europe/Prague".parse()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// The schedule's or the function's name is illegal, or the parameters do not encode.
    pub fn schedule(&self, name: &str, params: &P, spec: Spec) -> Result<Definition, ClientError> {
        let name = name
            .parse::<ScheduleName>()
            .map_err(ClientError::InvalidScheduleName)?;
        let ffqn = self.ffqn().map_err(|source| ClientError::InvalidName {
            name: self.name(),
            source,
        })?;
        let params = self
            .encode_params(params)
            .map_err(|err| ClientError::EncodeParams {
                name: self.name(),
                reason: err.to_string(),
            })?;
        Ok(Definition::new(name, ffqn, params, spec))
    }
}

/// Stores and operates schedules; the executions its schedules fire are created in its
/// component with its retries, as a [`Client`](crate::Client)'s submits are.
#[derive(Clone)]
pub struct Schedules<C: ClockFn> {
    db: Arc<dyn DbSchedules>,
    clock: C,
    settings: RunSettings,
}

impl<C: ClockFn> Schedules<C> {
    /// A client of `db` whose schedules fire executions in `component_id` with 3 retries and a
    /// one-second first backoff (see [`Schedules::retries`]).
    #[must_use]
    pub fn new(db: Arc<dyn DbSchedules>, clock: C, component_id: ComponentId) -> Self {
        Self {
            db,
            clock,
            settings: RunSettings {
                component_id,
                max_retries: 3,
                retry_exp_backoff: Duration::from_secs(1),
            },
        }
    }

    /// The retries of the executions the schedules fire.
    #[must_use]
    pub fn retries(mut self, max_retries: u32, retry_exp_backoff: Duration) -> Self {
        self.settings.max_retries = max_retries;
        self.settings.retry_exp_backoff = retry_exp_backoff;
        self
    }

    /// Stores `definition`, whose first tick is the first one after now. The same schedule
    /// again is answered [`ScheduleCreated::AlreadyExisted`] and writes nothing.
    ///
    /// # Errors
    /// [`ClientError::ScheduleConflict`] when the name is stored with another definition or
    /// other settings; a spec with no fire time after now; the store failed.
    pub async fn create(&self, definition: Definition) -> Result<ScheduleCreated, ClientError> {
        let req = CreateScheduleRequest {
            definition,
            settings: self.settings.clone(),
            now: self.clock.now(),
        };
        self.db.create_schedule(req).await.map_err(refused)
    }

    /// Replaces the definition of the schedule of the same name for the ticks after the last
    /// one handled; the same definition again is [`ScheduleChanged::Unchanged`].
    ///
    /// # Errors
    /// The schedule is not stored ([`ClientError::NoSuchSchedule`]); the store failed.
    pub async fn update(&self, definition: Definition) -> Result<ScheduleChanged, ClientError> {
        let name = definition.name.clone();
        let change = ScheduleChange::Update {
            definition: Box::new(definition),
            settings: self.settings.clone(),
        };
        self.change(&name, change).await
    }

    /// Stops every tick of `name` until [`Schedules::resume`], with a note saying why.
    ///
    /// # Errors
    /// As [`Schedules::update`].
    pub async fn pause(
        &self,
        name: &ScheduleName,
        note: &str,
    ) -> Result<ScheduleChanged, ClientError> {
        let note = note.to_owned();
        self.change(name, ScheduleChange::Pause { note }).await
    }

    /// Fires the ticks of `name` again from now; those that fell while it was paused are
    /// recorded as skipped.
    ///
    /// # Errors
    /// As [`Schedules::update`].
    pub async fn resume(&self, name: &ScheduleName) -> Result<ScheduleChanged, ClientError> {
        self.change(name, ScheduleChange::Resume).await
    }

    /// Deletes `name` and its ticks; its executions are left as they are, and an unfinished
    /// last run is named in the answer.
    ///
    /// # Errors
    /// As [`Schedules::update`].
    pub async fn delete(&self, name: &ScheduleName) -> Result<ScheduleChanged, ClientError> {
        self.change(name, ScheduleChange::Delete).await
    }

    /// Fires one execution of `name` now, whatever its spec, pause or previous run.
    ///
    /// # Errors
    /// As [`Schedules::update`].
    pub async fn trigger(&self, name: &ScheduleName) -> Result<Triggered, ClientError> {
        self.trigger_ticks(name, TriggerTicks::Now).await
    }

    /// Fires every tick of `name` from `from` to `to` (both included, at most 1,000), due now;
    /// a tick whose execution exists is reported as fired already, not fired again.
    ///
    /// # Errors
    /// As [`Schedules::update`], and a range too long or backwards.
    pub async fn backfill(
        &self,
        name: &ScheduleName,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<Triggered, ClientError> {
        self.trigger_ticks(name, TriggerTicks::Backfill { from, to })
            .await
    }

    /// The schedule `name` as stored; [`ScheduleRow::next_fire_times`] gives its next ticks after a time.
    ///
    /// # Errors
    /// As [`Schedules::update`].
    pub async fn get(&self, name: &ScheduleName) -> Result<ScheduleRow, ClientError> {
        self.db.get_schedule(name).await.map_err(refused)
    }

    /// The last `limit` recorded ticks of `name`, newest first, each with what became of it
    /// (its execution, when fired).
    ///
    /// # Errors
    /// As [`Schedules::update`].
    pub async fn ticks(&self, name: &ScheduleName, limit: usize) -> Result<Vec<Tick>, ClientError> {
        self.db.schedule_ticks(name, limit).await.map_err(refused)
    }

    async fn change(
        &self,
        name: &ScheduleName,
        change: ScheduleChange,
    ) -> Result<ScheduleChanged, ClientError> {
        let req = ChangeScheduleRequest {
            name: name.clone(),
            change,
            now: self.clock.now(),
        };
        self.db.change_schedule(req).await.map_err(refused)
    }

    async fn trigger_ticks(
        &self,
        name: &ScheduleName,
        ticks: TriggerTicks,
    ) -> Result<Triggered, ClientError> {
        let req = TriggerScheduleRequest {
            name: name.clone(),
            ticks,
            now: self.clock.now(),
        };
        self.db.trigger_schedule(req).await.map_err(refused)
    }
}

/// The store's refusals a caller of schedules acts on, as typed errors.
fn refused(err: DbError) -> ClientError {
    match err {
        DbError::Duplicate(DuplicateKind::ScheduleConflict { name, differences }) => {
            ClientError::ScheduleConflict { name, differences }
        }
        DbError::NotFound(what) => match what
            .strip_prefix("schedule ")
            .and_then(|name| name.parse::<ScheduleName>().ok())
        {
            Some(name) => ClientError::NoSuchSchedule(name),
            None => ClientError::Db(DbError::NotFound(what)),
        },
        other => ClientError::Db(other),
    }
}
