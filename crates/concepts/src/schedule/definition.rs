//! What a schedule's creator gives: its name, the function and parameters it fires, its spec
//! and zone, and how it behaves when ticks overlap or were missed.

use super::{Overlap, Spec, Zone, tick_execution_id};
use crate::{FunctionFqn, Params};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::{fmt, str::FromStr, sync::Arc, time::Duration};

/// A schedule's name: 1 to 100 ASCII letters, digits, `.`, `_` or `-`, the first a letter or a
/// digit. It is the schedule's key, and part of every tick's execution id.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ScheduleName(Arc<str>);

/// A name that is not a schedule's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{name}` is not a schedule name: {reason}")]
pub struct BadScheduleName {
    /// The name given.
    pub name: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl ScheduleName {
    /// The longest name.
    pub const MAX_LEN: usize = 100;

    /// The name's text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for ScheduleName {
    type Err = BadScheduleName;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        let refused = |reason| BadScheduleName {
            name: name.to_owned(),
            reason,
        };
        let Some(first) = name.chars().next() else {
            return Err(refused("it is empty"));
        };
        if name.len() > Self::MAX_LEN {
            return Err(refused("it is longer than 100 characters"));
        }
        if !first.is_ascii_alphanumeric() {
            return Err(refused("it must start with a letter or a digit"));
        }
        if !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        {
            return Err(refused(
                "only ASCII letters, digits, `.`, `_` and `-` are allowed",
            ));
        }
        Ok(Self(name.into()))
    }
}

impl TryFrom<String> for ScheduleName {
    type Error = BadScheduleName;

    fn try_from(name: String) -> Result<Self, Self::Error> {
        name.parse()
    }
}

impl From<ScheduleName> for String {
    fn from(name: ScheduleName) -> Self {
        name.0.as_ref().to_owned()
    }
}

impl fmt::Display for ScheduleName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for Spec {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Spec {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

impl Serialize for Zone {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for Zone {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// What a schedule runs and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Definition {
    /// Its key.
    pub name: ScheduleName,
    /// The function each tick runs.
    pub ffqn: FunctionFqn,
    /// Its parameters, the same for every tick.
    pub params: Params,
    /// When ticks fall.
    pub spec: Spec,
    /// The zone whose wall clock a cron spec reads.
    pub zone: Zone,
    /// What a tick does while the previous run is unfinished.
    pub overlap: Overlap,
    /// How old a missed tick may be and still fire after a downtime or a pause.
    #[serde(with = "crate::event::duration_micros")]
    pub catchup_window: Duration,
    /// Each tick's execution is due up to this much after the tick (zero: at the tick), at an
    /// offset every node derives alike, to spread the start of many schedules of one time.
    #[serde(with = "crate::event::duration_micros")]
    pub jitter: Duration,
    /// At most this many ticks fire, if given.
    pub max_runs: Option<u64>,
    /// No tick after this time fires, if given.
    pub end: Option<DateTime<Utc>>,
}

impl Definition {
    /// The catch-up window of a schedule that names none: a restart or a rolling deploy of a
    /// few minutes fires every tick it missed.
    pub const DEFAULT_CATCHUP_WINDOW: Duration = Duration::from_secs(300);

    /// A schedule of `ffqn(params)` at `spec`, in UTC, with the default policies: skip on
    /// overlap, the default catch-up window, no jitter, no limit, no end.
    #[must_use]
    pub fn new(name: ScheduleName, ffqn: FunctionFqn, params: Params, spec: Spec) -> Self {
        Self {
            name,
            ffqn,
            params,
            spec,
            zone: Zone::UTC,
            overlap: Overlap::Skip,
            catchup_window: Self::DEFAULT_CATCHUP_WINDOW,
            jitter: Duration::ZERO,
            max_runs: None,
            end: None,
        }
    }

    /// What differs from `other` (the name aside), in the order of the fields: `function`,
    /// `parameters`, `spec`, `time zone`, `overlap`, `catch-up window`, `jitter`, `run limit`,
    /// `end`. A create that repeats an existing schedule must repeat all of them.
    #[must_use]
    pub fn differences(&self, other: &Self) -> Vec<&'static str> {
        let Self {
            name: _,
            ffqn,
            params,
            spec,
            zone,
            overlap,
            catchup_window,
            jitter,
            max_runs,
            end,
        } = self;
        [
            (*ffqn != other.ffqn, "function"),
            (*params != other.params, "parameters"),
            (*spec != other.spec, "spec"),
            (*zone != other.zone, "time zone"),
            (*overlap != other.overlap, "overlap"),
            (*catchup_window != other.catchup_window, "catch-up window"),
            (*jitter != other.jitter, "jitter"),
            (*max_runs != other.max_runs, "run limit"),
            (*end != other.end, "end"),
        ]
        .into_iter()
        .filter_map(|(differs, field)| differs.then_some(field))
        .collect()
    }

    /// The definition as every backend stores it: its durations in whole microseconds, so
    /// that a create repeated with the same values is the same schedule on every backend.
    #[must_use]
    pub fn at_stored_precision(mut self) -> Self {
        let micros = |duration: Duration| {
            Duration::new(duration.as_secs(), duration.subsec_micros() * 1_000)
        };
        self.catchup_window = micros(self.catchup_window);
        self.jitter = micros(self.jitter);
        self
    }

    /// When the execution of the tick at `tick` is due: the tick plus this schedule's jitter
    /// offset for it, taken from the tick's execution id, so every node agrees.
    #[must_use]
    pub fn due_at(&self, created_at: DateTime<Utc>, tick: DateTime<Utc>) -> DateTime<Utc> {
        let jitter = self.jitter.as_micros().min(u128::from(u64::MAX));
        if jitter == 0 {
            return tick;
        }
        let random = tick_execution_id(self.name.as_str(), created_at, tick)
            .top_level()
            .ulid()
            .random();
        let offset = i64::try_from(random % jitter).unwrap_or_default();
        // An offset past the largest time is the largest time.
        tick.checked_add_signed(chrono::Duration::microseconds(offset))
            .unwrap_or(DateTime::<Utc>::MAX_UTC)
    }
}
