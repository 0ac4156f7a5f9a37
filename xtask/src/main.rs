//! `cargo xtask`: the one entry point for the automation of the Stele workspace.
//!
//! `ci` runs everything `.ci/run` runs; `deps` checks the dependency edges that
//! `docs/ARCHITECTURE.md` forbids; `conformance` runs the conformance suite on every storage
//! backend and prints one table of scenarios by backend; `simulate` runs seeds of the
//! deterministic simulation (`tests/simulation`).
#![allow(
    clippy::print_stdout,
    reason = "printing progress, tables and verdicts for a person is the whole job of this binary"
)]

mod ci;
mod conformance;
mod deps;
mod libtest;
mod tidy;

use std::{
    path::{Path, PathBuf},
    process::ExitCode,
};

const USAGE: &str = "\
usage: cargo xtask <command>

commands:
  ci           everything CI checks, in order: fmt, clippy, tests (nextest), doc tests,
               docs, dependency edges, conformance suite; stops at the first failure
  deps         check the dependency edges that docs/ARCHITECTURE.md forbids
  conformance  run the conformance suite on every backend (crates/storage-*/tests/conformance.rs)
               and print a table of scenarios by backend
  bench [ARGS] build the benchmark in release mode and run it (crates/bench); `cargo xtask bench
               --help` lists its arguments
  simulate [--seeds N] [--seed S] [ARGS]
               run N seeds (from S) of the deterministic simulation (tests/simulation) and print
               its figures; a failing seed is printed, shrunk and replayed with STELE_SEED=<seed>;
               `cargo xtask simulate --help` lists its arguments";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let command = match args.as_slice() {
        [command] => command.as_str(),
        [command, rest @ ..] if command == "bench" => {
            return finish("bench", bench(&workspace_root(), rest));
        }
        [command, rest @ ..] if command == "simulate" => {
            return finish("simulate", simulate(&workspace_root(), rest));
        }
        [] => return usage(),
        [_, extra, ..] => {
            eprintln!("xtask: unexpected argument `{extra}`");
            return usage();
        }
    };
    let root = workspace_root();
    let outcome = match command {
        "ci" => ci::run(&root),
        "deps" => deps::run(&root),
        "conformance" => conformance::run(&root),
        "bench" => bench(&root, &[]),
        "simulate" => simulate(&root, &[]),
        "help" | "--help" | "-h" => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        unknown => {
            eprintln!("xtask: unknown command `{unknown}`");
            return usage();
        }
    };
    finish(command, outcome)
}

fn finish(command: &str, outcome: anyhow::Result<()>) -> ExitCode {
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("xtask {command}: error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn usage() -> ExitCode {
    eprintln!("{USAGE}");
    ExitCode::from(2)
}

/// The workspace root: the parent of this crate's folder, wherever cargo was started from.
///
/// `cargo run` sets `CARGO_MANIFEST_DIR` for the process; it is preferred to the value baked in
/// at compile time, which is stale when a build is reused from another checkout.
fn workspace_root() -> PathBuf {
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from);
    manifest_dir
        .parent()
        .map_or_else(|| manifest_dir.clone(), Path::to_path_buf)
}

/// Builds `crates/bench` in release mode and runs it with `args`.
fn bench(root: &Path, args: &[String]) -> anyhow::Result<()> {
    let status =
        std::process::Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .current_dir(root)
            .args([
                "run",
                "--release",
                "--package",
                "bench",
                "--bin",
                "stele-bench",
                "--",
            ])
            .args(args)
            .status()?;
    anyhow::ensure!(status.success(), "the benchmark failed ({status})");
    Ok(())
}

/// Builds `tests/simulation` (the dev profile, as the tests) and runs `simulate` with `args`.
pub fn simulate(root: &Path, args: &[String]) -> anyhow::Result<()> {
    let status =
        std::process::Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .current_dir(root)
            .args(["run", "--package", "simulation", "--bin", "simulate", "--"])
            .args(args)
            .status()?;
    anyhow::ensure!(
        status.success(),
        "the simulation failed ({status}); its output names the seed and how to replay it"
    );
    Ok(())
}
