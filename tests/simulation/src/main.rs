//! `simulate`: runs seeds of the deterministic simulation and prints their figures; a failing
//! seed is printed, shrunk, and its shrunk schedule printed. Run by `cargo xtask simulate`.
#![expect(
    clippy::print_stdout,
    reason = "the figures and the failing schedules are this binary's output"
)]

use simulation::{Config, FaultKind, FaultSet, Outcome, Violation, run, shrink};
use std::process::ExitCode;

const USAGE: &str = "\
usage: simulate [--seeds N] [--seed S] [--steps K] [--executions E] [--faults LIST] [--schedule]

  --seeds N        how many seeds to run (default 1), S, S+1, ..., S+N-1
  --seed S         the first seed (default 1; STELE_SEED=S runs that one seed alone)
  --steps K        steps with faults per seed (default 300); then faults stop
  --executions E   top-level executions per seed (default 5)
  --faults LIST    the faults to inject: all (default), none, or a comma-separated list of
                   write-refused, ambiguous-commit, lost-notification, late-notification,
                   worker-panic, worker-hang, worker-late, executor-killed, clock-jump
  --schedule       print each seed's schedule, step by step";

struct Args {
    seeds: u64,
    first: u64,
    template: Config,
    schedule: bool,
}

fn parse() -> Result<Args, String> {
    let mut args = Args {
        seeds: 1,
        first: 1,
        template: Config::new(1),
        schedule: false,
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
    executions: u64,
    schedule_fires: u64,
    violations: u64,
}

impl Figures {
    fn add(&mut self, outcome: &Outcome) {
        self.seeds += 1;
        self.steps += outcome.steps;
        for (total, count) in self.injected.iter_mut().zip(outcome.injected) {
            *total += count;
        }
        self.executions += outcome.executions;
        self.schedule_fires += outcome.schedule_fires;
        self.violations += u64::from(outcome.violation.is_some());
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
        println!("  executions       {} (children included)", self.executions);
        println!(
            "  schedule fires   {} (each tick once)",
            self.schedule_fires
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
    for seed in args.first..args.first.saturating_add(args.seeds) {
        let config = Config {
            seed,
            ..args.template
        };
        let outcome = run(&config, args.schedule);
        figures.add(&outcome);
        for line in &outcome.schedule {
            println!("  {line}");
        }
        if args.seeds == 1 {
            println!("seed {seed}: fingerprint {:016x}", outcome.fingerprint);
        }
        if let Some(violation) = outcome.violation {
            report(&violation);
            first_failure.get_or_insert(violation);
        }
    }
    if let Some(violation) = first_failure {
        let (shrunk, tries) = shrink(&violation);
        let schedule = run(&shrunk.config, true).schedule;
        println!(
            "shrunk in {tries} runs to {} faulty steps, faults {}, {} executions: {} at step {}",
            shrunk.config.steps,
            shrunk.config.faults,
            shrunk.config.executions,
            shrunk.broken.invariant,
            shrunk.step
        );
        println!("  replay: {}", shrunk.config.replay_command());
        println!("shrunk schedule ({} steps recorded):", schedule.len());
        for line in &schedule {
            println!("  {line}");
        }
    }
    figures.print();
    if figures.violations == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
