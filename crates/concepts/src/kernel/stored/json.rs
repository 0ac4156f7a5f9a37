//! The JSON of the documents every execution writes, written by hand: a state that is due,
//! locked or finished, and the `Created`, `Locked` and successful `Finished` events; the
//! values they hold of the caller's (names, parameters, results, metadata) are serde_json's
//! to write. The text is exactly what their
//! `Serialize` writes through serde_json (`tests.rs` compares the two over generated values);
//! anything else, and a timestamp outside what [`rfc3339`] writes itself, goes through serde.
//!
//! serde_json scans every string it writes for characters to escape, a byte at a time: the
//! keys, the timestamps, the ids. Only the caller's values can hold such a character (they
//! are escaped as serde_json does); the keys, timestamps, executor and run ids are ASCII
//! letters, digits and punctuation that JSON leaves alone, and are copied as they are.

use super::{JSON_CAPACITY, corrupt};
use crate::{
    DbError, ExecutionEvent, ExecutionEventInner, PendingState,
    event::{Created, Locked, ResultKind, SupportedFunctionReturnValue, duration_micros},
    time::rfc3339,
};
use chrono::{DateTime, Utc};
use serde::Serialize;

/// `state` as its JSON document.
pub fn state_json(state: &PendingState) -> Result<String, DbError> {
    let mut doc = Doc::new();
    let written = match state {
        PendingState::PendingAt { scheduled_at } => {
            doc.raw(r#"{"PendingAt":{"scheduled_at":"#);
            doc.time(scheduled_at).map(|()| doc.raw("}}"))
        }
        PendingState::Locked {
            executor_id,
            run_id,
            lock_expires_at,
        } => {
            doc.raw(r#"{"Locked":{"executor_id":""#);
            executor_id.with_ascii(|text| doc.ascii(text));
            doc.raw(r#"","run_id":""#);
            run_id.with_ascii(|text| doc.ascii(text));
            doc.raw(r#"","lock_expires_at":"#);
            doc.time(lock_expires_at).map(|()| doc.raw("}}"))
        }
        PendingState::Finished {
            version,
            finished_at,
            result_kind,
        } => {
            doc.raw(r#"{"Finished":{"version":"#);
            doc.number(u64::from(version.0));
            doc.raw(r#","finished_at":"#);
            doc.time(finished_at).map(|()| {
                doc.raw(r#","result_kind":""#);
                doc.raw(result_kind_name(*result_kind));
                doc.raw(r#""}}"#);
            })
        }
        PendingState::BlockedByJoinSet { .. } => None,
    };
    match written {
        Some(()) => doc.finish(),
        None => super::to_json(state),
    }
}

/// `event` as its JSON document.
pub fn event_json(event: &ExecutionEvent) -> Result<String, DbError> {
    let written = match &event.event {
        ExecutionEventInner::Created(created) => Doc::event(event, |doc| doc.created(created)),
        ExecutionEventInner::Locked(locked) => Doc::event(event, |doc| doc.locked(locked)),
        ExecutionEventInner::Finished { result: Ok(value) } => {
            Doc::event(event, |doc| doc.finished_ok(value))
        }
        _ => None,
    };
    written.map_or_else(|| super::to_json(event), Doc::finish)
}

/// The variant's name, as the derived `Serialize` writes it.
fn result_kind_name(kind: ResultKind) -> &'static str {
    match kind {
        ResultKind::Ok => "Ok",
        ResultKind::FallibleError => "FallibleError",
        ResultKind::Timeout => "Timeout",
        ResultKind::UnhandledChildExecutionError => "UnhandledChildExecutionError",
        ResultKind::PermanentFailure => "PermanentFailure",
        ResultKind::Cancelled => "Cancelled",
    }
}

/// A document being written.
struct Doc(Vec<u8>);

impl Doc {
    fn new() -> Self {
        Self(Vec::with_capacity(JSON_CAPACITY))
    }

    /// An event: its `created_at`, then what `rest` writes; `None` when either leaves it to
    /// serde.
    fn event(event: &ExecutionEvent, rest: impl FnOnce(&mut Self) -> Option<()>) -> Option<Self> {
        let mut doc = Self::new();
        doc.raw(r#"{"created_at":"#);
        doc.time(&event.created_at)?;
        rest(&mut doc)?;
        Some(doc)
    }

    /// Text that needs no escaping, as it is.
    fn raw(&mut self, text: &str) {
        self.ascii(text.as_bytes());
    }

    /// ASCII that needs no escaping, as it is.
    fn ascii(&mut self, text: &[u8]) {
        self.0.extend_from_slice(text);
    }

    /// A value of the caller's (a name, a function's parameters or result), as serde_json
    /// writes it: escaped where it must be.
    fn serde<T: Serialize + ?Sized>(&mut self, value: &T) -> Option<()> {
        serde_json::to_writer(&mut self.0, value).ok()
    }

    /// A number, as serde_json writes it.
    fn number(&mut self, value: u64) {
        let mut digits = [0_u8; 20];
        let mut at = digits.len();
        let mut left = value;
        loop {
            at -= 1;
            digits[at] = b'0' + u8::try_from(left % 10).unwrap_or(0);
            left /= 10;
            if left == 0 {
                break;
            }
        }
        self.0.extend_from_slice(&digits[at..]);
    }

    /// A timestamp as a JSON string; `None` when [`rfc3339`] leaves it to chrono.
    fn time(&mut self, at: &DateTime<Utc>) -> Option<()> {
        let mut buf = [0_u8; rfc3339::LONGEST];
        let text = rfc3339::format_ascii(at, &mut buf)?;
        self.0.push(b'"');
        self.ascii(text);
        self.0.push(b'"');
        Some(())
    }

    /// `,"event":{"Created":{...}}}`, the rest of a `Created` event after its `created_at`.
    fn created(&mut self, created: &Created) -> Option<()> {
        // Every field named: one added to the event does not compile here until it is written.
        let Created {
            ffqn,
            params,
            parent,
            scheduled_at,
            retry_exp_backoff,
            max_retries,
            component_id,
            metadata,
            scheduled_by,
        } = created;
        self.raw(r#","event":{"Created":{"ffqn":"#);
        self.serde(ffqn)?;
        self.raw(r#","params":"#);
        self.serde(params)?;
        self.raw(r#","parent":"#);
        self.serde(parent)?;
        self.raw(r#","scheduled_at":"#);
        self.time(scheduled_at)?;
        self.raw(r#","retry_exp_backoff":"#);
        self.number(duration_micros::micros(*retry_exp_backoff));
        self.raw(r#","max_retries":"#);
        self.number(u64::from(*max_retries));
        self.raw(r#","component_id":"#);
        self.serde(component_id)?;
        self.raw(r#","metadata":"#);
        if metadata.0.is_empty() {
            self.raw("{}");
        } else {
            self.serde(metadata)?;
        }
        self.raw(r#","scheduled_by":"#);
        self.serde(scheduled_by)?;
        self.raw("}}}");
        Some(())
    }

    /// `,"event":{"Locked":{...}}}`, the rest of a `Locked` event after its `created_at`.
    fn locked(&mut self, locked: &Locked) -> Option<()> {
        let Locked {
            component_id,
            executor_id,
            run_id,
            lock_expires_at,
        } = locked;
        self.raw(r#","event":{"Locked":{"component_id":"#);
        self.serde(component_id)?;
        self.raw(r#","executor_id":""#);
        executor_id.with_ascii(|text| self.ascii(text));
        self.raw(r#"","run_id":""#);
        run_id.with_ascii(|text| self.ascii(text));
        self.raw(r#"","lock_expires_at":"#);
        self.time(lock_expires_at)?;
        self.raw("}}}");
        Some(())
    }

    /// `,"event":{"Finished":{"result":{"Ok":...}}}}`, the rest of a successful `Finished`
    /// event after its `created_at`; the function's value is serde_json's to write.
    fn finished_ok(&mut self, value: &SupportedFunctionReturnValue) -> Option<()> {
        self.raw(r#","event":{"Finished":{"result":{"Ok":"#);
        let (variant, json) = match value {
            SupportedFunctionReturnValue::None => {
                self.raw(r#""None"}}}}"#);
                return Some(());
            }
            SupportedFunctionReturnValue::InfallibleOrResultOk(json) => {
                ("InfallibleOrResultOk", json)
            }
            SupportedFunctionReturnValue::FallibleResultErr(json) => ("FallibleResultErr", json),
        };
        self.raw(r#"{""#);
        self.raw(variant);
        self.raw(r#"":"#);
        self.serde(json)?;
        self.raw("}}}}}");
        Some(())
    }

    fn finish(self) -> Result<String, DbError> {
        // Built from `&str` pieces and serde_json's output only: the check cannot fail.
        String::from_utf8(self.0).map_err(|err| corrupt(format_args!("JSON not in UTF-8: {err}")))
    }
}

#[cfg(test)]
mod tests;
