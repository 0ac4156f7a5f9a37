//! The soak run (`--soak`): executions submitted at a steady rate for minutes, one executor and
//! the timers watcher running them, and the `timers_watcher::Pruner` deleting finished trees a
//! few seconds after they finish; every few seconds a row of what was submitted, finished,
//! pruned and is still stored, and the sizes of the SQLite files or of the PostgreSQL tables. The store must level off: the summary
//! compares the largest size of the last third of the run with that of the middle third.

use crate::{
    counting::CountingDb,
    multi::{STOP, noop_node},
    noop_requests,
    probe::Probe,
};
use anyhow::Context;
use concepts::{DbClientExt as _, DbConnection, ListExecutionsFilter};
use std::{
    fmt::Write as _,
    sync::Arc,
    time::{Duration, Instant},
};
use timers_watcher::{PrunerConfig, TimersWatcherConfig};

/// How a soak run goes.
#[derive(Debug, Clone)]
pub(crate) struct SoakConfig {
    /// How long executions are submitted.
    pub(crate) duration: Duration,
    /// Executions submitted per second.
    pub(crate) rate: u64,
    /// How long a finished tree is kept before it is pruned.
    pub(crate) retention: Duration,
    /// How often the pruner runs.
    pub(crate) prune_interval: Duration,
    /// Top-level executions per `prune` call.
    pub(crate) prune_batch: usize,
    /// How often a row is printed.
    pub(crate) report_every: Duration,
    /// How many executions the executor locks per tick.
    pub(crate) executor_batch: usize,
}

/// How often the submitter tops up to the rate.
const SUBMIT_TICK: Duration = Duration::from_millis(50);

/// One row of the run.
struct Sample {
    elapsed: Duration,
    submitted: u64,
    finished: usize,
    pruned: usize,
    stored: usize,
    sizes: Vec<(String, u64)>,
}

impl Sample {
    fn total(&self) -> u64 {
        self.sizes.iter().map(|(_, bytes)| bytes).sum()
    }

    fn header(&self) -> String {
        let mut header =
            "| elapsed (s) | submitted | finished | pruned | in the store |".to_string();
        let mut rule = "|---:|---:|---:|---:|---:|".to_string();
        if !self.sizes.is_empty() {
            header.push_str(" total (KiB) |");
            rule.push_str("---:|");
            for (name, _) in &self.sizes {
                let _ = write!(header, " {name} (KiB) |");
                rule.push_str("---:|");
            }
        }
        format!("{header}\n{rule}")
    }

    fn row(&self) -> String {
        let mut row = format!(
            "| {:.0} | {} | {} | {} | {} |",
            self.elapsed.as_secs_f64(),
            self.submitted,
            self.finished,
            self.pruned,
            self.stored
        );
        if !self.sizes.is_empty() {
            let _ = write!(row, " {} |", kib(self.total()));
            for (_, bytes) in &self.sizes {
                let _ = write!(row, " {} |", kib(*bytes));
            }
        }
        row
    }
}

fn kib(bytes: u64) -> u64 {
    bytes.div_ceil(1024)
}

/// The largest value of the middle and of the last third of `series`, `None` with fewer than
/// three values.
fn thirds_max(series: &[u64]) -> Option<(u64, u64)> {
    let n = series.len();
    if n < 3 {
        return None;
    }
    let middle = series[n / 3..2 * n / 3].iter().max()?;
    let last = series[2 * n / 3..].iter().max()?;
    Some((*middle, *last))
}

/// Growth of the last third's maximum over the middle third's above which a series did not
/// level off.
const LEVEL_TOLERANCE: f64 = 0.05;

/// "levelled off" or not, with the figures, for the series `what` in `unit`.
fn levelling(what: &str, unit: &str, series: &[u64]) -> String {
    let Some((middle, last)) = thirds_max(series) else {
        return format!("{what}: too few rows to compare thirds");
    };
    let growth = if middle == 0 {
        if last == 0 { 0.0 } else { f64::INFINITY }
    } else {
        (last as f64 - middle as f64) / middle as f64
    };
    let verdict = if growth <= LEVEL_TOLERANCE {
        "levelled off"
    } else {
        "still growing"
    };
    format!(
        "{what}: {verdict}: the last third's maximum is {last} {unit}, the middle third's {middle} \
         {unit} ({:+.1}%; levelled off means at most {:+.0}%)",
        growth * 100.0,
        LEVEL_TOLERANCE * 100.0
    )
}

/// The range of the executions in the store over the last two thirds of the run, against
/// what the pruner lets through: the executions of `retention`, plus up to one `interval`'s
/// worth between two passes (a sample may fall anywhere between them, so the count swings
/// over that range rather than settling on one value).
fn stored_range(stored: &[usize], config: &SoakConfig) -> String {
    let tail = &stored[stored.len() / 3..];
    let (Some(low), Some(high)) = (tail.iter().min(), tail.iter().max()) else {
        return "executions in the store: no rows".to_string();
    };
    let rate = config.rate as f64;
    let kept = rate * config.retention.as_secs_f64();
    let swing = rate * config.prune_interval.as_secs_f64();
    format!(
        "executions in the store over the last two thirds: {low} to {high} (the retention holds \
         {kept:.0}, plus up to {swing:.0} submitted between two pruner passes)"
    )
}

/// Runs the soak on `db` (a fresh store, closed at the end), reading sizes through `probe`;
/// prints a row every `report_every` and returns the summary lines.
pub(crate) async fn run(
    backend: &str,
    db: Arc<dyn DbConnection>,
    probe: &Probe,
    config: &SoakConfig,
) -> anyhow::Result<Vec<String>> {
    let pruner_config = PrunerConfig {
        retention: config.retention,
        interval: config.prune_interval,
        batch: config.prune_batch,
    };
    let counting = Arc::new(CountingDb::new(db.clone(), usize::MAX, false));
    let watcher_config = TimersWatcherConfig {
        tick_sleep: Duration::from_secs(1),
        leeway: Duration::ZERO,
    };
    let node = noop_node(&db, counting.clone(), config.executor_batch)?
        .timers_watcher(watcher_config)
        .pruner(pruner_config)
        .start()?;

    let submitted = submit(backend, &db, probe, config, &counting).await;
    node.shutdown(STOP).await;
    db.close().await;
    let samples = submitted?;

    let mut summary = Vec::new();
    if let Some(last) = samples.last() {
        summary.push(format!(
            "{backend}: {} submitted, {} finished, {} pruned, {} in the store after {:.0} s",
            last.submitted,
            last.finished,
            last.pruned,
            last.stored,
            last.elapsed.as_secs_f64()
        ));
    }
    let stored: Vec<usize> = samples.iter().map(|s| s.stored).collect();
    summary.push(format!("{backend}: {}", stored_range(&stored, config)));
    if samples.iter().any(|s| !s.sizes.is_empty()) {
        let totals: Vec<u64> = samples.iter().map(|s| kib(s.total())).collect();
        summary.push(format!(
            "{backend}: {}",
            levelling("total size", "KiB", &totals)
        ));
    }
    Ok(summary)
}

/// Submits at the rate until the duration is over, printing a row every `report_every`;
/// returns the rows.
async fn submit(
    backend: &str,
    db: &Arc<dyn DbConnection>,
    probe: &Probe,
    config: &SoakConfig,
    counting: &CountingDb,
) -> anyhow::Result<Vec<Sample>> {
    let start = Instant::now();
    let mut ticker = tokio::time::interval(SUBMIT_TICK);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut submitted = 0u64;
    let mut next_report = config.report_every;
    let mut samples: Vec<Sample> = Vec::new();
    loop {
        ticker.tick().await;
        let elapsed = start.elapsed().min(config.duration);
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "a count of executions, far below 2^52"
        )]
        let due = (config.rate as f64 * elapsed.as_secs_f64()) as u64;
        if due > submitted {
            let count = usize::try_from(due - submitted)?;
            db.create_batch(noop_requests(count)?)
                .await
                .with_context(|| format!("{backend}: create_batch"))?;
            submitted = due;
        }
        if elapsed >= next_report || elapsed >= config.duration {
            let stored = db
                .list_all_executions(ListExecutionsFilter::default())
                .await
                .with_context(|| format!("{backend}: listing the executions"))?
                .len();
            // Only the pruner deletes, and nothing is submitted while the sample is taken.
            let pruned = usize::try_from(submitted)?.saturating_sub(stored);
            let sample = Sample {
                elapsed,
                submitted,
                finished: counting.finished(),
                pruned,
                stored,
                sizes: probe.sizes().await?,
            };
            if samples.is_empty() {
                println!("{}", sample.header());
            }
            println!("{}", sample.row());
            samples.push(sample);
            next_report += config.report_every;
        }
        if elapsed >= config.duration {
            return Ok(samples);
        }
    }
}

/// `--soak`: the soak on a fresh store of each backend of `--backends`, one after the other.
pub(crate) async fn run_all(
    args: &crate::Args,
    dir: &std::path::Path,
    sync: storage_sqlite::Synchronous,
    postgres_url: Option<&str>,
) -> anyhow::Result<()> {
    let config = SoakConfig {
        duration: Duration::from_secs(args.soak_seconds),
        rate: args.soak_rate,
        retention: Duration::from_secs(args.soak_retention_seconds),
        prune_interval: Duration::from_millis(args.soak_prune_interval_ms),
        prune_batch: args.soak_prune_batch,
        report_every: Duration::from_secs(args.soak_report_seconds.max(1)),
        executor_batch: args.batch_size,
    };
    anyhow::ensure!(
        config.rate > 0,
        "--soak-rate: 0 executions per second submit nothing"
    );
    println!("Machine: {}", crate::targets::machine());
    println!(
        "Soak: {} no-op executions/s submitted for {} s (one create_batch every {} ms), one \
         executor (batch size {}), the timers watcher, and the Pruner (every {} ms, retention \
         {} s, at most {} top-level executions per prune call); a row every {} s, with pruned = \
         submitted - in the store (only the pruner deletes).",
        config.rate,
        config.duration.as_secs(),
        SUBMIT_TICK.as_millis(),
        config.executor_batch,
        config.prune_interval.as_millis(),
        config.retention.as_secs(),
        config.prune_batch,
        config.report_every.as_secs()
    );
    let mut summary = Vec::new();
    for backend in &args.backends {
        let Some(store) = crate::Store::open(backend, dir, sync, postgres_url, "soak").await?
        else {
            eprintln!("{}", crate::NO_POSTGRES);
            summary.push(format!("Note: {}.", crate::NO_POSTGRES));
            continue;
        };
        let label = match backend.as_str() {
            "sqlite" => format!("sqlite (synchronous={})", args.synchronous),
            other => other.to_string(),
        };
        println!("\n{label}:\n");
        let ran = run(&label, store.db.clone(), &store.probe, &config).await;
        store.finish().await?;
        summary.extend(ran?);
    }
    println!();
    for line in summary {
        println!("{line}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thirds_compare_the_middle_and_the_last() {
        assert_eq!(thirds_max(&[1, 2]), None);
        assert_eq!(thirds_max(&[1, 5, 3, 4, 2, 4]), Some((4, 4)));
        assert_eq!(thirds_max(&[1, 2, 3, 4, 5, 6, 7, 8, 9]), Some((6, 9)));
    }

    #[test]
    fn stored_range_reads_the_last_two_thirds() {
        let config = SoakConfig {
            duration: Duration::from_secs(60),
            rate: 200,
            retention: Duration::from_secs(5),
            prune_interval: Duration::from_secs(1),
            prune_batch: 1_000,
            report_every: Duration::from_secs(10),
            executor_batch: 256,
        };
        let range = stored_range(&[5, 1_200, 1_010, 1_190, 1_050, 1_100], &config);
        assert!(range.contains(": 1010 to 1190 "), "{range}");
        assert!(range.contains("holds 1000, plus up to 200"), "{range}");
        assert!(stored_range(&[], &config).contains("no rows"));
    }

    #[test]
    fn levelling_reports_growth_against_the_tolerance() {
        let flat = levelling("size", "KiB", &[10, 100, 100, 101, 100, 102]);
        assert!(flat.contains("levelled off"), "{flat}");
        assert!(flat.contains("+1.0%"), "{flat}");
        let growing = levelling("size", "KiB", &[10, 20, 30, 40, 50, 60]);
        assert!(growing.contains("still growing"), "{growing}");
        assert!(levelling("size", "KiB", &[1]).contains("too few rows"));
    }
}
