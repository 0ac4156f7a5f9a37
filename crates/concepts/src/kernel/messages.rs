//! Wake-ups as text, for a backend whose processes tell each other what a committed write
//! changed (PostgreSQL's `NOTIFY`): `p:<micros>:<ffqn>` once per function, at its earliest due
//! time, `r:<execution id>` when an execution's responses grew, `f:<execution id>` when it
//! finished, and `*` for "anything may have happened"; the wake-ups of one write are packed
//! into as few messages as fit, separated by spaces (no id or function name holds one).

use super::plan::Wakeup;
use crate::FunctionFqn;
use chrono::DateTime;
use std::collections::{BTreeMap, BTreeSet};

/// The message that wakes every waiter.
pub const WAKE_EVERYONE: &str = "*";

/// A wake-up longer than this is sent as [`WAKE_EVERYONE`].
const MAX_ONE: usize = 1000;

/// Between two wake-ups of one message.
const SEPARATOR: char = ' ';

/// The messages of a committed write's `wakeups`, each at most `max_len` bytes (at least
/// 1,000): one for hundreds of wake-ups, rather than one per wake-up.
#[must_use]
pub fn wakeup_messages(wakeups: &[Wakeup], max_len: usize) -> Vec<String> {
    let mut pending: BTreeMap<&FunctionFqn, i64> = BTreeMap::new();
    let mut others = BTreeSet::new();
    for wakeup in wakeups {
        match wakeup {
            Wakeup::Pending { ffqn, at } => {
                let at = at.timestamp_micros();
                pending
                    .entry(ffqn)
                    .and_modify(|t| *t = (*t).min(at))
                    .or_insert(at);
            }
            Wakeup::Responses(id) => {
                others.insert(format!("r:{id}"));
            }
            Wakeup::Finished(id) => {
                others.insert(format!("f:{id}"));
            }
        }
    }
    let mut packed: Vec<String> = Vec::new();
    let items = (pending.into_iter())
        .map(|(ffqn, at)| format!("p:{at}:{ffqn}"))
        .chain(others);
    for item in items {
        let item = if item.len() > MAX_ONE {
            WAKE_EVERYONE.to_string()
        } else {
            item
        };
        match packed.last_mut() {
            Some(last) if last.len() + 1 + item.len() <= max_len.max(MAX_ONE) => {
                last.push(SEPARATOR);
                last.push_str(&item);
            }
            _ => packed.push(item),
        }
    }
    packed
}

/// The wake-ups of a received message; `None` wakes everyone (`*`, or a message a newer
/// binary sends).
#[must_use]
pub fn parse_wakeup_message(message: &str) -> Option<Vec<Wakeup>> {
    message.split(SEPARATOR).map(parse_one).collect()
}

fn parse_one(item: &str) -> Option<Wakeup> {
    if let Some(rest) = item.strip_prefix("p:") {
        let (at, ffqn) = rest.split_once(':')?;
        return Some(Wakeup::Pending {
            ffqn: ffqn.parse().ok()?,
            at: DateTime::from_timestamp_micros(at.parse().ok()?)?,
        });
    }
    if let Some(id) = item.strip_prefix("r:") {
        return Some(Wakeup::Responses(id.parse().ok()?));
    }
    let id = item.strip_prefix("f:")?;
    Some(Wakeup::Finished(id.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ExecutionId, ExecutionIdTopLevel};
    use chrono::{TimeZone, Utc};

    fn messages(wakeups: &[Wakeup]) -> Vec<String> {
        wakeup_messages(wakeups, 7_000)
    }

    #[test]
    fn wakeups_round_trip() {
        let id: ExecutionId = "E_01JZ8ZK3F8G3N9Q7V5W2X4Y6Z0".parse().unwrap();
        let child: ExecutionId = "E_01JZ8ZK3F8G3N9Q7V5W2X4Y6Z0.n:a_1".parse().unwrap();
        let at = Utc.timestamp_opt(-1, 999_988_000).unwrap();
        let wakeups = [
            Wakeup::Pending {
                ffqn: "ns:pkg/ifc@1.0.0.fn".parse().unwrap(),
                at,
            },
            Wakeup::Responses(child),
            Wakeup::Finished(id),
        ];
        for wakeup in wakeups {
            let sent = messages(std::slice::from_ref(&wakeup));
            assert_eq!(sent.len(), 1, "{sent:?}");
            assert_eq!(parse_wakeup_message(&sent[0]), Some(vec![wakeup]));
        }
        assert_eq!(parse_wakeup_message("*"), None, "wakes everyone");
        assert_eq!(
            parse_wakeup_message("something new"),
            None,
            "wakes everyone"
        );
    }

    #[test]
    fn a_write_sends_one_pending_wakeup_per_function_at_its_earliest_time() {
        let f = |name: &str| -> FunctionFqn { format!("ns:pkg/ifc.{name}").parse().unwrap() };
        let at = |secs| Utc.timestamp_opt(secs, 0).unwrap();
        let id: ExecutionId = "E_01JZ8ZK3F8G3N9Q7V5W2X4Y6Z0".parse().unwrap();
        let pending = |name, secs| Wakeup::Pending {
            ffqn: f(name),
            at: at(secs),
        };
        let sent = messages(&[
            pending("a", 7),
            pending("b", 9),
            pending("a", 5),
            Wakeup::Finished(id.clone()),
            Wakeup::Finished(id.clone()),
        ]);
        let expected = format!("p:5000000:ns:pkg/ifc.a p:9000000:ns:pkg/ifc.b f:{id}");
        assert_eq!(sent, [expected], "one message for the write");
        let long: FunctionFqn = format!("ns:pkg/ifc.{}", "x".repeat(5000)).parse().unwrap();
        let long = Wakeup::Pending {
            ffqn: long,
            at: at(1),
        };
        assert_eq!(messages(&[long]), [WAKE_EVERYONE]);
    }

    #[test]
    fn the_wakeups_of_a_large_group_are_packed_into_few_messages() {
        let wakeups: Vec<Wakeup> = (0..1_000u128)
            .map(|n| Wakeup::Finished(ExecutionIdTopLevel::from_parts(1, n).into()))
            .collect();
        let sent = messages(&wakeups);
        assert!(sent.len() < 10, "{} messages", sent.len());
        assert!(sent.iter().all(|message| message.len() <= 7_000));
        let key = |w: &Wakeup| format!("{w:?}");
        let mut received: Vec<Wakeup> = (sent.iter())
            .flat_map(|m| parse_wakeup_message(m).unwrap())
            .collect();
        received.sort_by_key(key);
        let mut expected = wakeups;
        expected.sort_by_key(key);
        assert_eq!(received, expected);
        let mixed = parse_wakeup_message("f:E_01JZ8ZK3F8G3N9Q7V5W2X4Y6Z0 *");
        assert_eq!(mixed, None, "wakes everyone");
    }
}
