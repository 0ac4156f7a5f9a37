//! When a schedule fires: its spec, its time zone, the daylight-saving rule, the tick's
//! execution id, and which ticks are due after a pause or a downtime.
//!
//! A spec is a cron expression (five fields, or six with seconds first, matched on the local
//! wall clock of the schedule's time zone) or an interval (`every 15m`, `every 1h offset 5m`:
//! elapsed time from the Unix epoch plus the offset, the same in every zone).
//!
//! **The daylight-saving rule**, for cron specs: a local time that does not exist (the clocks
//! jumped over it) fires once, at the instant of the jump; a local time that exists twice (the
//! clocks went back over it) fires once, at its first occurrence. So every local time of the
//! spec fires exactly once, and during the repeated hour nothing fires twice. Intervals count
//! elapsed time and are not affected.
//!
//! **Exactly once**: a tick's execution id is derived from the schedule's name, the time the
//! schedule was created (so that a schedule deleted and created again under the same name is
//! a new one) and the tick's time ([`tick_execution_id`]); created through the idempotent
//! submit, the same tick fired by two nodes is one execution.
//!
//! ```
//! use concepts::schedule::{Spec, Zone};
//! let spec: Spec = "30 2 * * *".parse().unwrap();
//! let prague: Zone = "Europe/Prague".parse().unwrap();
//! // 2026-03-29: Prague's clocks jump from 02:00 to 03:00; 02:30 fires at the jump.
//! let after = "2026-03-28T12:00:00Z".parse().unwrap();
//! assert_eq!(spec.next_after(prague, after).unwrap().to_rfc3339(), "2026-03-29T01:00:00+00:00");
//! ```

mod definition;
mod requests;
mod stored;

pub use definition::{BadScheduleName, Definition, ScheduleName};
pub use requests::{
    ChangeScheduleRequest, CreateScheduleRequest, FireOutcome, FireSchedulesRequest,
    ScheduleChange, ScheduleChanged, ScheduleCreated, TriggerScheduleRequest, TriggerTicks,
    Triggered,
};
pub use stored::{FiredBy, Pause, RunSettings, ScheduleRow, SkipReason, Tick, TickOutcome};

use crate::{ExecutionId, ExecutionIdTopLevel};
use chrono::{DateTime, NaiveDateTime, TimeZone as _, Timelike as _, Utc};
use std::{fmt, str::FromStr, time::Duration};

/// The most steps one search takes (a per-second spec stepping over a repeated hour takes
/// 3,600); past them the spec is taken to have no next time.
const MAX_STEPS: usize = 100_000;

/// An IANA time zone (`Europe/Prague`, `UTC`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Zone(chrono_tz::Tz);

impl Zone {
    /// Coordinated Universal Time.
    pub const UTC: Self = Self(chrono_tz::Tz::UTC);

    /// The IANA name.
    #[must_use]
    pub fn name(self) -> &'static str {
        self.0.name()
    }
}

impl Default for Zone {
    fn default() -> Self {
        Self::UTC
    }
}

impl fmt::Display for Zone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A time zone name that the IANA database does not hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{name}` is not a time zone of the IANA database (as `Europe/Prague`, `America/New_York` or `UTC`)"
)]
pub struct UnknownZone {
    /// The name given.
    pub name: String,
}

impl FromStr for Zone {
    type Err = UnknownZone;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        name.parse::<chrono_tz::Tz>()
            .map(Self)
            .map_err(|_| UnknownZone {
                name: name.to_owned(),
            })
    }
}

/// When a schedule's ticks fall.
#[derive(Debug, Clone)]
pub enum Spec {
    /// A cron expression on the local wall clock.
    Cron {
        /// The expression as given.
        expression: String,
        /// The parsed pattern (boxed: it is large beside an interval).
        cron: Box<croner::Cron>,
    },
    /// Every `interval` of elapsed time, at `offset` past each multiple since the Unix epoch.
    Every {
        /// Between two ticks.
        interval: Duration,
        /// Below the interval.
        offset: Duration,
    },
}

impl PartialEq for Spec {
    fn eq(&self, other: &Self) -> bool {
        self.to_string() == other.to_string()
    }
}

impl Eq for Spec {}

impl fmt::Display for Spec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Cron { expression, .. } => f.write_str(expression),
            Self::Every { interval, offset } => {
                write!(f, "every {}", HumanSeconds(*interval))?;
                if !offset.is_zero() {
                    write!(f, " offset {}", HumanSeconds(*offset))?;
                }
                Ok(())
            }
        }
    }
}

/// A whole number of seconds in the largest unit that divides it.
struct HumanSeconds(Duration);

impl fmt::Display for HumanSeconds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let seconds = self.0.as_secs();
        let (value, unit) = [(86_400, "d"), (3_600, "h"), (60, "m")]
            .into_iter()
            .find(|(size, _)| seconds.is_multiple_of(*size) && seconds >= *size)
            .map_or((seconds, "s"), |(size, unit)| (seconds / size, unit));
        write!(f, "{value}{unit}")
    }
}

/// Why a spec was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// The cron expression does not parse; `field` names the first field at fault, when one is.
    #[error("`{expression}` is not a cron expression: {reason}")]
    Cron {
        /// The expression.
        expression: String,
        /// What is wrong and where.
        reason: String,
    },
    /// The interval's text does not parse.
    #[error(
        "`{text}` is not an interval: {reason} (as `every 15m` or `every 1h offset 5m`; units s, m, h, d)"
    )]
    Every {
        /// The text.
        text: String,
        /// What is wrong.
        reason: String,
    },
}

/// The names of a cron expression's fields, with seconds and without.
const FIELDS_WITH_SECONDS: [&str; 6] = [
    "second",
    "minute",
    "hour",
    "day of month",
    "month",
    "day of week",
];

fn cron_parser() -> croner::parser::CronParser {
    croner::parser::CronParser::builder()
        .seconds(croner::parser::Seconds::Optional)
        .build()
}

fn parse_cron(expression: &str) -> Result<Spec, SpecError> {
    let refused = |reason: String| SpecError::Cron {
        expression: expression.to_owned(),
        reason,
    };
    let fields: Vec<&str> = expression.split_whitespace().collect();
    if !(5..=6).contains(&fields.len()) {
        return Err(refused(format!(
            "{} fields; a cron expression has 5 (minute hour day-of-month month day-of-week) or 6 \
             (a second first)",
            fields.len()
        )));
    }
    match cron_parser().parse(expression) {
        Ok(cron) => Ok(Spec::Cron {
            expression: fields.join(" "),
            cron: Box::new(cron),
        }),
        Err(err) => {
            // Where: the first field that fails alone, every other field a wildcard.
            let names = &FIELDS_WITH_SECONDS[6 - fields.len()..];
            let at_fault = (0..fields.len()).find(|&at| {
                let probe: Vec<&str> = (0..fields.len())
                    .map(|i| if i == at { fields[i] } else { "*" })
                    .collect();
                cron_parser().parse(&probe.join(" ")).is_err()
            });
            Err(refused(match at_fault {
                Some(at) => format!("the {} field `{}`: {err}", names[at], fields[at]),
                None => err.to_string(),
            }))
        }
    }
}

/// `30s`, `15m`, `12h`, `7d`: a whole number and a unit.
fn parse_seconds(text: &str) -> Option<Duration> {
    let digits = text.find(|c: char| !c.is_ascii_digit())?;
    let (number, unit) = text.split_at(digits);
    let number: u64 = number.parse().ok()?;
    let size = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        _ => return None,
    };
    number.checked_mul(size).map(Duration::from_secs)
}

fn parse_every(text: &str) -> Result<Spec, SpecError> {
    let refused = |reason: &str| SpecError::Every {
        text: text.to_owned(),
        reason: reason.to_owned(),
    };
    let words: Vec<&str> = text.split_whitespace().collect();
    let (interval, offset) = match words.as_slice() {
        ["every", interval] => (*interval, None),
        ["every", interval, "offset", offset] => (*interval, Some(*offset)),
        _ => return Err(refused("expected `every DURATION [offset DURATION]`")),
    };
    let interval = parse_seconds(interval).ok_or_else(|| refused("the interval"))?;
    let offset = offset
        .map(|offset| parse_seconds(offset).ok_or_else(|| refused("the offset")))
        .transpose()?
        .unwrap_or_default();
    if interval.is_zero() {
        return Err(refused("the interval is zero"));
    }
    if offset >= interval {
        return Err(refused("the offset must be shorter than the interval"));
    }
    Ok(Spec::Every { interval, offset })
}

impl FromStr for Spec {
    type Err = SpecError;

    /// `every ...` is an interval, anything else a cron expression.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let text = text.trim();
        if text.starts_with("every") {
            parse_every(text)
        } else {
            parse_cron(text)
        }
    }
}

/// The instant of a local wall-clock time under the daylight-saving rule: the first of two,
/// the jump's for one that does not exist.
fn resolve(zone: Zone, local: NaiveDateTime) -> Option<DateTime<Utc>> {
    if let Some(at) = zone.0.from_local_datetime(&local).earliest() {
        return Some(at.to_utc());
    }
    // In a gap: the first local minute after it is the instant the clocks jumped.
    let mut probe = local.with_second(0)?.with_nanosecond(0)?;
    for _ in 0..(48 * 60) {
        probe += chrono::Duration::minutes(1);
        if let Some(at) = zone.0.from_local_datetime(&probe).earliest() {
            return Some(at.to_utc());
        }
    }
    None
}

fn micros(duration: Duration) -> i64 {
    i64::try_from(duration.as_micros()).unwrap_or(i64::MAX)
}

impl Spec {
    /// The first tick strictly after `after`, in `zone`; `None` when there is none (a cron
    /// expression that matches no date, as `0 0 30 2 *`).
    #[must_use]
    pub fn next_after(&self, zone: Zone, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match self {
            Self::Cron { cron, .. } => {
                let mut local = after.with_timezone(&zone.0).naive_local();
                for _ in 0..MAX_STEPS {
                    let candidate = cron.find_next_occurrence(&local, false).ok()?;
                    let at = resolve(zone, candidate)?;
                    if at > after {
                        return Some(at);
                    }
                    local = candidate;
                }
                None
            }
            Self::Every { interval, offset } => {
                let (interval, offset) = (micros(*interval), micros(*offset));
                // Past the largest time there is no next tick.
                let since = after.timestamp_micros().checked_sub(offset)?;
                let next = (since.div_euclid(interval).checked_add(1))
                    .and_then(|k| k.checked_mul(interval))
                    .and_then(|at| at.checked_add(offset))?;
                DateTime::from_timestamp_micros(next)
            }
        }
    }

    /// The next `count` ticks after `after`.
    #[must_use]
    pub fn fire_times(&self, zone: Zone, after: DateTime<Utc>, count: usize) -> Vec<DateTime<Utc>> {
        std::iter::successors(self.next_after(zone, after), |at| {
            self.next_after(zone, *at)
        })
        .take(count)
        .collect()
    }
}

/// Ticks that passed while nobody fired them and that fell before the catch-up window:
/// recorded as skipped, never dropped silently.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Missed {
    /// The first of them.
    pub first: DateTime<Utc>,
    /// The last of them.
    pub last: DateTime<Utc>,
    /// How many: all of them when `exact`, else the first [`Missed::COUNT_LIMIT`] counted one by
    /// one before the rest of the gap was passed over.
    pub count: u64,
    /// Whether `count` is every missed tick.
    pub exact: bool,
}

impl Missed {
    /// How many missed ticks are counted one by one; past it the count is a lower bound and
    /// the rest of the gap is passed over at once.
    pub const COUNT_LIMIT: u64 = 100_000;
}

/// What is due of a schedule at `now`, from the tick after the last one handled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Due {
    /// The ticks to fire, in order: those inside the catch-up window (at most the limit asked).
    pub fire: Vec<DateTime<Utc>>,
    /// The ticks before the window.
    pub missed: Option<Missed>,
    /// The last tick handled (fired or missed): where the next pass starts.
    pub handled_through: Option<DateTime<Utc>>,
    /// The next tick not handled yet (after `now`, unless the limit stopped the pass).
    pub next: Option<DateTime<Utc>>,
}

/// The ticks after `after` up to `now`: those not older than `catchup_window` fire (at most
/// `limit` of them, the earliest first), older ones are missed.
#[must_use]
pub fn due_ticks(
    spec: &Spec,
    zone: Zone,
    after: DateTime<Utc>,
    now: DateTime<Utc>,
    catchup_window: Duration,
    limit: usize,
) -> Due {
    // A window reaching back past the earliest time starts at the earliest time.
    let window_start = chrono::Duration::from_std(catchup_window)
        .ok()
        .and_then(|window| now.checked_sub_signed(window))
        .unwrap_or(DateTime::<Utc>::MIN_UTC);
    let mut missed: Option<Missed> = None;
    let mut fire = Vec::new();
    let mut handled_through = None;
    let mut next = spec.next_after(zone, after);
    while let Some(at) = next.filter(|at| *at <= now) {
        if at < window_start {
            let entry = missed.get_or_insert(Missed {
                first: at,
                last: at,
                count: 0,
                exact: true,
            });
            entry.last = at;
            entry.count += 1;
            if entry.count >= Missed::COUNT_LIMIT {
                // Pass over the rest of the gap, to the last tick before the window.
                if let Some(last) = last_before(spec, zone, window_start, at) {
                    entry.exact = last == at;
                    entry.last = last;
                }
            }
            handled_through = Some(entry.last);
            next = spec.next_after(zone, entry.last);
            continue;
        }
        if fire.len() == limit {
            break;
        }
        fire.push(at);
        handled_through = Some(at);
        next = spec.next_after(zone, at);
    }
    Due {
        fire,
        missed,
        handled_through,
        next,
    }
}

/// The last tick before `before` and not before `floor` (itself a tick), found by looking
/// back twice as far each time.
fn last_before(
    spec: &Spec,
    zone: Zone,
    before: DateTime<Utc>,
    floor: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    let mut back = chrono::Duration::seconds(1);
    loop {
        let from = (before - back).max(floor);
        if let Some(mut last) = spec.next_after(zone, from).filter(|at| *at < before) {
            while let Some(next) = spec.next_after(zone, last).filter(|at| *at < before) {
                last = next;
            }
            return Some(last);
        }
        if from == floor {
            return (floor < before).then_some(floor);
        }
        back = back * 2;
    }
}

/// 64-bit FNV-1a from `basis`: a hash that is the same in every build and version, as an id
/// derived from it must be.
fn fnv1a(basis: u64, parts: &[&[u8]]) -> u64 {
    let mut hash = basis;
    for part in parts {
        for byte in *part {
            hash ^= u64::from(*byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        hash ^= 0xff;
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// The id of the execution that the tick at `tick` of the schedule `name`, created at
/// `created_at`, fires: a top-level id whose timestamp is the tick's millisecond and whose 80
/// random bits are a hash of the three, so every node derives the same id for the same tick.
#[must_use]
pub fn tick_execution_id(
    name: &str,
    created_at: DateTime<Utc>,
    tick: DateTime<Utc>,
) -> ExecutionId {
    let created = created_at.timestamp_micros().to_le_bytes();
    let at = tick.timestamp_micros().to_le_bytes();
    let parts: [&[u8]; 3] = [name.as_bytes(), &created, &at];
    let high = fnv1a(0xcbf2_9ce4_8422_2325, &parts);
    let low = fnv1a(0x6c62_272e_07bb_0142, &parts);
    let random = ((u128::from(high) << 64) | u128::from(low)) & ((1 << 80) - 1);
    let millis = u64::try_from(tick.timestamp_millis()).unwrap_or_default();
    ExecutionId::from(ExecutionIdTopLevel::from_parts(millis, random))
}

/// What a tick does while the schedule's previous run is unfinished.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum Overlap {
    /// The tick is recorded as skipped (the default).
    #[default]
    Skip,
    /// One tick waits for the previous run to finish, then fires; further ones are skipped.
    BufferOne,
    /// Every tick fires, whatever runs.
    AllowAll,
    /// The previous run is cancelled and the tick fires.
    CancelOther,
}

impl Overlap {
    /// Every policy, in the order of the docs.
    pub const ALL: [Self; 4] = [
        Self::Skip,
        Self::BufferOne,
        Self::AllowAll,
        Self::CancelOther,
    ];

    /// Its name: `skip`, `buffer-one`, `allow-all`, `cancel-other`.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Skip => "skip",
            Self::BufferOne => "buffer-one",
            Self::AllowAll => "allow-all",
            Self::CancelOther => "cancel-other",
        }
    }
}

impl fmt::Display for Overlap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An overlap policy's name that is none of them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not an overlap policy: skip, buffer-one, allow-all or cancel-other")]
pub struct UnknownOverlap(pub String);

impl FromStr for Overlap {
    type Err = UnknownOverlap;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|policy| policy.name() == name)
            .ok_or_else(|| UnknownOverlap(name.to_owned()))
    }
}

#[cfg(test)]
mod tests;
