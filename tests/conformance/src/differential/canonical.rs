//! What makes two backends' dumps comparable: a canonical order of expired timers, errors as
//! the contract fixes them, and run ids replaced by their first-appearance ordinal.

use chrono::{DateTime, Utc};
use concepts::{DbError, DelayId, ExecutionId, ExpiredTimer, ValidationError};
use std::collections::HashMap;

/// A canonical order of expired timers: expiry, execution, leases before delays, delay id.
pub(super) fn timer_key(timer: &ExpiredTimer) -> (DateTime<Utc>, ExecutionId, u8, Option<DelayId>) {
    match timer {
        ExpiredTimer::Lock(l) => (l.lock_expires_at, l.execution_id.clone(), 0, None),
        ExpiredTimer::Delay(d) => (d.expires_at, d.execution_id.clone(), 1, Some(d.delay_id)),
    }
}

/// An error as every backend must report it: the kind, plus the parts the contract fixes
/// (both versions of a mismatch, the validation rule, what was duplicated), never a
/// backend's message.
pub(super) fn portable_error(err: &DbError) -> String {
    match err {
        DbError::VersionMismatch {
            appending_version,
            expected_version,
        } => {
            format!(
                "VersionMismatch {{ appending: {appending_version}, expected: {expected_version} }}"
            )
        }
        DbError::Validation(v) => {
            let rule = match v {
                ValidationError::NotYetPending { scheduled_at } => {
                    format!("NotYetPending({scheduled_at:?})")
                }
                ValidationError::AlreadyLocked => "AlreadyLocked".to_string(),
                ValidationError::BlockedByJoinSet { join_set_id } => {
                    format!("BlockedByJoinSet({join_set_id})")
                }
                ValidationError::AlreadyFinished => "AlreadyFinished".to_string(),
                ValidationError::InvalidExpiryDate {
                    lock_expires_at,
                    now,
                } => {
                    format!("InvalidExpiryDate({lock_expires_at:?}, {now:?})")
                }
                ValidationError::CreatedEventAppended => "CreatedEventAppended".to_string(),
                ValidationError::EmptyBatch(_) => "EmptyBatch".to_string(),
                ValidationError::InvalidRequest(_) => "InvalidRequest".to_string(),
                // A rule added later: its whole form, until it gets a line of its own here (a
                // backend-specific message in it makes the dumps differ, and the test says so).
                other => format!("{other:?}"),
            };
            format!("Validation({rule})")
        }
        DbError::Duplicate(what) => format!("Duplicate({what:?})"),
        other => other.kind().to_string(),
    }
}

/// Replaces every run id (`Run_` and 26 Crockford characters) by `Run#<n>`, n being the order
/// of its first appearance in the dump.
pub(super) fn normalize_run_ids(lines: &mut [String]) {
    const PREFIX: &str = "Run_";
    const ULID_LEN: usize = 26;
    let mut ordinals: HashMap<String, usize> = HashMap::new();
    for line in lines.iter_mut() {
        if !line.contains(PREFIX) {
            continue;
        }
        let mut out = String::with_capacity(line.len());
        let mut rest = line.as_str();
        while let Some(pos) = rest.find(PREFIX) {
            out.push_str(&rest[..pos]);
            let after = &rest[pos + PREFIX.len()..];
            let ulid: String = after.chars().take(ULID_LEN).collect();
            if ulid.len() == ULID_LEN && ulid.chars().all(|c| c.is_ascii_alphanumeric()) {
                let next = ordinals.len();
                let n = *ordinals.entry(ulid).or_insert(next);
                out.push_str(&format!("Run#{n}"));
                rest = &after[ULID_LEN..];
            } else {
                out.push_str(PREFIX);
                rest = after;
            }
        }
        out.push_str(rest);
        *line = out;
    }
}
