//! What this process finished, failed and retried lately, per function: the counters
//! `stele_executions_finished_total` and `stele_retries_total` kept for the last hour at a
//! minute's resolution, for a page to read (the web UI's overview reads the same figures the
//! metrics export).
//!
//! [`RecentRecorder`] wraps the recorder a program installs: every metric goes on to it
//! unchanged, and the increments of those two counters are also added to [`Recent`]. An
//! increment is one atomic addition to the function's running totals (no lock, no clock, no
//! allocation: it sits on every execution's path); [`Recent::upkeep`], which the program calls
//! every few seconds, notes the totals once a minute, and a window's counts are the totals now
//! less those noted at its start.

use concepts::metrics as m;
use metrics::{
    Counter, CounterFn, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};
use std::{
    collections::{BTreeMap, VecDeque},
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

/// How far back [`Recent`] remembers, in minutes.
const MINUTES: u64 = 60;

/// The counts of one function in one window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Finished with a value (`ok`).
    pub ok: u64,
    /// Finished otherwise (an error, a failure, a timeout; cancellations are not counted per
    /// function).
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

/// One function's running totals since the process started.
#[derive(Debug, Default)]
struct Totals([AtomicU64; 3]);

impl Totals {
    fn read(&self) -> Counts {
        let [ok, failed, retried] = self.0.each_ref().map(|total| total.load(Ordering::Relaxed));
        Counts {
            ok,
            failed,
            retried,
        }
    }
}

/// The totals of every function, noted at one minute (since `Recent::started`).
type Noted = (u64, BTreeMap<String, Counts>);

/// The last hour of finishes and retries, per function, at a minute's resolution.
#[derive(Debug)]
pub struct Recent {
    started: Instant,
    /// Each function's totals, shared with its counters; locked only to add a function (when
    /// a counter is registered) and to read.
    functions: Mutex<BTreeMap<String, Arc<Totals>>>,
    /// The totals noted at the first upkeep of each of the last minutes, oldest first.
    noted: Mutex<VecDeque<Noted>>,
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
            functions: Mutex::default(),
            noted: Mutex::default(),
        }
    }

    fn minute(&self) -> u64 {
        self.started.elapsed().as_secs() / 60
    }

    fn totals(&self, function: &str) -> Arc<Totals> {
        let mut functions = self
            .functions
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        functions.entry(function.to_string()).or_default().clone()
    }

    fn read(&self) -> BTreeMap<String, Counts> {
        let functions = self
            .functions
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        (functions.iter())
            .map(|(function, totals)| (function.clone(), totals.read()))
            .collect()
    }

    /// Notes the totals if this minute has none yet: call it at least once a minute (`stele
    /// serve` does every 5 s); a minute without a call is counted in the next one noted.
    pub fn upkeep(&self) {
        self.upkeep_at(self.minute());
    }

    fn upkeep_at(&self, minute: u64) {
        let mut noted = self.noted.lock().unwrap_or_else(PoisonError::into_inner);
        if noted.back().is_some_and(|(last, _)| *last == minute) {
            return;
        }
        noted.push_back((minute, self.read()));
        while noted
            .front()
            .is_some_and(|(first, _)| minute - first > MINUTES)
        {
            noted.pop_front();
        }
    }

    /// Per function, the counts of the last `window` (rounded up to whole minutes, at most an
    /// hour: this minute and the ones before it), for the functions counted at all.
    #[must_use]
    pub fn within(&self, window: Duration) -> BTreeMap<String, Counts> {
        self.within_at(window, self.minute())
    }

    fn within_at(&self, window: Duration, minute: u64) -> BTreeMap<String, Counts> {
        self.upkeep_at(minute);
        let minutes = window.as_secs().div_ceil(60).clamp(1, MINUTES);
        let first = (minute + 1).saturating_sub(minutes);
        let now = self.read();
        let baseline = if first == 0 {
            // The window reaches the start: everything counted is in it.
            BTreeMap::new()
        } else {
            let noted = self.noted.lock().unwrap_or_else(PoisonError::into_inner);
            (noted.iter())
                .find(|(minute, _)| *minute >= first)
                .map(|(_, totals)| totals.clone())
                .unwrap_or_default()
        };
        now.into_iter()
            .map(|(function, total)| {
                let before = baseline.get(&function).copied().unwrap_or_default();
                let counts = Counts {
                    ok: total.ok.saturating_sub(before.ok),
                    failed: total.failed.saturating_sub(before.failed),
                    retried: total.retried.saturating_sub(before.retried),
                };
                (function, counts)
            })
            .collect()
    }

    /// How long it has counted: a window longer than this holds less than it says.
    #[must_use]
    pub fn counted_for(&self) -> Duration {
        self.started.elapsed()
    }
}

/// A counter that goes on to the inner recorder's and adds to its function's totals.
struct Both {
    inner: Counter,
    totals: Arc<Totals>,
    kind: Kind,
}

impl CounterFn for Both {
    fn increment(&self, value: u64) {
        self.inner.increment(value);
        self.totals.0[self.kind as usize].fetch_add(value, Ordering::Relaxed);
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
            totals: self.recent.totals(function),
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

    #[test]
    fn a_window_counts_from_the_totals_noted_at_its_first_minute() {
        let recorder = RecentRecorder::new(NoopRecorder);
        let recent = recorder.recent();
        let metadata = Metadata::new("test", Level::INFO, None);
        let labels = [
            metrics::Label::new(m::FUNCTION, "a:b/c.d"),
            metrics::Label::new(m::OUTCOME, "ok"),
        ];
        let ok = recorder.register_counter(
            &Key::from_parts(m::EXECUTIONS_FINISHED, labels.to_vec()),
            &metadata,
        );
        let five = Duration::from_secs(300);
        let ok_within = |window, minute| recent.within_at(window, minute)["a:b/c.d"].ok;
        ok.increment(1); // minute 0
        recent.upkeep_at(0);
        recent.upkeep_at(3);
        ok.increment(10); // minute 3
        recent.upkeep_at(7);
        ok.increment(100); // minute 7
        assert_eq!(ok_within(five, 7), 110, "minutes 3 to 7: noted at 3");
        assert_eq!(ok_within(Duration::from_secs(60), 7), 100, "minute 7 alone");
        assert_eq!(
            ok_within(Duration::from_secs(3_600), 7),
            111,
            "from the start"
        );
        // Minute 9 noted nothing of its own before the read: minutes 5 to 9 start at 7.
        assert_eq!(ok_within(five, 9), 100);
        recent.upkeep_at(70);
        ok.increment(1_000);
        assert_eq!(
            ok_within(Duration::from_secs(3_600), 70),
            1_000,
            "the last hour is minutes 11 to 70: noted first at 70"
        );
    }
}
