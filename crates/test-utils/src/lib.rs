//! Test helpers shared by every Stele crate and by the conformance suite: simulated clocks
//! ([`SimClock`], [`ConstClock`]), a tracing set-up driven by `RUST_LOG` ([`set_up`]), proptest
//! strategies for ids and events ([`arbitrary`]), a store wrapper whose hook fails chosen
//! writes ([`forwarding`]), replayable seeds ([`seed`]), and the skip rule every test of the
//! workspace follows ([`skip`], [`skip_reason`]).
//!
//! ```
//! use concepts::ClockFn;
//! use test_utils::SimClock;
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let clock = SimClock::epoch();
//! let before = clock.now();
//! clock.move_time_forward(std::time::Duration::from_secs(1)).await;
//! assert_eq!(clock.now() - before, chrono::TimeDelta::seconds(1));
//! # });
//! ```

pub mod arbitrary;
pub mod forwarding;

use chrono::{DateTime, TimeZone, Utc};
use concepts::ClockFn;
use std::{
    sync::{Arc, Mutex, Once},
    time::Duration,
};

/// A clock that moves only when told to; clones share the same time.
#[derive(Clone, Debug)]
pub struct SimClock {
    now: Arc<Mutex<DateTime<Utc>>>,
}

impl SimClock {
    /// A clock standing at `at`.
    #[must_use]
    pub fn new(at: DateTime<Utc>) -> Self {
        Self {
            now: Arc::new(Mutex::new(at)),
        }
    }

    /// A clock standing at 2000-01-01T00:00:00Z, a fixed and readable start.
    #[must_use]
    pub fn epoch() -> Self {
        Self::new(
            Utc.with_ymd_and_hms(2000, 1, 1, 0, 0, 0)
                .single()
                .unwrap_or_default(),
        )
    }

    /// Moves the time forward by `duration`, then yields so that tasks waiting on the clock
    /// get to run.
    pub async fn move_time_forward(&self, duration: Duration) {
        self.move_time_forward_sync(duration);
        tokio::task::yield_now().await;
    }

    /// Moves the time forward by `duration` without yielding.
    pub fn move_time_forward_sync(&self, duration: Duration) {
        let mut now = self
            .now
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *now = concepts::add_saturating(*now, duration);
    }

    /// Sets the time; it may not go backwards.
    pub fn move_time_to(&self, at: DateTime<Utc>) {
        let mut now = self
            .now
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        assert!(at >= *now, "SimClock cannot go back from {} to {at}", *now);
        *now = at;
    }
}

impl ClockFn for SimClock {
    fn now(&self) -> DateTime<Utc> {
        *self
            .now
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A clock that always says the same time.
#[derive(Clone, Copy, Debug)]
pub struct ConstClock(pub DateTime<Utc>);

impl ClockFn for ConstClock {
    fn now(&self) -> DateTime<Utc> {
        self.0
    }
}

/// Installs a tracing subscriber for tests once per process; the filter comes from `RUST_LOG`
/// (default: warnings). Output goes through the test harness's capture.
pub fn set_up() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let filter = tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_test_writer()
            .try_init();
    });
}

/// The environment variable that replays a seeded test.
pub const SEED_ENV: &str = "STELE_SEED";

/// The seed of a randomized test: `STELE_SEED` if set (a replay), else a fresh random one.
/// The seed is printed either way so that a failure can be replayed.
///
/// # Panics
/// When `STELE_SEED` is set but is not a `u64`: a replay with the wrong seed would be silent.
#[must_use]
pub fn seed() -> u64 {
    let seed = match std::env::var(SEED_ENV) {
        Ok(text) => text
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{SEED_ENV}={text:?} is not an unsigned 64-bit integer")),
        Err(_) => {
            use std::hash::{BuildHasher, Hasher};
            std::collections::hash_map::RandomState::new()
                .build_hasher()
                .finish()
        }
    };
    eprintln!("seed: {seed} (replay with {SEED_ENV}={seed})");
    seed
}

/// The variable CI sets to `true`; under it no test may skip for want of something (a server,
/// say), since CI must run them all.
pub const CI_ENV: &str = "CI";

/// True under `CI=true`.
#[must_use]
pub fn in_ci() -> bool {
    std::env::var(CI_ENV).is_ok_and(|value| value == "true")
}

/// The skip rule: a test that cannot run here for `reason` fails under `CI=true` (the panic
/// names `reason` and how to `fix` it) and is skipped elsewhere. Returns `reason`, for [`skip`]
/// to print.
///
/// A scenario that does not apply to a backend (a capability it lacks) is not covered by this
/// rule: it calls [`skip`] directly, in CI too.
///
/// # Panics
/// Under `CI=true`.
#[track_caller]
pub fn skip_reason(reason: String, fix: &str) -> String {
    assert!(
        !in_ci(),
        "{reason}, and {CI_ENV}=true requires every test to run: {fix}"
    );
    reason
}

/// Marks `test` as skipped: prints `SKIPPED: <reason>` on standard output, the line that
/// `cargo xtask conformance` reads (through `--show-output`) to show the reason in its table,
/// and logs it, so that nothing is skipped silently.
#[expect(
    clippy::print_stdout,
    reason = "the skip reason is read from the test's stdout"
)]
pub fn skip(test: &str, reason: &str) {
    println!("SKIPPED: {reason}");
    tracing::warn!("{test} skipped: {reason}");
}

/// Creates an execution of `ffqn` (parameters `7`) and parks it at `now` with `reason`, as a
/// workflow worker parks one whose replay diverges: locked, then `Unlocked` until
/// [`concepts::PARKED_UNTIL`]. Returns its id.
///
/// # Panics
/// When the store refuses a write: a test helper.
pub async fn parked_execution(
    db: &dyn concepts::DbConnection,
    ffqn: &concepts::FunctionFqn,
    now: DateTime<Utc>,
    reason: &str,
) -> concepts::ExecutionId {
    let execution_id = concepts::ExecutionId::generate_at(now);
    let component_id = concepts::ComponentId::new("test", "parked").expect("a legal id");
    db.create(concepts::CreateRequest {
        created_at: now,
        execution_id: execution_id.clone(),
        ffqn: ffqn.clone(),
        params: concepts::Json(serde_json::json!(7)),
        parent: None,
        scheduled_at: now,
        retry_exp_backoff: Duration::from_secs(1),
        max_retries: 0,
        component_id: component_id.clone(),
        metadata: concepts::ExecutionMetadata::default(),
        scheduled_by: None,
    })
    .await
    .expect("created");
    let locked = db
        .lock_pending(concepts::LockPendingRequest {
            batch_size: 1,
            pending_at_or_sooner: now,
            ffqns: Arc::from(vec![ffqn.clone()]),
            now,
            component_id,
            executor_id: concepts::ExecutorId::generate_at(now),
            lock_expires_at: now + Duration::from_secs(60),
        })
        .await
        .expect("locked");
    let locked = locked
        .into_iter()
        .find(|locked| locked.execution_id == execution_id)
        .expect("the new execution is due");
    let park = concepts::OutcomeWrite::new(
        execution_id.clone(),
        locked.next_version,
        now,
        concepts::ExecutionEventInner::Unlocked {
            backoff_expires_at: concepts::PARKED_UNTIL,
            reason: reason.to_string(),
        },
        None,
    );
    db.append_outcome(park).await.expect("parked");
    execution_id
}
