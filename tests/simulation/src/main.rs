//! `simulate`: runs seeds of the deterministic simulation (or replays a tape) and prints their
//! figures; a failing run is printed and shrunk, its shrunk schedule printed and its shrunk
//! tape written to a file that `--replay` replays. Run by `cargo xtask simulate`.
#![expect(
    clippy::print_stdout,
    reason = "the figures and the failing schedules are this binary's output"
)]

use simulation::{Config, FaultKind, FaultSet, Outcome, Tape, Violation, replay, run, shrink};
use std::{path::PathBuf, process::ExitCode};

const USAGE: &str = "\
usage: simulate [--seeds N] [--seed S] [--steps K] [--executions E] [--faults LIST] [--schedule]
       simulate --replay FILE [--schedule]

  --seeds N        how many seeds to run (default 1), S, S+1, ..., S+N-1
  --seed S         the first seed (default 1; STELE_SEED=S runs that one seed alone)
  --steps K        steps with faults per seed (default 300); then faults stop
  --executions E   top-level executions per seed (default 5)
  --faults LIST    the faults to inject: all (default), none, or a comma-separated list of
                   write-refused, ambiguous-commit, lost-notification, late-notification,
                   worker-panic, worker-hang, worker-late, node-killed, watcher-killed,
                   pruner-killed, clock-jump
  --schedule       print each seed's schedule, step by step
  --replay FILE    replay the tape in FILE (a failing run's shrunk tape is written to
                   target/simulation/seed-S.tape)";

struct Args {
    seeds: u64,
    first: u64,
    template: Config,
    schedule: bool,
    replay: Option<PathBuf>,
}

fn parse() -> Result<Args, String> {
    let mut args = Args {
        seeds: 1,
        first: 1,
        template: Config::new(1),
        schedule: false,
        replay: None,
    };
    let mut given = std::env::args().skip(1);
    while let Some(flag) = given.next() {
        let mut value = || given.next().ok_or_else(|| format!("{flag} needs a value"));
        let number = |text: String| {
            text.parse::<u64>()
                .map_err(|_| format!("{flag} {text}: not a non-negative integer"))
        };
        match flag.as_str() {
            "--seeds" => args.seeds = number(value()?)?,
            "--seed" => args.first = number(value()?)?,
            "--steps" => args.template.steps = number(value()?)?,
            "--executions" => {
                let text = value()?;
                args.template.executions = text
                    .parse()
                    .map_err(|_| format!("--executions {text}: not a 32-bit integer"))?;
            }
            "--faults" => args.template.faults = FaultSet::parse(&value()?)?,
            "--schedule" => args.schedule = true,
            "--replay" => args.replay = Some(PathBuf::from(value()?)),
            "--help" | "-h" => return Err(String::new()),
            other => return Err(format!("unexpected argument `{other}`")),
        }
    }
    if let Ok(seed) = std::env::var(test_utils::SEED_ENV) {
        args.first = seed
            .trim()
            .parse()
            .map_err(|_| format!("{}={seed}: not a seed", test_utils::SEED_ENV))?;
        args.seeds = 1;
    }
    Ok(args)
}

#[derive(Default)]
struct Figures {
    seeds: u64,
    steps: u64,
    injected: [u64; FaultKind::ALL.len()],
    counts: Vec<simulation::Counts>,
    violations: u64,
}

impl Figures {
    fn add(&mut self, outcome: &Outcome) {
        self.seeds += 1;
        self.steps += outcome.steps;
        for (total, count) in self.injected.iter_mut().zip(outcome.injected) {
            *total += count;
        }
        self.counts.push(outcome.counts);
        self.violations += u64::from(outcome.violation.is_some());
    }

    fn sum(&self, count: impl Fn(&simulation::Counts) -> u64) -> u64 {
        self.counts.iter().map(count).sum()
    }

    fn print(&self) {
        let faults: u64 = self.injected.iter().sum();
        println!("simulation figures:");
        println!("  seeds run        {}", self.seeds);
        println!("  steps            {}", self.steps);
        println!("  faults injected  {faults}");
        for (kind, count) in FaultKind::ALL.iter().zip(self.injected) {
            println!("    {:<18} {count}", kind.name());
        }
        println!(
            "  executions       {} (children, fired and pruned ones included)",
            self.sum(|c| c.seen.executions)
        );
        println!(
            "  schedule         {} fired (each tick once), {} missed (each explained), every \
             tick handled",
            self.sum(|c| c.schedule_fires),
            self.sum(|c| c.schedule_missed)
        );
        println!(
            "  promises         {} completed, {} repeats accepted, {} other values refused",
            self.sum(|c| c.completions[0]),
            self.sum(|c| c.completions[1]),
            self.sum(|c| c.completions[2])
        );
        println!(
            "  cancellations    {} trees with children in flight, {} executions cancelled",
            self.sum(|c| c.trees_cancelled),
            self.sum(|c| c.cancelled)
        );
        println!(
            "  pruned           {} trees, {} executions ({} acknowledged writes retired); {} \
             trees past retention held back by an unfinished member",
            self.sum(|c| c.seen.pruned_trees),
            self.sum(|c| c.seen.pruned),
            self.sum(|c| c.seen.retired_acks),
            self.sum(|c| c.seen.held_back)
        );
        println!("  violations       {}", self.violations);
    }
}

fn report(violation: &Violation) {
    println!(
        "VIOLATION seed {} at step {}: {}\n  {}\n  replay: {}",
        violation.config.seed,
        violation.step,
        violation.broken.invariant,
        violation.broken.detail,
        violation.config.replay_command()
    );
}

fn main() -> ExitCode {
    let args = match parse() {
        Ok(args) => args,
        Err(err) => {
            if !err.is_empty() {
                eprintln!("simulate: {err}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    simulation::quiet_simulated_panics();
    let mut figures = Figures::default();
    let mut first_failure = None;
    let mut one = |outcome: Outcome, figures: &mut Figures| {
        figures.add(&outcome);
        for line in &outcome.schedule {
            println!("  {line}");
        }
        if let Some(violation) = &outcome.violation {
            report(violation);
        }
        if first_failure.is_none()
            && let Some(violation) = outcome.violation
        {
            first_failure = Some((violation, outcome.tape));
        }
        outcome.fingerprint
    };
    if let Some(path) = &args.replay {
        let tape = match std::fs::read_to_string(path)
            .map_err(|err| err.to_string())
            .and_then(|text| Tape::parse(&text))
        {
            Ok(tape) => tape,
            Err(err) => {
                eprintln!("simulate: cannot replay {}: {err}", path.display());
                return ExitCode::from(2);
            }
        };
        let fingerprint = one(replay(&tape, args.schedule), &mut figures);
        println!(
            "tape {} (seed {}, {} steps): fingerprint {fingerprint:016x}",
            path.display(),
            tape.seed,
            tape.steps.len()
        );
    }
    for seed in args.first..args.first.saturating_add(args.seeds) {
        if args.replay.is_some() {
            break;
        }
        let config = Config {
            seed,
            ..args.template
        };
        let fingerprint = one(run(&config, args.schedule), &mut figures);
        if args.seeds == 1 {
            println!("seed {seed}: fingerprint {fingerprint:016x}");
        }
    }
    if let Some((violation, tape)) = first_failure {
        shrink_and_save(&violation, &tape);
    }
    figures.print();
    if figures.violations == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Shrinks a failing run, prints its shrunk schedule and writes its shrunk tape to
/// `target/simulation/seed-S.tape`.
fn shrink_and_save(violation: &Violation, tape: &Tape) {
    let shrunk = shrink(violation, tape);
    let schedule = replay(&shrunk.tape, true).schedule;
    println!(
        "shrunk in {} replays from {} steps ({} choices) to {} steps ({} choices), {} \
         executions: {} at step {}",
        shrunk.tries,
        tape.steps.len(),
        tape.choices(),
        shrunk.tape.steps.len(),
        shrunk.tape.choices(),
        shrunk.tape.executions,
        shrunk.violation.broken.invariant,
        shrunk.violation.step
    );
    println!("  {}", shrunk.violation.broken.detail);
    println!("shrunk tape:");
    for line in shrunk
        .tape
        .to_text()
        .lines()
        .filter(|l| !l.starts_with('#'))
    {
        println!("  {line}");
    }
    let dir = PathBuf::from("target").join("simulation");
    let path = dir.join(format!("seed-{}.tape", tape.seed));
    let written = std::fs::create_dir_all(&dir)
        .and_then(|()| std::fs::write(&path, shrunk.tape.to_text()))
        .and_then(|()| std::path::absolute(&path));
    match written {
        Ok(path) => println!("  replay: cargo xtask simulate --replay {}", path.display()),
        Err(err) => println!("  (cannot write the tape to {}: {err})", path.display()),
    }
    // The faulty steps; of the calm ones (each polls every task), what is not a poll, and the
    // polls of the last step.
    let calm = schedule
        .iter()
        .position(|line| line.ends_with(" faults stop"))
        .unwrap_or(schedule.len());
    let last_step = schedule.last().and_then(|line| line.get(..5));
    println!("shrunk schedule (the polls of the calm steps left out, but the last step's):");
    for (n, line) in schedule.iter().enumerate() {
        let poll = line.get(6..).is_some_and(|what| what.starts_with("poll "));
        if n <= calm || !poll || last_step == line.get(..5) {
            println!("  {line}");
        }
    }
}
