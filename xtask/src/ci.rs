//! `cargo xtask ci`: every check CI runs, in order, stopping at the first failure.

use anyhow::{Context, bail};
use std::{
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

/// The integration-test binaries that the conformance step runs; the test step leaves them out
/// so that the suite does not run twice.
const NOT_CONFORMANCE: &str = "not (package(storage-*) & kind(test) & binary(conformance))";

/// The program's optional OpenTelemetry, built and tested with everything else (one build);
/// `cargo xtask deps` checks that the default build has none of it.
const OTEL: &str = "cli/otel";

/// What a step does.
enum Action {
    /// `cargo <args>` with extra environment variables.
    Cargo {
        args: &'static [&'static str],
        env: &'static [(&'static str, &'static str)],
    },
    /// The dependency-edge checks of `cargo xtask deps`.
    Deps,
    /// The conformance suite of `cargo xtask conformance`.
    Conformance,
    /// `cargo xtask simulate --seeds <seeds>`: the CI-sized run of the simulation.
    Simulate { seeds: &'static str },
}

/// One named step of the CI run.
struct Step {
    name: &'static str,
    action: Action,
}

const STEPS: &[Step] = &[
    Step {
        name: "fmt",
        action: Action::Cargo {
            args: &["fmt", "--all", "--check"],
            env: &[],
        },
    },
    Step {
        name: "clippy",
        action: Action::Cargo {
            args: &[
                "clippy",
                "--workspace",
                "--all-targets",
                "--features",
                OTEL,
                "--",
                "-D",
                "warnings",
            ],
            env: &[],
        },
    },
    Step {
        name: "tests",
        action: Action::Cargo {
            args: &[
                "nextest",
                "run",
                "--workspace",
                "--features",
                OTEL,
                "-E",
                NOT_CONFORMANCE,
            ],
            env: &[],
        },
    },
    Step {
        name: "doc tests",
        action: Action::Cargo {
            args: &["test", "--doc", "--workspace", "--features", OTEL],
            env: &[],
        },
    },
    Step {
        name: "docs",
        action: Action::Cargo {
            args: &["doc", "--no-deps", "--workspace", "--features", OTEL],
            env: &[("RUSTDOCFLAGS", "-D warnings")],
        },
    },
    Step {
        name: "dependency edges",
        action: Action::Deps,
    },
    Step {
        name: "conformance",
        action: Action::Conformance,
    },
    Step {
        name: "simulation",
        // About 15 s in the dev profile on two cores; `--seeds 10000` is the long run.
        action: Action::Simulate { seeds: "500" },
    },
];

/// Runs every step; the error names the step that failed.
pub fn run(root: &Path) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut timings: Vec<(&str, Duration)> = Vec::new();
    for (idx, step) in STEPS.iter().enumerate() {
        println!(
            "\n==> [{}/{}] {}: {}",
            idx + 1,
            STEPS.len(),
            step.name,
            describe(&step.action)
        );
        let step_started = Instant::now();
        let outcome = run_action(root, &step.action);
        let elapsed = step_started.elapsed();
        timings.push((step.name, elapsed));
        match outcome {
            Ok(()) => println!("<== {} ok in {}", step.name, seconds(elapsed)),
            Err(err) => {
                print_timings(&timings, started.elapsed());
                return Err(err.context(format!(
                    "CI step `{}` failed; rerun it alone with `{}`",
                    step.name,
                    describe(&step.action)
                )));
            }
        }
    }
    print_timings(&timings, started.elapsed());
    println!("xtask ci: all {} steps passed", STEPS.len());
    Ok(())
}

fn run_action(root: &Path, action: &Action) -> anyhow::Result<()> {
    match action {
        Action::Cargo { args, env } => {
            let mut command = Command::new("cargo");
            command.args(*args).current_dir(root);
            for (key, value) in *env {
                command.env(key, value);
            }
            let status = command
                .status()
                .with_context(|| format!("could not start `{}`", describe(action)))?;
            if !status.success() {
                bail!("the command exited with {status}");
            }
            Ok(())
        }
        Action::Deps => crate::deps::run(root),
        Action::Conformance => crate::conformance::run(root),
        Action::Simulate { seeds } => {
            crate::simulate(root, &["--seeds".to_owned(), (*seeds).to_owned()])
        }
    }
}

/// The command line a person would type to run the step alone.
fn describe(action: &Action) -> String {
    match action {
        Action::Cargo { args, env } => {
            let mut line = String::new();
            for (key, value) in *env {
                line.push_str(&format!("{key}='{value}' "));
            }
            line.push_str("cargo");
            for arg in *args {
                if arg.contains(' ') {
                    line.push_str(&format!(" '{arg}'"));
                } else {
                    line.push(' ');
                    line.push_str(arg);
                }
            }
            line
        }
        Action::Deps => "cargo xtask deps".to_owned(),
        Action::Conformance => "cargo xtask conformance".to_owned(),
        Action::Simulate { seeds } => format!("cargo xtask simulate --seeds {seeds}"),
    }
}

fn print_timings(timings: &[(&str, Duration)], total: Duration) {
    println!("\nxtask ci timings:");
    for (name, elapsed) in timings {
        println!("  {name:<18} {:>9}", seconds(*elapsed));
    }
    println!("  {:<18} {:>9}", "total", seconds(total));
}

fn seconds(duration: Duration) -> String {
    format!("{:.1} s", duration.as_secs_f64())
}

#[cfg(test)]
mod tests;
