//! The node's output protocol: one [`Line`] per fact.

use concepts::{ExecutionId, ExecutorId};
use std::fmt;

/// One line of the node's standard output: one fact, flushed as soon as it is known.
///
/// | line | meaning |
/// |---|---|
/// | `submitting N` | the node found the store empty and is about to submit |
/// | `submitted N` | the submission committed |
/// | `resumed N` | the store already held the N executions (a restart) |
/// | `awaiting N` | `--submit never`: the node waits for N executions that others submit |
/// | `executor <executor id>` | the id of this node's executor (in every `Locked` it writes) |
/// | `locked <n>` | `--trace-waits`: a `lock_pending` committed and returned n > 0 executions |
/// | `waiting <start>` | `--trace-waits`: a `wait_for_pending` call began (wall clock, ms) |
/// | `waited <start> <end> early\|timeout` | it returned before its `max_wait`, or at it |
/// | `finished <execution id>` | the store reported this execution finished (each id once per process) |
/// | `progress F/N` | after each poll: F of the N executions are finished |
/// | `{...}` | last line, on success: a JSON summary |
#[derive(Debug, Clone, PartialEq)]
pub enum Line {
    /// `submitting N`.
    Submitting(usize),
    /// `submitted N`.
    Submitted(usize),
    /// `resumed N`.
    Resumed(usize),
    /// `awaiting N`.
    Awaiting(usize),
    /// `executor <executor id>`.
    Executor(ExecutorId),
    /// `locked <n>`.
    Locked(usize),
    /// `waiting <start>`.
    Waiting {
        /// When the call began, [`crate::wall_ms`].
        start: i64,
    },
    /// `waited <start> <end> early|timeout`.
    Waited {
        /// When the call began, [`crate::wall_ms`].
        start: i64,
        /// When it returned, [`crate::wall_ms`].
        end: i64,
        /// It returned before its `max_wait` (`early`), not at it (`timeout`).
        early: bool,
    },
    /// `finished <execution id>`.
    Finished(ExecutionId),
    /// `progress F/N`.
    Progress {
        /// F, the executions finished.
        finished: usize,
        /// N, the executions in all.
        total: usize,
    },
    /// The JSON summary, a line that starts with `{`.
    Summary(serde_json::Value),
}

impl fmt::Display for Line {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Submitting(n) => write!(f, "submitting {n}"),
            Self::Submitted(n) => write!(f, "submitted {n}"),
            Self::Resumed(n) => write!(f, "resumed {n}"),
            Self::Awaiting(n) => write!(f, "awaiting {n}"),
            Self::Executor(id) => write!(f, "executor {id}"),
            Self::Locked(n) => write!(f, "locked {n}"),
            Self::Waiting { start } => write!(f, "waiting {start}"),
            Self::Waited { start, end, early } => {
                let how = if *early { "early" } else { "timeout" };
                write!(f, "waited {start} {end} {how}")
            }
            Self::Finished(id) => write!(f, "finished {id}"),
            Self::Progress { finished, total } => write!(f, "progress {finished}/{total}"),
            Self::Summary(summary) => write!(f, "{summary}"),
        }
    }
}

impl Line {
    /// Reads back a line the node printed.
    ///
    /// # Errors
    /// A line the node does not print, named with what is wrong with it.
    pub fn parse(line: &str) -> Result<Self, String> {
        let bad = |what: &str| format!("`{line}`: {what}");
        let number = |word: &str| word.parse().map_err(|_| bad("not a number"));
        let time = |word: &str| word.parse::<i64>().map_err(|_| bad("not a time"));
        if line.starts_with('{') {
            return serde_json::from_str(line)
                .map(Self::Summary)
                .map_err(|e| bad(&format!("the summary is not JSON: {e}")));
        }
        let words: Vec<&str> = line.split(' ').collect();
        Ok(match words.as_slice() {
            ["submitting", n] => Self::Submitting(number(n)?),
            ["submitted", n] => Self::Submitted(number(n)?),
            ["resumed", n] => Self::Resumed(number(n)?),
            ["awaiting", n] => Self::Awaiting(number(n)?),
            ["executor", id] => Self::Executor(id.parse().map_err(|_| bad("not an executor id"))?),
            ["locked", n] => Self::Locked(number(n)?),
            ["waiting", start] => Self::Waiting {
                start: time(start)?,
            },
            ["waited", start, end, how] => Self::Waited {
                start: time(start)?,
                end: time(end)?,
                early: match *how {
                    "early" => true,
                    "timeout" => false,
                    _ => return Err(bad("neither `early` nor `timeout`")),
                },
            },
            ["finished", id] => Self::Finished(id.parse().map_err(|_| bad("not an execution id"))?),
            ["progress", progress] => {
                let (finished, total) = progress.split_once('/').ok_or_else(|| bad("not F/N"))?;
                Self::Progress {
                    finished: number(finished)?,
                    total: number(total)?,
                }
            }
            _ => return Err(bad("not a line durability-node prints")),
        })
    }
}

#[cfg(test)]
mod tests;
