//! What this process finished, failed and retried lately, per function: the counters
//! `stele_executions_finished_total` and `stele_retries_total` kept in minute buckets for
//! the last hour, for a page to read (the web UI's overview reads the same figures the
//! metrics export).
//!
//! [`RecentRecorder`] wraps the recorder a program installs: every metric goes on to it
//! unchanged, and the increments of those two counters are also added to [`Recent`].

use concepts::metrics as m;
use metrics::{
    Counter, CounterFn, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};
use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

/// How far back [`Recent`] remembers, in minute buckets.
const MINUTES: usize = 60;

/// The counts of one function in one window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Finished with a value (`ok`).
    pub ok: u64,
    /// Finished otherwise (an error, a failure, a timeout, a cancellation).
    pub failed: u64,
    /// Attempts scheduled again.
    pub retried: u64,
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Ok,
    Failed,
    Retried,
}

/// One function's minute buckets: the minute each holds (since `Recent::started`; `u64::MAX`
/// for none yet) and its counts.
#[derive(Debug)]
struct Buckets([(u64, Counts); MINUTES]);

impl Default for Buckets {
    fn default() -> Self {
        Self([(u64::MAX, Counts::default()); MINUTES])
    }
}

/// The last hour of finishes and retries, per function, in minute buckets.
#[derive(Debug)]
pub struct Recent {
    started: Instant,
    functions: Mutex<BTreeMap<String, Buckets>>,
}

impl Default for Recent {
    fn default() -> Self {
        Self::new()
    }
}

impl Recent {
    /// Nothing counted yet.
    #[must_use]
    pub fn new() -> Self {
        Self {
            started: Instant::now(),
            functions: Mutex::new(BTreeMap::new()),
        }
    }

    fn minute(&self) -> u64 {
        self.started.elapsed().as_secs() / 60
    }

    fn add(&self, function: &str, kind: Kind, value: u64) {
        let minute = self.minute();
        let mut functions = self
            .functions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let buckets = functions.entry(function.to_string()).or_default();
        let slot = &mut buckets.0[usize::try_from(minute).unwrap_or(0) % MINUTES];
        if slot.0 != minute {
            *slot = (minute, Counts::default());
        }
        match kind {
            Kind::Ok => slot.1.ok += value,
            Kind::Failed => slot.1.failed += value,
            Kind::Retried => slot.1.retried += value,
        }
    }

    /// Per function, the counts of the last `window` (rounded up to whole minutes, at most an
    /// hour), for the functions counted at all.
    #[must_use]
    pub fn within(&self, window: Duration) -> BTreeMap<String, Counts> {
        let now = self.minute();
        let minutes = window.as_secs().div_ceil(60).clamp(1, MINUTES as u64);
        let functions = self
            .functions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        functions
            .iter()
            .map(|(function, buckets)| {
                let mut sum = Counts::default();
                for (minute, counts) in &buckets.0 {
                    if *minute <= now && now - *minute < minutes {
                        sum.ok += counts.ok;
                        sum.failed += counts.failed;
                        sum.retried += counts.retried;
                    }
                }
                (function.clone(), sum)
            })
            .collect()
    }

    /// How long it has counted: a window longer than this holds less than it says.
    #[must_use]
    pub fn counted_for(&self) -> Duration {
        self.started.elapsed()
    }
}

/// A counter that goes on to the inner recorder's and adds to [`Recent`].
struct Both {
    inner: Counter,
    recent: Arc<Recent>,
    function: String,
    kind: Kind,
}

impl CounterFn for Both {
    fn increment(&self, value: u64) {
        self.inner.increment(value);
        self.recent.add(&self.function, self.kind, value);
    }

    fn absolute(&self, value: u64) {
        self.inner.absolute(value);
    }
}

/// The recorder to install: `inner` records everything, and the finishes and retries are
/// also kept in [`Recent`] (`recent()`).
#[derive(Debug)]
pub struct RecentRecorder<R> {
    inner: R,
    recent: Arc<Recent>,
}

impl<R: Recorder> RecentRecorder<R> {
    /// `inner`, with a fresh [`Recent`] beside it.
    pub fn new(inner: R) -> Self {
        Self {
            inner,
            recent: Arc::new(Recent::new()),
        }
    }

    /// What it keeps of the last hour.
    #[must_use]
    pub fn recent(&self) -> Arc<Recent> {
        self.recent.clone()
    }
}

fn label<'a>(key: &'a Key, name: &str) -> Option<&'a str> {
    key.labels()
        .find(|label| label.key() == name)
        .map(|label| label.value())
}

impl<R: Recorder> Recorder for RecentRecorder<R> {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner.describe_counter(key, unit, description);
    }

    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner.describe_gauge(key, unit, description);
    }

    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner.describe_histogram(key, unit, description);
    }

    fn register_counter(&self, key: &Key, metadata: &Metadata<'_>) -> Counter {
        let inner = self.inner.register_counter(key, metadata);
        let kind = match key.name() {
            name if name == m::EXECUTIONS_FINISHED => match label(key, m::OUTCOME) {
                Some("ok") => Kind::Ok,
                _ => Kind::Failed,
            },
            name if name == m::RETRIES => Kind::Retried,
            _ => return inner,
        };
        let Some(function) = label(key, m::FUNCTION) else {
            return inner;
        };
        Counter::from_arc(Arc::new(Both {
            inner,
            recent: self.recent.clone(),
            function: function.to_string(),
            kind,
        }))
    }

    fn register_gauge(&self, key: &Key, metadata: &Metadata<'_>) -> Gauge {
        self.inner.register_gauge(key, metadata)
    }

    fn register_histogram(&self, key: &Key, metadata: &Metadata<'_>) -> Histogram {
        self.inner.register_histogram(key, metadata)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use metrics::{Level, NoopRecorder};

    #[test]
    fn finishes_and_retries_are_kept_by_function_and_the_rest_passes_through() {
        let recorder = RecentRecorder::new(NoopRecorder);
        let recent = recorder.recent();
        let metadata = Metadata::new("test", Level::INFO, None);
        let key = |name: &'static str, labels: &[(&'static str, &'static str)]| {
            Key::from_parts(
                name,
                labels
                    .iter()
                    .map(|(k, v)| metrics::Label::new(*k, *v))
                    .collect::<Vec<_>>(),
            )
        };
        let f = "a:b/c.d";
        recorder
            .register_counter(
                &key(
                    m::EXECUTIONS_FINISHED,
                    &[(m::FUNCTION, f), (m::OUTCOME, "ok")],
                ),
                &metadata,
            )
            .increment(3);
        recorder
            .register_counter(
                &key(
                    m::EXECUTIONS_FINISHED,
                    &[(m::FUNCTION, f), (m::OUTCOME, "failed")],
                ),
                &metadata,
            )
            .increment(1);
        recorder
            .register_counter(&key(m::RETRIES, &[(m::FUNCTION, f)]), &metadata)
            .increment(2);
        recorder
            .register_counter(&key(m::ATTEMPTS, &[(m::FUNCTION, f)]), &metadata)
            .increment(9);
        let counts = recent.within(Duration::from_secs(300));
        assert_eq!(
            counts.get(f),
            Some(&Counts {
                ok: 3,
                failed: 1,
                retried: 2
            })
        );
        assert_eq!(counts.len(), 1);
    }
}
