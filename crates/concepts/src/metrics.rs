//! The names of Stele's metrics, recorded through the [`metrics`] facade by every crate that
//! does the work they count (the storage kernel here, the executor, the timers watcher, the
//! workflow layer, the node), and exported by whatever recorder the program installs (`stele
//! serve` installs its own, `cli::prometheus`, and serves it on `/metrics` in Prometheus' text
//! format). No library crate depends on an exporter; until a program installs a recorder and
//! calls [`describe`], nothing is recorded, and handles registered before are the no-op
//! recorder's for good: install first.
//!
//! Every name, its kind, unit and labels are in `docs/METRICS.md`, and only there; a test
//! checks that the table and [`ALL`] agree. Labels are bounded: a function, a component, an
//! outcome or result kind, an operation, never an id.

/// Counter `{function}`: executions created (submitted, or children created by a workflow).
pub const EXECUTIONS_CREATED: &str = "stele_executions_created_total";
/// Counter `{function, outcome}`: executions an executor finished, by how, and those the
/// timers watcher finished with a permanent timeout.
pub const EXECUTIONS_FINISHED: &str = "stele_executions_finished_total";
/// Counter: executions finished by a cancellation (a tree counts each member).
pub const EXECUTIONS_CANCELLED: &str = "stele_executions_cancelled_total";
/// Counter `{function, result}`: attempts, by what the attempt's outcome was (the watcher's
/// `lease_expired` included).
pub const ATTEMPTS: &str = "stele_attempts_total";
/// Counter `{function}`: attempts that failed or timed out (in the worker, or by their lease's
/// expiry) and were scheduled again.
pub const RETRIES: &str = "stele_retries_total";
/// Counter: leases the timers watcher expired.
pub const LEASES_EXPIRED: &str = "stele_lease_expirations_total";
/// Counter: durable sleeps the timers watcher fired.
pub const SLEEPS_FIRED: &str = "stele_sleeps_fired_total";
/// Counter: executions the scheduler fired for the ticks of schedules.
pub const SCHEDULE_FIRES: &str = "stele_schedule_fires_total";
/// Counter `{operation}`: writes refused because another writer appended first (the version
/// check fenced them).
pub const FENCED_WRITES: &str = "stele_fenced_writes_total";
/// Counter `{operation, retriable}`: writes that failed in the store itself (unreachable,
/// closed, timed out, an error of the database), not the model's refusals.
pub const STORE_ERRORS: &str = "stele_store_errors_total";
/// Histogram `{function}`, seconds: from the time an execution was due to its lock.
pub const SCHEDULE_TO_START: &str = "stele_schedule_to_start_seconds";
/// Histogram `{function}`, seconds: an attempt, from its lock to its outcome.
pub const ATTEMPT_DURATION: &str = "stele_attempt_duration_seconds";
/// Histogram `{function}`, seconds: from an execution's first schedule to the executor's
/// finish.
pub const CREATED_TO_FINISHED: &str = "stele_created_to_finished_seconds";
/// Histogram `{operation}`, seconds: one write to the store, from the call to its reply.
pub const STORE_WRITE_DURATION: &str = "stele_store_write_duration_seconds";
/// Histogram `{function}`, events: the events a workflow's run replayed before it went on.
pub const EVENTS_REPLAYED: &str = "stele_workflow_replayed_events";
/// Gauge `{component}`: runs an executor holds.
pub const RUNS_IN_FLIGHT: &str = "stele_executor_runs_in_flight";
/// Gauge `{component}`: runs an executor may still start.
pub const FREE_SLOTS: &str = "stele_executor_free_slots";
/// Gauge `{function}`: executions due now and not locked, counted up to a cap, sampled by the
/// node.
pub const DUE_EXECUTIONS: &str = "stele_due_executions";
/// Gauge `{function}`: 1 when more executions are due than [`DUE_EXECUTIONS`] counted (it is a
/// lower bound then), else 0.
pub const DUE_CAPPED: &str = "stele_due_executions_capped";
/// Gauge `{function}`, seconds: how long the oldest due execution has waited, sampled by the
/// node.
pub const OLDEST_DUE_AGE: &str = "stele_oldest_due_age_seconds";
/// Gauge: long polls (`GET /api/v1/executions/{id}/wait`) the HTTP API holds.
pub const HTTP_LONG_POLLS: &str = "stele_http_long_polls";

/// Every name above.
pub const ALL: [&str; 21] = [
    EXECUTIONS_CREATED,
    EXECUTIONS_FINISHED,
    EXECUTIONS_CANCELLED,
    ATTEMPTS,
    RETRIES,
    LEASES_EXPIRED,
    SLEEPS_FIRED,
    SCHEDULE_FIRES,
    FENCED_WRITES,
    STORE_ERRORS,
    SCHEDULE_TO_START,
    ATTEMPT_DURATION,
    CREATED_TO_FINISHED,
    STORE_WRITE_DURATION,
    EVENTS_REPLAYED,
    RUNS_IN_FLIGHT,
    FREE_SLOTS,
    DUE_EXECUTIONS,
    DUE_CAPPED,
    OLDEST_DUE_AGE,
    HTTP_LONG_POLLS,
];

/// The label of the function an execution runs.
pub const FUNCTION: &str = "function";
/// The label of a store operation (`create`, `append_outcome`, ...).
pub const OPERATION: &str = "operation";
/// The label of a finished execution's outcome kind (`ok`, `error`, `failed`, `timeout`, ...).
pub const OUTCOME: &str = "outcome";
/// The label of an attempt's result (`finished`, `temporarily_failed`, `timed_out`,
/// `unlocked`, `by_worker`, `lease_expired`).
pub const RESULT: &str = "result";
/// The label of an executor's component.
pub const COMPONENT: &str = "component";
/// The label saying whether a store error may pass when retried (`true`, `false`).
pub const RETRIABLE: &str = "retriable";

/// Whether [`describe`] was called: until a program says it installed a recorder, nothing is
/// recorded at all, not even the durations' clock reads, so a program without metrics pays
/// one atomic load per recording point.
static ENABLED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// True once [`describe`] was called: the recording points check it first.
#[must_use]
#[inline]
pub fn enabled() -> bool {
    ENABLED.load(std::sync::atomic::Ordering::Relaxed)
}

/// The clock of the store writes' durations: the processor's time-stamp counter where it
/// runs at a constant rate, calibrated against the monotonic clock once (when [`describe`]
/// turns recording on, up to a fifth of a second), the monotonic clock otherwise. A write's
/// two readings and their difference cost a third of the instructions of
/// `std::time::Instant`'s, on every write. It measures; it decides nothing.
static WRITE_CLOCK: std::sync::OnceLock<quanta::Clock> = std::sync::OnceLock::new();

/// The clock of the store writes' durations, calibrated at its first use.
pub(crate) fn write_clock() -> &'static quanta::Clock {
    WRITE_CLOCK.get_or_init(quanta::Clock::new)
}

/// Tells the installed recorder each metric's unit and meaning (Prometheus' `# HELP`), and
/// turns recording on ([`enabled`]); a program calls it once, after installing its recorder
/// and before it starts its executors.
pub fn describe() {
    // Calibrated now, not on the first write.
    write_clock();
    ENABLED.store(true, std::sync::atomic::Ordering::Relaxed);
    use ::metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(EXECUTIONS_CREATED, "executions created, by function");
    describe_counter!(
        EXECUTIONS_FINISHED,
        "executions an executor (or the watcher, timing out) finished, by function and outcome"
    );
    describe_counter!(
        EXECUTIONS_CANCELLED,
        "executions finished by a cancellation"
    );
    describe_counter!(ATTEMPTS, "attempts, by function and result");
    describe_counter!(
        RETRIES,
        "attempts scheduled again after a failure or a timeout"
    );
    describe_counter!(LEASES_EXPIRED, "leases the timers watcher expired");
    describe_counter!(SLEEPS_FIRED, "durable sleeps the timers watcher fired");
    describe_counter!(
        SCHEDULE_FIRES,
        "executions fired for the ticks of schedules"
    );
    describe_counter!(
        FENCED_WRITES,
        "writes fenced by the version check, by operation"
    );
    describe_counter!(
        STORE_ERRORS,
        "writes the store failed, by operation and retriable"
    );
    describe_histogram!(
        SCHEDULE_TO_START,
        Unit::Seconds,
        "from due to locked, by function"
    );
    describe_histogram!(
        ATTEMPT_DURATION,
        Unit::Seconds,
        "an attempt from its lock to its outcome, by function"
    );
    describe_histogram!(
        CREATED_TO_FINISHED,
        Unit::Seconds,
        "from first scheduled to finished, by function"
    );
    describe_histogram!(
        STORE_WRITE_DURATION,
        Unit::Seconds,
        "one store write, by operation"
    );
    describe_histogram!(
        EVENTS_REPLAYED,
        Unit::Count,
        "events a workflow run replayed"
    );
    describe_gauge!(RUNS_IN_FLIGHT, Unit::Count, "runs an executor holds");
    describe_gauge!(FREE_SLOTS, Unit::Count, "runs an executor may still start");
    describe_gauge!(
        DUE_EXECUTIONS,
        Unit::Count,
        "executions due and not locked, counted up to a cap"
    );
    describe_gauge!(
        DUE_CAPPED,
        Unit::Count,
        "1 when more executions are due than counted"
    );
    describe_gauge!(
        OLDEST_DUE_AGE,
        Unit::Seconds,
        "the oldest due execution's wait"
    );
    describe_gauge!(
        HTTP_LONG_POLLS,
        Unit::Count,
        "long polls the HTTP API holds"
    );
}

#[cfg(test)]
mod tests {
    use super::ALL;

    /// The table of `docs/METRICS.md` names every metric, and nothing else.
    #[test]
    fn the_docs_table_names_every_metric_and_no_other() {
        let docs = include_str!("../../../docs/METRICS.md");
        let documented: Vec<&str> = docs
            .lines()
            .filter_map(|line| line.strip_prefix("| `stele_"))
            .filter_map(|rest| rest.split_once('`'))
            .map(|(name, _)| name)
            .collect();
        let named: Vec<&str> = ALL.iter().map(|name| &name["stele_".len()..]).collect();
        assert_eq!(
            documented, named,
            "docs/METRICS.md's table and concepts::metrics::ALL"
        );
    }
}
