//! The JSON form of a timestamp in a stored event or state (`#[serde(with = ...)]`): the text
//! chrono's own `Serialize` writes, RFC 3339 in UTC with 0, 3, 6 or 9 fractional digits
//! (`2026-12-05T10:00:00.123456Z`), written and read without chrono's formatter.
//!
//! chrono writes a timestamp through `collect_str`, a character at a time, and serde_json
//! escapes each piece on its own; a log's events and state hold several timestamps, and
//! writing them cost about a tenth of an execution's instructions on SQLite. Here the usual
//! timestamp (years 0 to 9999, no leap second) is written into a buffer on the stack and
//! handed to the serializer whole, and read back by position; anything else goes through
//! chrono, so the text and what is accepted are exactly chrono's (`tests.rs` compares them).

use chrono::{DateTime, Datelike, FixedOffset, NaiveDate, NaiveTime, Timelike, Utc};
use serde::{Deserializer, Serializer, de};
use std::fmt;

/// The longest text of the fast path: `YYYY-MM-DDTHH:MM:SS.nnnnnnnnnZ`.
pub(crate) const LONGEST: usize = 30;

/// Writes `at` as chrono's `Serialize` does.
pub(crate) fn serialize<S: Serializer>(
    at: &DateTime<Utc>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    let mut buf = [0_u8; LONGEST];
    match format(at, &mut buf) {
        Some(text) => serializer.serialize_str(text),
        None => serializer.serialize_str(&at.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)),
    }
}

/// Reads what chrono's `Deserialize` reads (RFC 3339 with any offset), as UTC.
pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<DateTime<Utc>, D::Error> {
    deserializer.deserialize_str(Visitor)
}

/// The text of `at` in `buf`, or `None` outside the fast path (a year outside 0..=9999, a
/// leap second).
fn format<'b>(at: &DateTime<Utc>, buf: &'b mut [u8; LONGEST]) -> Option<&'b str> {
    std::str::from_utf8(format_ascii(at, buf)?).ok()
}

/// [`format`]'s text as its ASCII bytes, for a writer that takes bytes (no UTF-8 check).
pub(crate) fn format_ascii<'b>(at: &DateTime<Utc>, buf: &'b mut [u8; LONGEST]) -> Option<&'b [u8]> {
    let (date, time) = (at.date_naive(), at.time());
    let year = u32::try_from(date.year())
        .ok()
        .filter(|year| *year <= 9999)?;
    let nanos = time.nanosecond();
    if nanos >= 1_000_000_000 {
        return None;
    }
    let mut put = |at: usize, value: u32, digits: usize| {
        let mut value = value;
        for slot in buf[at..at + digits].iter_mut().rev() {
            *slot = b'0' + u8::try_from(value % 10).unwrap_or(0);
            value /= 10;
        }
    };
    put(0, year, 4);
    put(5, date.month(), 2);
    put(8, date.day(), 2);
    put(11, time.hour(), 2);
    put(14, time.minute(), 2);
    put(17, time.second(), 2);
    let (fraction, digits) = match nanos {
        0 => (0, 0),
        _ if nanos % 1_000_000 == 0 => (nanos / 1_000_000, 3),
        _ if nanos % 1_000 == 0 => (nanos / 1_000, 6),
        _ => (nanos, 9),
    };
    if digits > 0 {
        put(20, fraction, digits);
    }
    for (at, separator) in [(4, b'-'), (7, b'-'), (10, b'T'), (13, b':'), (16, b':')] {
        buf[at] = separator;
    }
    let len = if digits > 0 {
        buf[19] = b'.';
        20 + digits
    } else {
        19
    };
    buf[len] = b'Z';
    Some(&buf[..=len])
}

/// `text` read by position when it is in the form [`format`] writes, else `None`.
fn parse_fast(text: &str) -> Option<DateTime<Utc>> {
    let bytes = text.as_bytes();
    let digits = match bytes.len() {
        20 => 0,
        24 => 3,
        27 => 6,
        30 => 9,
        _ => return None,
    };
    let number = |from: usize, len: usize| -> Option<u32> {
        bytes[from..from + len].iter().try_fold(0_u32, |value, b| {
            b.is_ascii_digit().then(|| value * 10 + u32::from(b - b'0'))
        })
    };
    let shape = [(4, b'-'), (7, b'-'), (10, b'T'), (13, b':'), (16, b':')]
        .iter()
        .all(|(at, separator)| bytes[*at] == *separator)
        && bytes[bytes.len() - 1] == b'Z'
        && (digits == 0 || bytes[19] == b'.');
    if !shape {
        return None;
    }
    let scale = [1, 1_000_000, 1_000, 1][digits / 3];
    let nanos = if digits == 0 {
        0
    } else {
        number(20, digits)? * scale
    };
    let date = NaiveDate::from_ymd_opt(
        i32::try_from(number(0, 4)?).ok()?,
        number(5, 2)?,
        number(8, 2)?,
    )?;
    let time = NaiveTime::from_hms_nano_opt(number(11, 2)?, number(14, 2)?, number(17, 2)?, nanos)?;
    Some(date.and_time(time).and_utc())
}

struct Visitor;

impl de::Visitor<'_> for Visitor {
    type Value = DateTime<Utc>;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("an RFC 3339 formatted date and time string")
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
        match parse_fast(text) {
            Some(at) => Ok(at),
            None => text
                .parse::<DateTime<FixedOffset>>()
                .map(|at| at.with_timezone(&Utc))
                .map_err(E::custom),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
