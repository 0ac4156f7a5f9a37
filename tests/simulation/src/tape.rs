//! The tape of a run: every choice of its faulty steps, in order (which component is polled,
//! what a client does, which node or loop is killed, which write, wait or worker run a fault
//! hits), written to a file and read back, so that a run can be replayed from its choices
//! alone and shrunk by removing some of them (`crate::shrink`).
//!
//! A step's faults are named by their place among the decisions of their class within the
//! step (the second write of the step, the first wait): removing an earlier step changes
//! what a later step does, but a decision that names nothing is simply not taken, so that
//! every tape, however cut, replays.

use crate::faults::{FaultKind, FaultSet};
use concepts::ExecutionId;
use std::{fmt, time::Duration};

/// What one faulty step does.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Action {
    /// Nothing (the step's draw fell on a fault kind that is off).
    Idle,
    /// Polls the task with this label once (nothing when there is none).
    Poll(String),
    /// Moves the clock forward.
    Advance(Duration),
    /// A client submits the `k`-th top-level execution.
    Submit(u32),
    /// Kills a node: its executors, their runs, its watcher and its pruner.
    KillNode(usize),
    /// Kills a node's watcher loop alone.
    KillWatcher(usize),
    /// Kills a node's pruner alone.
    KillPruner(usize),
    /// Restarts a dead node, or the loops of a live node that were killed.
    Restart(usize),
    /// The clock jumps forward.
    JumpClock(Duration),
    /// A client cancels this execution and its unfinished descendants.
    Cancel(ExecutionId),
    /// A client completes the promise of the `k`-th top-level execution with `value`.
    Complete {
        /// The execution whose promise it is.
        k: u32,
        /// The value.
        value: u64,
    },
}

impl Action {
    /// The fault kind the action is, if it is one.
    #[must_use]
    pub fn fault(&self) -> Option<FaultKind> {
        match self {
            Self::KillNode(_) => Some(FaultKind::NodeKilled),
            Self::KillWatcher(_) => Some(FaultKind::WatcherKilled),
            Self::KillPruner(_) => Some(FaultKind::PrunerKilled),
            Self::JumpClock(_) => Some(FaultKind::ClockJump),
            _ => None,
        }
    }
}

/// A fault of one write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WriteFault {
    /// Refused before it commits.
    Refused,
    /// Commits, and its reply is lost.
    Ambiguous,
}

/// A fault of one wait's wake-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WaitFault {
    /// Lost.
    Lost,
    /// This many steps late.
    Late(u64),
}

/// What one run of the activity does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Behaviour {
    /// Returns after being polled this many times.
    Return(u32),
    /// Returns its error value (retried while retries are left).
    Fail,
    /// Panics.
    Panic,
    /// Returns once the clock passed its lease's end by this much (one to three leases).
    Hang(Duration),
    /// Returns once the clock passed its lease's end by this much (1-200 ms).
    Late(Duration),
}

impl Behaviour {
    /// What a run does when the tape says nothing of it.
    pub const PLAIN: Self = Self::Return(0);

    /// The fault kind it is, if it is one.
    #[must_use]
    pub fn fault(self) -> Option<FaultKind> {
        match self {
            Self::Panic => Some(FaultKind::WorkerPanic),
            Self::Hang(_) => Some(FaultKind::WorkerHang),
            Self::Late(_) => Some(FaultKind::WorkerLate),
            Self::Return(_) | Self::Fail => None,
        }
    }
}

/// One decision taken within a step, named by its place among the step's decisions of its
/// class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Decision {
    /// The `ordinal`-th write of the step.
    Write {
        /// Its place, from 0.
        ordinal: u32,
        /// Its fault.
        fault: WriteFault,
    },
    /// The `ordinal`-th wait of the step.
    Wait {
        /// Its place, from 0.
        ordinal: u32,
        /// Its fault.
        fault: WaitFault,
    },
    /// The `ordinal`-th activity run that started in the step.
    Worker {
        /// Its place, from 0.
        ordinal: u32,
        /// What it does.
        behaviour: Behaviour,
    },
}

impl Decision {
    /// The fault kind it is, if it is one (an ordinary worker behaviour is none).
    #[must_use]
    pub fn fault(&self) -> Option<FaultKind> {
        match self {
            Self::Write {
                fault: WriteFault::Refused,
                ..
            } => Some(FaultKind::WriteRefused),
            Self::Write {
                fault: WriteFault::Ambiguous,
                ..
            } => Some(FaultKind::AmbiguousCommit),
            Self::Wait {
                fault: WaitFault::Lost,
                ..
            } => Some(FaultKind::LostNotification),
            Self::Wait {
                fault: WaitFault::Late(_),
                ..
            } => Some(FaultKind::LateNotification),
            Self::Worker { behaviour, .. } => behaviour.fault(),
        }
    }
}

/// One faulty step: its action and the decisions taken while it ran.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StepRecord {
    /// What the step does.
    pub action: Action,
    /// The faults and worker behaviours of the step.
    pub decisions: Vec<Decision>,
}

/// Every choice of a run's faulty steps, with what the run needs besides (the seed, for the
/// calm phase and the executions' parameters; how many executions the clients submit; the
/// fault kinds it was drawn with).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tape {
    /// The seed.
    pub seed: u64,
    /// Top-level executions the clients submit.
    pub executions: u32,
    /// The fault kinds the tape was drawn with (for the reader: the tape's own faults are
    /// what is injected).
    pub faults: FaultSet,
    /// The faulty steps.
    pub steps: Vec<StepRecord>,
}

impl Tape {
    /// The number of choices on the tape: actions and decisions.
    #[must_use]
    pub fn choices(&self) -> usize {
        self.steps.iter().map(|step| 1 + step.decisions.len()).sum()
    }

    /// The tape as text, one choice per line (what `parse` reads).
    #[must_use]
    pub fn to_text(&self) -> String {
        let mut text = format!(
            "# a tape of the simulation: cargo xtask simulate --replay <this file>\n\
             seed {}\nexecutions {}\nfaults {}\n",
            self.seed, self.executions, self.faults
        );
        for step in &self.steps {
            text.push_str(&format!("step {}\n", step.action));
            for decision in &step.decisions {
                text.push_str(&format!("  {decision}\n"));
            }
        }
        text
    }

    /// Reads a tape written by [`Tape::to_text`].
    ///
    /// # Errors
    /// A line that is not part of a tape, named with its number.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut tape = Self {
            seed: 0,
            executions: 0,
            faults: FaultSet::ALL,
            steps: Vec::new(),
        };
        let mut seen_seed = false;
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
            let at = |err: String| format!("line {}: {err}: `{line}`", n + 1);
            match word {
                "seed" => {
                    tape.seed = number(rest).map_err(at)?;
                    seen_seed = true;
                }
                "executions" => tape.executions = number(rest).map_err(at)?,
                "faults" => tape.faults = FaultSet::parse(rest).map_err(at)?,
                "step" => tape.steps.push(StepRecord {
                    action: parse_action(rest).map_err(at)?,
                    decisions: Vec::new(),
                }),
                _ => {
                    let decision = parse_decision(word, rest).map_err(at)?;
                    let step = tape
                        .steps
                        .last_mut()
                        .ok_or_else(|| at("a decision before the first step".into()))?;
                    step.decisions.push(decision);
                }
            }
        }
        if !seen_seed {
            return Err("no `seed` line: not a tape".into());
        }
        Ok(tape)
    }
}

fn number<T: std::str::FromStr>(text: &str) -> Result<T, String> {
    text.trim()
        .parse()
        .map_err(|_| format!("`{text}` is not a number"))
}

fn millis(text: &str) -> Result<Duration, String> {
    number(text.trim_end_matches("ms")).map(Duration::from_millis)
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Idle => f.write_str("idle"),
            Self::Poll(label) => write!(f, "poll {label}"),
            Self::Advance(by) => write!(f, "advance {}ms", by.as_millis()),
            Self::Submit(k) => write!(f, "submit {k}"),
            Self::KillNode(node) => write!(f, "kill-node {node}"),
            Self::KillWatcher(node) => write!(f, "kill-watcher {node}"),
            Self::KillPruner(node) => write!(f, "kill-pruner {node}"),
            Self::Restart(node) => write!(f, "restart {node}"),
            Self::JumpClock(by) => write!(f, "jump {}ms", by.as_millis()),
            Self::Cancel(id) => write!(f, "cancel {id}"),
            Self::Complete { k, value } => write!(f, "complete {k} {value}"),
        }
    }
}

fn parse_action(text: &str) -> Result<Action, String> {
    let (word, rest) = text.split_once(' ').unwrap_or((text, ""));
    Ok(match word {
        "idle" => Action::Idle,
        "poll" => Action::Poll(rest.to_string()),
        "advance" => Action::Advance(millis(rest)?),
        "submit" => Action::Submit(number(rest)?),
        "kill-node" => Action::KillNode(number(rest)?),
        "kill-watcher" => Action::KillWatcher(number(rest)?),
        "kill-pruner" => Action::KillPruner(number(rest)?),
        "restart" => Action::Restart(number(rest)?),
        "jump" => Action::JumpClock(millis(rest)?),
        "cancel" => Action::Cancel(rest.parse().map_err(|err| format!("{err}"))?),
        "complete" => {
            let (k, value) = rest
                .split_once(' ')
                .ok_or_else(|| "complete needs an execution and a value".to_string())?;
            Action::Complete {
                k: number(k)?,
                value: number(value)?,
            }
        }
        other => return Err(format!("no action `{other}`")),
    })
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Write { ordinal, fault } => {
                let fault = match fault {
                    WriteFault::Refused => "refused",
                    WriteFault::Ambiguous => "ambiguous",
                };
                write!(f, "write {ordinal} {fault}")
            }
            Self::Wait { ordinal, fault } => match fault {
                WaitFault::Lost => write!(f, "wait {ordinal} lost"),
                WaitFault::Late(steps) => write!(f, "wait {ordinal} late {steps}"),
            },
            Self::Worker { ordinal, behaviour } => {
                write!(f, "worker {ordinal} ")?;
                match behaviour {
                    Behaviour::Return(polls) => write!(f, "return {polls}"),
                    Behaviour::Fail => f.write_str("fail"),
                    Behaviour::Panic => f.write_str("panic"),
                    Behaviour::Hang(by) => write!(f, "hang {}ms", by.as_millis()),
                    Behaviour::Late(by) => write!(f, "late {}ms", by.as_millis()),
                }
            }
        }
    }
}

fn parse_decision(word: &str, rest: &str) -> Result<Decision, String> {
    let mut parts = rest.split(' ');
    let ordinal = number(parts.next().unwrap_or_default())?;
    let what = parts.next().unwrap_or_default();
    let argument = parts.next().unwrap_or_default();
    Ok(match (word, what) {
        ("write", "refused") => Decision::Write {
            ordinal,
            fault: WriteFault::Refused,
        },
        ("write", "ambiguous") => Decision::Write {
            ordinal,
            fault: WriteFault::Ambiguous,
        },
        ("wait", "lost") => Decision::Wait {
            ordinal,
            fault: WaitFault::Lost,
        },
        ("wait", "late") => Decision::Wait {
            ordinal,
            fault: WaitFault::Late(number(argument)?),
        },
        ("worker", kind) => Decision::Worker {
            ordinal,
            behaviour: match kind {
                "return" => Behaviour::Return(number(argument)?),
                "fail" => Behaviour::Fail,
                "panic" => Behaviour::Panic,
                "hang" => Behaviour::Hang(millis(argument)?),
                "late" => Behaviour::Late(millis(argument)?),
                other => return Err(format!("no worker behaviour `{other}`")),
            },
        },
        _ => return Err(format!("no decision `{word} {what}`")),
    })
}

#[cfg(test)]
mod tests {
    use super::{Action, Behaviour, Decision, StepRecord, Tape, WaitFault, WriteFault};
    use crate::faults::FaultSet;
    use std::time::Duration;

    #[test]
    fn a_tape_reads_back_as_written() {
        let id: concepts::ExecutionId =
            "E_01KHAPJ8RG0000000000000001.g:1_2".parse().expect("an id");
        let tape = Tape {
            seed: 7,
            executions: 3,
            faults: FaultSet::parse("write-refused,clock-jump").expect("a set"),
            steps: vec![
                StepRecord {
                    action: Action::Poll("node 0 run E_1 #1".into()),
                    decisions: vec![
                        Decision::Write {
                            ordinal: 1,
                            fault: WriteFault::Ambiguous,
                        },
                        Decision::Wait {
                            ordinal: 0,
                            fault: WaitFault::Late(4),
                        },
                        Decision::Worker {
                            ordinal: 0,
                            behaviour: Behaviour::Hang(Duration::from_millis(4000)),
                        },
                    ],
                },
                StepRecord {
                    action: Action::Cancel(id),
                    decisions: Vec::new(),
                },
                StepRecord {
                    action: Action::Complete { k: 2, value: 9 },
                    decisions: vec![Decision::Worker {
                        ordinal: 0,
                        behaviour: Behaviour::Return(3),
                    }],
                },
                StepRecord {
                    action: Action::JumpClock(Duration::from_millis(2000)),
                    decisions: Vec::new(),
                },
            ],
        };
        assert_eq!(Tape::parse(&tape.to_text()), Ok(tape.clone()));
        assert_eq!(tape.choices(), 8);
        let err = Tape::parse("seed 1\nstep fly away").expect_err("not a tape");
        assert!(err.contains("line 2"), "{err}");
    }
}
