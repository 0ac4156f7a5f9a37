//! Shrinking a failing run down to single choices: its tape (every choice of its faulty steps)
//! is cut after the step that broke, stripped of whole fault kinds and of executions, then of
//! ranges of steps and of single steps (delta debugging: halves, quarters, ... down to one
//! step at a time), its clock moves merged, then stripped of single faults, each cut kept only
//! while a replay of the tape still breaks the same invariant; after each cut kept, the steps
//! that did nothing in the replay go too.

use crate::{
    faults::{FaultKind, FaultSet},
    tape::{Action, StepRecord, Tape},
    world::{Violation, replay},
};

/// The most replays one shrink tries.
const MAX_TRIES: u32 = 500;

/// A shrunk failing run.
#[derive(Debug, Clone)]
pub struct Shrunk {
    /// What broke in it.
    pub violation: Violation,
    /// Its tape, which replays it.
    pub tape: Tape,
    /// How many replays the shrink tried.
    pub tries: u32,
}

/// What a replay that broke the invariant left: the violation, the tape as replayed (cut
/// after the step that broke, holding only the decisions taken), its steps that did nothing.
struct Replayed {
    violation: Violation,
    tape: Tape,
    idle: Vec<usize>,
}

struct Shrinker<R> {
    /// Replays a tape; `Some` when it still breaks the invariant.
    replay: R,
    best: Shrunk,
    /// The steps of the best tape that did nothing.
    idle: Vec<usize>,
}

impl<R: FnMut(&Tape) -> Option<Replayed>> Shrinker<R> {
    /// Replays `candidate`; keeps it when it breaks the same invariant, and then tries it
    /// without the steps that did nothing in it.
    fn attempt(&mut self, candidate: Tape) -> bool {
        if !self.replay(candidate) {
            return false;
        }
        while !self.idle.is_empty() {
            let idle = std::mem::take(&mut self.idle);
            let steps = (self.best.tape.steps.iter().enumerate())
                .filter(|(index, _)| !idle.contains(index))
                .map(|(_, step)| step.clone())
                .collect();
            if !self.replay(self.with_steps(steps)) {
                break;
            }
        }
        true
    }

    fn replay(&mut self, candidate: Tape) -> bool {
        if self.best.tries >= MAX_TRIES {
            return false;
        }
        self.best.tries += 1;
        match (self.replay)(&candidate) {
            Some(replayed) => {
                self.best.violation = replayed.violation;
                self.best.tape = replayed.tape;
                self.idle = replayed.idle;
                true
            }
            None => false,
        }
    }

    fn with_steps(&self, steps: Vec<StepRecord>) -> Tape {
        Tape {
            steps,
            ..self.best.tape.clone()
        }
    }

    fn out_of_tries(&self) -> bool {
        self.best.tries >= MAX_TRIES
    }
}

/// A shorter tape that breaks the same invariant as `violation`, found on `tape` (the same
/// one when nothing shorter does).
#[must_use]
pub fn shrink(violation: &Violation, tape: &Tape) -> Shrunk {
    let target = violation.broken.invariant;
    let replay = |tape: &Tape| {
        let outcome = replay(tape, false);
        (outcome.violation)
            .filter(|violation| violation.broken.invariant == target)
            .map(|violation| Replayed {
                violation,
                tape: outcome.tape,
                idle: outcome.idle_steps,
            })
    };
    shrink_with(replay, violation, tape)
}

fn shrink_with<R: FnMut(&Tape) -> Option<Replayed>>(
    replay: R,
    violation: &Violation,
    tape: &Tape,
) -> Shrunk {
    let mut shrinker = Shrinker {
        replay,
        best: Shrunk {
            violation: violation.clone(),
            tape: tape.clone(),
            tries: 0,
        },
        idle: Vec::new(),
    };
    // The tape cut after the step that broke (what followed is not needed), and without the
    // steps that did nothing.
    let cut = usize::try_from(violation.step).unwrap_or(usize::MAX);
    shrinker.attempt(shrinker.with_steps(tape.steps.iter().take(cut).cloned().collect()));
    without_fault_kinds(&mut shrinker);
    fewer_executions(&mut shrinker);
    fewer_steps(&mut shrinker);
    merged_advances(&mut shrinker);
    fewer_decisions(&mut shrinker);
    // For the reader: the fault kinds left on the tape.
    let tape = &mut shrinker.best.tape;
    tape.faults = FaultKind::ALL
        .into_iter()
        .filter(|kind| !tape.steps.iter().any(|step| has(step, *kind)))
        .fold(FaultSet::ALL, FaultSet::without);
    shrinker.best
}

/// True when `step` injects a fault of `kind`.
fn has(step: &StepRecord, kind: FaultKind) -> bool {
    step.action.fault() == Some(kind) || step.decisions.iter().any(|d| d.fault() == Some(kind))
}

/// Each fault kind that is not needed goes (its actions become idle steps).
fn without_fault_kinds<R: FnMut(&Tape) -> Option<Replayed>>(shrinker: &mut Shrinker<R>) {
    for kind in FaultKind::ALL {
        let tape = &shrinker.best.tape;
        if !tape.steps.iter().any(|step| has(step, kind)) {
            continue;
        }
        let steps = (tape.steps.iter())
            .map(|step| StepRecord {
                action: if step.action.fault() == Some(kind) {
                    Action::Idle
                } else {
                    step.action.clone()
                },
                decisions: (step.decisions.iter().copied())
                    .filter(|d| d.fault() != Some(kind))
                    .collect(),
            })
            .collect();
        let mut candidate = shrinker.with_steps(steps);
        candidate.faults = candidate.faults.without(kind);
        shrinker.attempt(candidate);
    }
}

/// Fewer executions: the last one's submission goes, while the invariant still breaks.
fn fewer_executions<R: FnMut(&Tape) -> Option<Replayed>>(shrinker: &mut Shrinker<R>) {
    while shrinker.best.tape.executions > 1 && !shrinker.out_of_tries() {
        let last = shrinker.best.tape.executions;
        let steps = (shrinker.best.tape.steps.iter())
            .filter(|step| step.action != Action::Submit(last))
            .cloned()
            .collect();
        let mut candidate = shrinker.with_steps(steps);
        candidate.executions = last - 1;
        if !shrinker.attempt(candidate) {
            break;
        }
    }
}

/// Delta debugging over the steps: removes one of `n` ranges at a time, `n` from 2 up to one
/// step per range, going back to coarser ranges after each success.
fn fewer_steps<R: FnMut(&Tape) -> Option<Replayed>>(shrinker: &mut Shrinker<R>) {
    let mut ranges = 2;
    loop {
        let len = shrinker.best.tape.steps.len();
        if len == 0 || shrinker.out_of_tries() {
            return;
        }
        let ranges_now = ranges.min(len);
        let size = len.div_ceil(ranges_now);
        let mut removed = false;
        for start in (0..len).step_by(size).collect::<Vec<_>>().into_iter().rev() {
            let steps = &shrinker.best.tape.steps;
            if start >= steps.len() {
                continue;
            }
            let end = (start + size).min(steps.len());
            let kept: Vec<StepRecord> = steps[..start]
                .iter()
                .chain(&steps[end..])
                .cloned()
                .collect();
            if shrinker.attempt(shrinker.with_steps(kept)) {
                removed = true;
            }
            if shrinker.out_of_tries() {
                return;
            }
        }
        if removed {
            ranges = (ranges / 2).max(2);
        } else if ranges_now >= len {
            return;
        } else {
            ranges = (ranges * 2).min(len);
        }
    }
}

/// Each run of clock moves with nothing between them as one move.
fn merged_advances<R: FnMut(&Tape) -> Option<Replayed>>(shrinker: &mut Shrinker<R>) {
    let mut steps: Vec<StepRecord> = Vec::new();
    for step in &shrinker.best.tape.steps {
        match (steps.last_mut(), &step.action) {
            (Some(last), Action::Advance(by)) if step.decisions.is_empty() => {
                if let Action::Advance(sum) = &mut last.action
                    && last.decisions.is_empty()
                {
                    *sum += *by;
                    continue;
                }
                steps.push(step.clone());
            }
            _ => steps.push(step.clone()),
        }
    }
    if steps.len() < shrinker.best.tape.steps.len() {
        shrinker.attempt(shrinker.with_steps(steps));
    }
}

/// Each fault and worker behaviour on its own: removed (the decision then passes, or the run
/// returns at once), while the invariant still breaks.
fn fewer_decisions<R: FnMut(&Tape) -> Option<Replayed>>(shrinker: &mut Shrinker<R>) {
    let mut step = shrinker.best.tape.steps.len();
    while step > 0 && !shrinker.out_of_tries() {
        step -= 1;
        let mut decision = shrinker
            .best
            .tape
            .steps
            .get(step)
            .map_or(0, |s| s.decisions.len());
        while decision > 0 && !shrinker.out_of_tries() {
            decision -= 1;
            let mut steps = shrinker.best.tape.steps.clone();
            let Some(record) = steps.get_mut(step) else {
                break;
            };
            if decision >= record.decisions.len() {
                continue;
            }
            record.decisions.remove(decision);
            shrinker.attempt(shrinker.with_steps(steps));
        }
    }
}

#[cfg(test)]
mod tests;
