//! Mass schedule fires: many schedules due in the same minute, fired by one scheduler pass
//! (`timers_watcher::fire_schedules`, `SCHEDULES_PER_WRITE` schedules to a transaction, each
//! tick's execution created in the transaction that handles it). Measured: the time of that
//! pass, as fires per second.

use anyhow::{Context, ensure};
use chrono::{DateTime, Timelike as _, Utc};
use concepts::{
    ClockFn, ComponentId, DbConnection, Json,
    schedule::{CreateScheduleRequest, Definition, RunSettings},
};
use executor::Now;
use std::{
    sync::Arc,
    time::{Duration, Instant},
};

/// What one measurement found.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FireFigures {
    /// Schedules due at once.
    pub(crate) schedules: usize,
    /// Executions fired per second by the one pass.
    pub(crate) per_second: f64,
}

/// Creates `count` schedules of one minute's tick, each firing once at the next minute.
async fn create(db: &dyn DbConnection, count: usize, now: DateTime<Utc>) -> anyhow::Result<()> {
    let settings = RunSettings {
        component_id: ComponentId::new("activity", "bench")?,
        max_retries: 0,
        retry_exp_backoff: Duration::ZERO,
    };
    let ffqn: concepts::FunctionFqn = "bench:fires/ifc@1.0.0.tick".parse()?;
    for n in 0..count {
        let mut definition = Definition::new(
            format!("minutely-{n:06}").parse()?,
            ffqn.clone(),
            Json(serde_json::json!([n])),
            "* * * * *".parse()?,
        );
        definition.max_runs = Some(1);
        let req = CreateScheduleRequest {
            definition,
            settings: settings.clone(),
            now,
        };
        db.create_schedule(req).await.context("create_schedule")?;
    }
    Ok(())
}

/// Measures `schedules` schedules due in the same minute on `db`, fired by one pass.
pub(crate) async fn measure(
    db: Arc<dyn DbConnection>,
    schedules: usize,
) -> anyhow::Result<FireFigures> {
    let now = Now.now();
    create(db.as_ref(), schedules, now).await?;
    // The next minute, and a moment after it: every schedule is due.
    let minute = now
        .with_second(0)
        .and_then(|at| at.with_nanosecond(0))
        .unwrap_or(now);
    let due = minute + chrono::Duration::seconds(61);
    let started = Instant::now();
    let pass = timers_watcher::fire_schedules(db.as_ref(), due)
        .await
        .context("the scheduler's pass")?;
    let elapsed = started.elapsed();
    ensure!(
        pass.fired == schedules,
        "the pass fired {} of {schedules} schedules",
        pass.fired
    );
    Ok(FireFigures {
        schedules,
        per_second: schedules as f64 / elapsed.as_secs_f64(),
    })
}

/// The targets-table row of `figures` on `backend`: at least 10,000 fires/s on SQLite
/// (issue 22), reported on the others.
pub(crate) fn rows(backend: &str, figures: &FireFigures) -> Vec<crate::targets::Row> {
    use crate::targets::{Goal, Row};
    let goal = match backend {
        "sqlite" => Goal::AtLeast(10_000.0),
        _ => Goal::Report,
    };
    vec![Row::alone(
        format!(
            "schedules due in one minute, {} schedules, one scheduler pass, fires/s",
            figures.schedules
        ),
        figures.per_second,
        "/s",
        goal,
    )]
}
