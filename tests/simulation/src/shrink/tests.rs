//! The shrinker on a made-up failure, whose cause is known: it must find exactly that cause.

use super::{Replayed, shrink_with};
use crate::{
    Config, Invariant, Rng,
    faults::FaultSet,
    invariants::Broken,
    tape::{Action, Decision, StepRecord, Tape, WaitFault, WriteFault},
    world::Violation,
};
use std::time::Duration;

fn step(action: Action, decisions: Vec<Decision>) -> StepRecord {
    StepRecord { action, decisions }
}

const REFUSED: Decision = Decision::Write {
    ordinal: 0,
    fault: WriteFault::Refused,
};

/// Breaks once the tape has polled `a`, then polled `b` with its first write refused (in
/// that order, whatever lies between), at the step of `b`; what follows is cut, as a replay
/// cuts it.
fn made_up(tape: &Tape) -> Option<Replayed> {
    let a = tape
        .steps
        .iter()
        .position(|s| s.action == Action::Poll("a".into()))?;
    let b = (tape.steps.iter().enumerate().skip(a + 1))
        .find(|(_, s)| s.action == Action::Poll("b".into()) && s.decisions.contains(&REFUSED))?
        .0;
    let steps = tape.steps[..=b].to_vec();
    Some(Replayed {
        violation: Violation {
            config: Config::new(tape.seed),
            step: b as u64 + 1,
            broken: Broken {
                invariant: Invariant::Liveness,
                detail: "made up".into(),
            },
        },
        tape: Tape {
            steps,
            ..tape.clone()
        },
        idle: Vec::new(),
    })
}

#[test]
fn a_made_up_failure_shrinks_to_its_two_steps_and_its_one_fault() {
    let mut rng = Rng::new(7, 0);
    let noise = |rng: &mut Rng| {
        let action = match rng.below(6) {
            0 => Action::Advance(Duration::from_millis(1 + rng.below(300))),
            1 => Action::Submit(1 + u32::try_from(rng.below(5)).unwrap_or(0)),
            2 => Action::KillNode(rng.index(2)),
            3 => Action::JumpClock(Duration::from_secs(2)),
            _ => Action::Poll(format!("x{}", rng.below(9))),
        };
        let decisions = if rng.chance(300) {
            vec![Decision::Wait {
                ordinal: 0,
                fault: WaitFault::Lost,
            }]
        } else {
            Vec::new()
        };
        step(action, decisions)
    };
    let mut steps: Vec<StepRecord> = (0..120).map(|_| noise(&mut rng)).collect();
    steps.insert(40, step(Action::Poll("a".into()), vec![REFUSED]));
    steps.insert(90, step(Action::Poll("b".into()), Vec::new()));
    steps.insert(100, step(Action::Poll("b".into()), vec![REFUSED, REFUSED]));
    steps.extend((0..60).map(|_| noise(&mut rng)));
    let tape = Tape {
        seed: 7,
        executions: 5,
        faults: FaultSet::ALL,
        steps,
    };
    let first = made_up(&tape).expect("the made-up failure breaks");
    let shrunk = shrink_with(made_up, &first.violation, &tape);
    assert_eq!(
        shrunk.tape.steps,
        vec![
            step(Action::Poll("a".into()), Vec::new()),
            step(Action::Poll("b".into()), vec![REFUSED]),
        ],
        "after {} replays",
        shrunk.tries
    );
    assert_eq!(shrunk.tape.executions, 1);
    assert_eq!(shrunk.violation.step, 2);
    assert_eq!(shrunk.tape.faults.to_string(), "write-refused");
}
