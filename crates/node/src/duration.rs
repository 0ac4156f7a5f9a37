//! Durations as an operator types them: `500ms`, `30s`, `15m`, `12h`, `7d`.
//!
//! One whole number and one unit, nothing else: no sign, no fraction, no spaces, no
//! combinations (`1h30m`). What the `stele` command's `--older-than`, `--timeout` and the
//! pruner's options take, and the HTTP API's `wait?timeout=30s`: one parser for both.

use std::{fmt, str::FromStr, time::Duration};

/// A duration parsed from `<number><unit>`, with `ms`, `s`, `m`, `h` or `d` as the unit.
///
/// ```
/// use node::HumanDuration;
/// use std::time::Duration;
///
/// let parsed: HumanDuration = "15m".parse().unwrap();
/// assert_eq!(Duration::from(parsed), Duration::from_secs(900));
/// assert_eq!(HumanDuration(Duration::from_secs(7 * 86_400)).to_string(), "7d");
/// assert!("1h30m".parse::<HumanDuration>().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct HumanDuration(pub Duration);

/// Why a text is not a duration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Nothing was given.
    #[error("the duration is empty: {HINT}")]
    Empty,
    /// A leading `-` (or `+`).
    #[error("`{0}` has a sign: a duration is a whole number and a unit ({HINT})")]
    Signed(String),
    /// No digits before the unit.
    #[error("`{0}` does not start with a whole number ({HINT})")]
    NoNumber(String),
    /// Digits and nothing after them.
    #[error("`{0}` has no unit ({HINT})")]
    NoUnit(String),
    /// A unit other than the accepted ones.
    #[error("`{input}` has the unknown unit `{unit}` ({HINT})")]
    UnknownUnit {
        /// The whole text.
        input: String,
        /// What stood after the number.
        unit: String,
    },
    /// More than a `Duration` holds.
    #[error("`{0}` is too long a duration")]
    TooLarge(String),
}

const HINT: &str = "use a whole number and ms, s, m, h or d, e.g. 30s, 15m, 12h, 7d";

/// The accepted units and their length in milliseconds, shortest first.
const UNITS: [(&str, u64); 5] = [
    ("ms", 1),
    ("s", 1_000),
    ("m", 60_000),
    ("h", 3_600_000),
    ("d", 86_400_000),
];

impl FromStr for HumanDuration {
    type Err = DurationError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        if input.is_empty() {
            return Err(DurationError::Empty);
        }
        if input.starts_with(['-', '+']) {
            return Err(DurationError::Signed(input.to_string()));
        }
        let digits = input.bytes().take_while(u8::is_ascii_digit).count();
        let (number, unit) = input.split_at(digits);
        if number.is_empty() {
            return Err(DurationError::NoNumber(input.to_string()));
        }
        if unit.is_empty() {
            return Err(DurationError::NoUnit(input.to_string()));
        }
        let Some((_, millis_per_unit)) = UNITS.iter().find(|(name, _)| *name == unit) else {
            return Err(DurationError::UnknownUnit {
                input: input.to_string(),
                unit: unit.to_string(),
            });
        };
        let millis = number
            .parse::<u64>()
            .ok()
            .and_then(|n| n.checked_mul(*millis_per_unit))
            .ok_or_else(|| DurationError::TooLarge(input.to_string()))?;
        Ok(Self(Duration::from_millis(millis)))
    }
}

impl fmt::Display for HumanDuration {
    /// The largest unit that divides the duration exactly: `7d`, `90m`, `1500ms`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let millis = self.0.as_millis();
        let (name, per_unit) = UNITS
            .iter()
            .rev()
            .find(|(_, per_unit)| millis > 0 && millis.is_multiple_of(u128::from(*per_unit)))
            .map_or(("s", 1_000), |(name, per_unit)| (*name, *per_unit));
        write!(f, "{}{name}", millis / u128::from(per_unit))
    }
}

impl From<HumanDuration> for Duration {
    fn from(duration: HumanDuration) -> Self {
        duration.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Duration, DurationError> {
        text.parse::<HumanDuration>().map(Duration::from)
    }

    #[test]
    fn each_unit_is_accepted() {
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse("15m"), Ok(Duration::from_secs(15 * 60)));
        assert_eq!(parse("12h"), Ok(Duration::from_secs(12 * 3_600)));
        assert_eq!(parse("7d"), Ok(Duration::from_secs(7 * 86_400)));
        assert_eq!(parse("0s"), Ok(Duration::ZERO));
        assert_eq!(parse("007m"), Ok(Duration::from_secs(7 * 60)));
    }

    #[test]
    fn malformed_durations_say_what_is_wrong() {
        assert_eq!(parse(""), Err(DurationError::Empty));
        assert_eq!(parse("-1d"), Err(DurationError::Signed("-1d".into())));
        assert_eq!(parse("+1d"), Err(DurationError::Signed("+1d".into())));
        assert_eq!(parse("d"), Err(DurationError::NoNumber("d".into())));
        assert_eq!(
            parse("1.5h"),
            Err(DurationError::UnknownUnit {
                input: "1.5h".into(),
                unit: ".5h".into()
            })
        );
        assert_eq!(parse("7"), Err(DurationError::NoUnit("7".into())));
        assert_eq!(
            parse("7x"),
            Err(DurationError::UnknownUnit {
                input: "7x".into(),
                unit: "x".into()
            })
        );
        assert_eq!(
            parse("1h30m"),
            Err(DurationError::UnknownUnit {
                input: "1h30m".into(),
                unit: "h30m".into()
            })
        );
        assert_eq!(parse(" 7d"), Err(DurationError::NoNumber(" 7d".into())));
        assert_eq!(
            parse("99999999999999999999d"),
            Err(DurationError::TooLarge("99999999999999999999d".into()))
        );
        assert_eq!(
            parse("999999999999999999d"),
            Err(DurationError::TooLarge("999999999999999999d".into()))
        );
        let message = parse("7x").unwrap_err().to_string();
        assert_eq!(
            message,
            "`7x` has the unknown unit `x` (use a whole number and ms, s, m, h or d, e.g. 30s, \
             15m, 12h, 7d)"
        );
    }

    #[test]
    fn durations_print_in_their_largest_exact_unit() {
        let show = |text: &str| text.parse::<HumanDuration>().unwrap().to_string();
        assert_eq!(show("7d"), "7d");
        assert_eq!(show("168h"), "7d");
        assert_eq!(show("90m"), "90m");
        assert_eq!(show("1500ms"), "1500ms");
        assert_eq!(show("60s"), "1m");
        assert_eq!(show("0s"), "0s");
    }
}
