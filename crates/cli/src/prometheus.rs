//! The recorder `stele serve` installs, and the text it serves on `/metrics`: counters, gauges
//! and histograms of fixed buckets, kept in atomics, rendered in Prometheus' text exposition
//! format; [`serve_recorder`] builds it wrapped in `node::recent::RecentRecorder`, the one
//! recorder both `stele serve` and `stele-bench --with-recorder` install.
//!
//! Why not `metrics-exporter-prometheus`: its histograms keep every sample until the next
//! render or upkeep (a push into a lock-free bucket with a timestamp, under an epoch) and
//! count them into buckets only then, about 150 instructions per sample; here a sample is
//! counted into its bucket as it is recorded (a search of the bounds, two atomic additions),
//! so recording costs the same however rarely it is scraped, and the memory is fixed per
//! series. The registry of handles is `metrics-util`'s.

use metrics::{
    Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};
use metrics_util::registry::{Registry, Storage};
use std::{
    collections::{BTreeMap, HashMap},
    fmt::Write as _,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
};

/// The buckets of the histograms in seconds: half a millisecond to five minutes.
pub const SECONDS: &[f64] = &[
    0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0, 300.0,
];

/// The buckets of the events a workflow's run replays.
pub const EVENTS: &[f64] = &[
    0.0, 1.0, 5.0, 10.0, 50.0, 100.0, 500.0, 1_000.0, 5_000.0, 20_000.0,
];

/// The buckets of any other histogram: Prometheus' own default.
pub const DEFAULT: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// The bounds of a histogram's buckets (increasing), with where to start looking for a
/// sample's bucket by its binary exponent: the first bound at or above the smallest positive
/// number of each exponent. A sample's bucket is then a step or two away, since bounds
/// spaced like Prometheus' (1, 2.5, 5, 10) put one or two in each power of two: about ten
/// instructions where a binary search of 17 bounds takes forty.
#[derive(Debug)]
pub struct Bounds {
    bounds: &'static [f64],
    /// Per exponent (the 11 bits of an `f64`'s), an index into `bounds`.
    start: Box<[u16]>,
}

impl Bounds {
    /// The buckets `bounds`, which must be increasing.
    #[must_use]
    pub fn new(bounds: &'static [f64]) -> Arc<Self> {
        let start = (0..2048_u64)
            .map(|exponent| {
                let smallest = f64::from_bits(exponent << 52);
                let index = bounds.partition_point(|bound| *bound < smallest);
                u16::try_from(index).unwrap_or(u16::MAX)
            })
            .collect();
        Arc::new(Self { bounds, start })
    }

    /// The index of the first bound at or above `value` (`le`), or the bounds' length for a
    /// value above them all or a NaN.
    fn bucket(&self, value: f64) -> usize {
        let bounds = self.bounds;
        if value.is_nan() {
            return bounds.len();
        }
        let mut index = if value > 0.0 {
            // Positive: the sign bit is 0, the next 11 bits are the exponent.
            let exponent = usize::try_from(value.to_bits() >> 52).unwrap_or(0);
            usize::from(self.start[exponent])
        } else {
            0
        };
        while index < bounds.len() && value > bounds[index] {
            index += 1;
        }
        index
    }
}

/// A histogram of fixed buckets: the count of samples at or below each bound (and above the
/// last), and their sum.
#[derive(Debug)]
pub struct FixedHistogram {
    bounds: Arc<Bounds>,
    /// One more than the bounds: the last counts the samples above every bound.
    counts: Box<[AtomicU64]>,
    /// The sum's `f64` bits.
    sum: AtomicU64,
}

impl FixedHistogram {
    /// An empty histogram of the buckets `bounds`.
    #[must_use]
    pub fn new(bounds: Arc<Bounds>) -> Self {
        Self {
            counts: (0..=bounds.bounds.len())
                .map(|_| AtomicU64::new(0))
                .collect(),
            bounds,
            sum: AtomicU64::new(0.0_f64.to_bits()),
        }
    }

    fn add(&self, value: f64, count: u64) {
        let index = self.bounds.bucket(value);
        self.counts[index].fetch_add(count, Ordering::Relaxed);
        #[expect(clippy::cast_precision_loss, reason = "a count of samples")]
        let added = value * count as f64;
        // `fetch_update` cannot fail with a closure that always answers.
        let _ = self
            .sum
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                Some((f64::from_bits(bits) + added).to_bits())
            });
    }

    /// The cumulative count of each bucket (the bounds', then `+Inf`'s), and the sum.
    #[must_use]
    pub fn read(&self) -> (Vec<u64>, f64) {
        let mut total = 0_u64;
        let cumulative = (self.counts.iter())
            .map(|count| {
                total = total.saturating_add(count.load(Ordering::Relaxed));
                total
            })
            .collect();
        (cumulative, f64::from_bits(self.sum.load(Ordering::Relaxed)))
    }
}

impl HistogramFn for FixedHistogram {
    fn record(&self, value: f64) {
        self.add(value, 1);
    }

    fn record_many(&self, value: f64, count: usize) {
        self.add(value, u64::try_from(count).unwrap_or(u64::MAX));
    }
}

/// How the registry makes each kind of handle: a histogram gets the buckets its name calls
/// for.
#[derive(Debug)]
struct Buckets {
    /// By a whole name first, then by a suffix.
    by_name: Vec<(String, Arc<Bounds>)>,
    by_suffix: Vec<(String, Arc<Bounds>)>,
    default: Arc<Bounds>,
}

impl Buckets {
    fn of(&self, name: &str) -> Arc<Bounds> {
        let whole = self.by_name.iter().find(|(whole, _)| whole == name);
        let suffix = || (self.by_suffix.iter()).find(|(suffix, _)| name.ends_with(suffix.as_str()));
        let found = whole.or_else(suffix).map(|(_, bounds)| bounds);
        found.unwrap_or(&self.default).clone()
    }
}

impl Storage<Key> for Buckets {
    type Counter = Arc<AtomicU64>;
    type Gauge = Arc<AtomicU64>;
    type Histogram = Arc<FixedHistogram>;

    fn counter(&self, _: &Key) -> Self::Counter {
        Arc::new(AtomicU64::new(0))
    }

    fn gauge(&self, _: &Key) -> Self::Gauge {
        Arc::new(AtomicU64::new(0.0_f64.to_bits()))
    }

    fn histogram(&self, key: &Key) -> Self::Histogram {
        Arc::new(FixedHistogram::new(self.of(key.name())))
    }
}

/// What a name was described with: its `# HELP`.
type Descriptions = Mutex<HashMap<String, String>>;

struct Inner {
    registry: Registry<Key, Buckets>,
    descriptions: Descriptions,
}

/// A recorder of counters, gauges and fixed-bucket histograms, rendered as Prometheus text
/// by its [`PrometheusHandle`].
pub struct PrometheusRecorder {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for PrometheusRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrometheusRecorder").finish_non_exhaustive()
    }
}

/// Renders what a [`PrometheusRecorder`] recorded; cheap to clone.
#[derive(Clone)]
pub struct PrometheusHandle {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for PrometheusHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrometheusHandle").finish_non_exhaustive()
    }
}

impl PrometheusRecorder {
    /// A recorder whose histograms get the buckets of the first of `by_name` (whole names)
    /// and then `by_suffix` (name suffixes) that matches their name, else [`DEFAULT`]. Each
    /// list of bounds must be increasing.
    #[must_use]
    pub fn new(
        by_name: Vec<(String, &'static [f64])>,
        by_suffix: Vec<(String, &'static [f64])>,
    ) -> Self {
        let bounds = |list: Vec<(String, &'static [f64])>| {
            (list.into_iter())
                .map(|(name, bounds)| (name, Bounds::new(bounds)))
                .collect()
        };
        let storage = Buckets {
            by_name: bounds(by_name),
            by_suffix: bounds(by_suffix),
            default: Bounds::new(DEFAULT),
        };
        Self {
            inner: Arc::new(Inner {
                registry: Registry::new(storage),
                descriptions: Mutex::default(),
            }),
        }
    }

    /// The handle that renders it.
    #[must_use]
    pub fn handle(&self) -> PrometheusHandle {
        PrometheusHandle {
            inner: self.inner.clone(),
        }
    }

    fn describe(&self, key: &KeyName, unit: Option<Unit>, description: &SharedString) {
        let help = match unit {
            Some(unit @ (Unit::Seconds | Unit::Bytes)) => {
                format!("{description} ({})", unit.as_str())
            }
            _ => description.to_string(),
        };
        let mut descriptions =
            (self.inner.descriptions.lock()).unwrap_or_else(PoisonError::into_inner);
        descriptions.insert(key.as_str().to_string(), help);
    }
}

impl Recorder for PrometheusRecorder {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.describe(&key, unit, &description);
    }

    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.describe(&key, unit, &description);
    }

    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.describe(&key, unit, &description);
    }

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        (self.inner.registry)
            .get_or_create_counter(key, |counter| Counter::from_arc(counter.clone()))
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        (self.inner.registry).get_or_create_gauge(key, |gauge| Gauge::from_arc(gauge.clone()))
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        (self.inner.registry)
            .get_or_create_histogram(key, |histogram| Histogram::from_arc(histogram.clone()))
    }
}

/// The series of one name, by their labels as rendered.
#[derive(Default)]
struct Family {
    kind: &'static str,
    series: BTreeMap<Vec<(String, String)>, Value>,
}

enum Value {
    Counter(u64),
    Gauge(f64),
    Histogram(&'static [f64], Vec<u64>, f64),
}

impl PrometheusHandle {
    /// Everything recorded, in Prometheus' text exposition format (version 0.0.4): per name,
    /// its `# HELP` when it was described, its `# TYPE`, and one line per series (a
    /// histogram's `_bucket{le=...}` lines, cumulative, then `_sum` and `_count`), names and
    /// series in order.
    #[must_use]
    pub fn render(&self) -> String {
        let registry = &self.inner.registry;
        let mut families: BTreeMap<String, Family> = BTreeMap::new();
        let mut add = |key: &Key, kind: &'static str, value: Value| {
            let family = families.entry(name(key.name())).or_default();
            family.kind = kind;
            let labels = key
                .labels()
                .map(|label| (name(label.key()), label.value().to_string()))
                .collect();
            family.series.insert(labels, value);
        };
        registry.visit_counters(|key, counter| {
            add(
                key,
                "counter",
                Value::Counter(counter.load(Ordering::Relaxed)),
            );
        });
        registry.visit_gauges(|key, gauge| {
            let value = f64::from_bits(gauge.load(Ordering::Relaxed));
            add(key, "gauge", Value::Gauge(value));
        });
        registry.visit_histograms(|key, histogram| {
            let (counts, sum) = histogram.read();
            add(
                key,
                "histogram",
                Value::Histogram(histogram.bounds.bounds, counts, sum),
            );
        });
        let descriptions = (self.inner.descriptions.lock())
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let mut text = String::new();
        for (name, family) in &families {
            if let Some(help) = descriptions.get(name) {
                let help = help.replace('\\', "\\\\").replace('\n', "\\n");
                let _ = writeln!(text, "# HELP {name} {help}");
            }
            let _ = writeln!(text, "# TYPE {name} {}", family.kind);
            for (labels, value) in &family.series {
                series(&mut text, name, labels, value);
            }
        }
        text
    }
}

/// The lines of one series.
fn series(text: &mut String, name: &str, labels: &[(String, String)], value: &Value) {
    match value {
        Value::Counter(value) => {
            let _ = writeln!(text, "{name}{} {value}", braces(labels, None));
        }
        Value::Gauge(value) => {
            let _ = writeln!(text, "{name}{} {}", braces(labels, None), number(*value));
        }
        Value::Histogram(bounds, counts, sum) => {
            let bounds = bounds.iter().copied().chain([f64::INFINITY]);
            for (bound, count) in bounds.zip(counts) {
                let le = braces(labels, Some(&number(bound)));
                let _ = writeln!(text, "{name}_bucket{le} {count}");
            }
            let plain = braces(labels, None);
            let _ = writeln!(text, "{name}_sum{plain} {}", number(*sum));
            let count = counts.last().copied().unwrap_or(0);
            let _ = writeln!(text, "{name}_count{plain} {count}");
        }
    }
}

/// `{a="1",b="2"}` (with `le` last when given), or nothing without labels; values escaped.
fn braces(labels: &[(String, String)], le: Option<&str>) -> String {
    let le = le.map(|le| ("le", le));
    let pairs: Vec<String> = (labels.iter())
        .map(|(key, value)| (key.as_str(), value.as_str()))
        .chain(le)
        .map(|(key, value)| {
            let value = (value.replace('\\', "\\\\"))
                .replace('"', "\\\"")
                .replace('\n', "\\n");
            format!("{key}=\"{value}\"")
        })
        .collect();
    if pairs.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", pairs.join(","))
    }
}

/// A name as Prometheus allows it: letters, digits, `_` and `:`, not starting with a digit.
fn name(name: &str) -> String {
    let mut cleaned: String = (name.chars())
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if cleaned.starts_with(|c: char| c.is_ascii_digit()) || cleaned.is_empty() {
        cleaned.insert(0, '_');
    }
    cleaned
}

/// A sample value as Prometheus reads it (`+Inf`, `-Inf`, `NaN`).
fn number(value: f64) -> String {
    if value.is_nan() {
        "NaN".to_string()
    } else if value.is_infinite() {
        if value > 0.0 { "+Inf" } else { "-Inf" }.to_string()
    } else {
        value.to_string()
    }
}

/// The recorder `stele serve` installs, its renderer, and what the web UI's overview reads.
#[derive(Debug)]
pub struct ServeRecorder {
    /// The recorder to install: [`PrometheusRecorder`] (the `_seconds` histograms in
    /// [`SECONDS`], the replayed events in [`EVENTS`]) inside
    /// `node::recent::RecentRecorder`.
    pub recorder: node::recent::RecentRecorder<PrometheusRecorder>,
    /// The text of `/metrics`.
    pub handle: PrometheusHandle,
    /// The last hour of finishes and retries, for the overview; a program calls
    /// [`node::recent::Recent::upkeep`] at least every minute.
    pub recent: Arc<node::recent::Recent>,
}

/// Builds the recorder `stele serve` installs (the benchmark's `--with-recorder` installs the
/// same): one place, so that what is measured is what runs.
#[must_use]
pub fn serve_recorder() -> ServeRecorder {
    let recorder = PrometheusRecorder::new(
        vec![(concepts::metrics::EVENTS_REPLAYED.to_string(), EVENTS)],
        vec![("_seconds".to_string(), SECONDS)],
    );
    let handle = recorder.handle();
    let recorder = node::recent::RecentRecorder::new(recorder);
    let recent = recorder.recent();
    ServeRecorder {
        recorder,
        handle,
        recent,
    }
}

/// Installs [`serve_recorder`] as the process's recorder and turns recording on
/// (`concepts::metrics::describe`); its handle and recent counts, or the error when another
/// recorder was installed first.
///
/// # Errors
/// A recorder was installed already.
pub fn install() -> Result<(PrometheusHandle, Arc<node::recent::Recent>), String> {
    let ServeRecorder {
        recorder,
        handle,
        recent,
    } = serve_recorder();
    metrics::set_global_recorder(recorder).map_err(|err| err.to_string())?;
    concepts::metrics::describe();
    Ok((handle, recent))
}

#[cfg(test)]
mod tests;
