//! `cargo xtask conformance`: runs the conformance suite of every backend and prints one table,
//! a row per scenario and a column per backend, so that a skipped or missing scenario shows.
//!
//! A backend is a crate `crates/storage-*` with a `tests/conformance.rs`. A scenario that a
//! backend cannot run passes after printing `SKIPPED: <reason>`; the reasons are listed under
//! the table.

use crate::libtest::{self, Outcome, TestRun};
use anyhow::{Context, bail};
use std::{
    cmp::Ordering,
    fmt::Write as _,
    path::Path,
    process::{Command, Stdio},
};

/// Discovers the backends, runs each one's conformance binary and prints the table.
pub fn run(root: &Path) -> anyhow::Result<()> {
    let backends = discover(root)?;
    if backends.is_empty() {
        bail!("no backend found: no crates/storage-*/tests/conformance.rs");
    }
    let mut runs = Vec::new();
    let mut broken = Vec::new();
    for package in &backends {
        let args = [
            "test",
            "-p",
            package,
            "--test",
            "conformance",
            "--",
            "--show-output",
        ];
        println!("==> cargo {}", args.join(" "));
        // Build progress and the harness's stderr go straight to the terminal; stdout is read.
        let output = Command::new("cargo")
            .args(args)
            .current_dir(root)
            .stderr(Stdio::inherit())
            .output()
            .with_context(|| format!("could not start `cargo test -p {package}`"))?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        let run = libtest::parse(&stdout);
        let failed = run.outcomes.values().any(|o| *o == Outcome::Failed);
        if !run.finished || (!output.status.success() && !failed) {
            broken.push(format!(
                "{package}: the conformance binary did not build or did not run to the end ({})",
                output.status
            ));
            println!("{}", tail(&stdout, 40));
        }
        runs.push(BackendRun {
            backend: backend_name(package).to_owned(),
            run,
        });
    }

    let table = Table::new(&runs);
    print_failures(&runs);
    println!("\n{}", table.render());
    let counts = table.counts();
    for problem in &broken {
        println!("{problem}");
    }
    println!(
        "conformance: {} passed, {} failed, {} skipped",
        counts.passed, counts.failed, counts.skipped
    );
    if counts.failed > 0 || !broken.is_empty() {
        bail!(
            "{} failed scenario run(s), {} broken backend(s)",
            counts.failed,
            broken.len()
        );
    }
    if table.rows.is_empty() {
        bail!("the conformance binaries ran no scenario");
    }
    Ok(())
}

/// The package names of the backends that have a conformance test, sorted.
fn discover(root: &Path) -> anyhow::Result<Vec<String>> {
    let crates = root.join("crates");
    let mut backends = Vec::new();
    for entry in std::fs::read_dir(&crates)
        .with_context(|| format!("could not list {}", crates.display()))?
    {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        // Folder name == package name, by the workspace's layout rule.
        if name.starts_with("storage-") && entry.path().join("tests/conformance.rs").is_file() {
            backends.push(name);
        }
    }
    backends.sort();
    Ok(backends)
}

/// The column title of a backend crate: `storage-sqlite` is `sqlite`.
fn backend_name(package: &str) -> &str {
    package.strip_prefix("storage-").unwrap_or(package)
}

/// The last 'lines' lines of `text`.
fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

fn print_failures(runs: &[BackendRun]) {
    for backend_run in runs {
        for (test, outcome) in &backend_run.run.outcomes {
            if *outcome == Outcome::Failed {
                println!("\n---- {} {test} (FAILED) ----", backend_run.backend);
                if let Some(output) = backend_run.run.outputs.get(test) {
                    println!("{output}");
                }
            }
        }
    }
}

/// One backend's column: its name and what its conformance binary printed.
#[derive(Debug)]
pub struct BackendRun {
    /// Column title.
    pub backend: String,
    /// The parsed run.
    pub run: TestRun,
}

/// One cell of the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cell {
    /// The scenario passed.
    Pass,
    /// The scenario failed.
    Fail,
    /// The scenario passed after printing `SKIPPED: <reason>` (or was `#[ignore]`d).
    Skip(String),
    /// The backend has no test of that name.
    Missing,
}

impl Cell {
    fn label(&self) -> &'static str {
        match self {
            Self::Pass => "pass",
            Self::Fail => "FAIL",
            Self::Skip(_) => "skip",
            Self::Missing => "-",
        }
    }
}

/// Scenarios by backend.
#[derive(Debug, PartialEq, Eq)]
pub struct Table {
    /// Column titles.
    pub backends: Vec<String>,
    /// Scenario name and one cell per backend, in natural scenario order.
    pub rows: Vec<(String, Vec<Cell>)>,
}

/// How many cells are in each state.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Cells `pass`.
    pub passed: usize,
    /// Cells `FAIL`.
    pub failed: usize,
    /// Cells `skip`.
    pub skipped: usize,
}

impl Table {
    /// The union of the scenarios of every run; a test's scenario is the last segment of its
    /// path, so a backend may wrap the suite in a module.
    pub fn new(runs: &[BackendRun]) -> Self {
        let mut scenarios: Vec<String> = runs
            .iter()
            .flat_map(|backend_run| backend_run.run.outcomes.keys())
            .map(|test| scenario_of(test).to_owned())
            .collect();
        scenarios.sort_by(|a, b| scenario_order(a, b));
        scenarios.dedup();
        let rows = scenarios
            .into_iter()
            .map(|scenario| {
                let cells = runs
                    .iter()
                    .map(|backend_run| cell(&backend_run.run, &scenario))
                    .collect();
                (scenario, cells)
            })
            .collect();
        Self {
            backends: runs.iter().map(|r| r.backend.clone()).collect(),
            rows,
        }
    }

    /// Counts of passed, failed and skipped cells.
    pub fn counts(&self) -> Counts {
        let mut counts = Counts::default();
        for cell in self.rows.iter().flat_map(|(_, cells)| cells) {
            match cell {
                Cell::Pass => counts.passed += 1,
                Cell::Fail => counts.failed += 1,
                Cell::Skip(_) => counts.skipped += 1,
                Cell::Missing => {}
            }
        }
        counts
    }

    /// The table as aligned text, with the skip reasons under it.
    pub fn render(&self) -> String {
        let first_width = self
            .rows
            .iter()
            .map(|(scenario, _)| scenario.len())
            .chain(["scenario".len()])
            .max()
            .unwrap_or_default();
        let widths: Vec<usize> = self
            .backends
            .iter()
            .map(|backend| backend.len().max("pass".len()))
            .collect();
        let mut out = String::new();
        let mut line = format!("{:<first_width$}", "scenario");
        for (backend, width) in self.backends.iter().zip(&widths) {
            let _ = write!(line, "  {backend:<width$}");
        }
        out.push_str(line.trim_end());
        out.push('\n');
        for (scenario, cells) in &self.rows {
            let mut line = format!("{scenario:<first_width$}");
            for (cell, width) in cells.iter().zip(&widths) {
                let _ = write!(line, "  {:<width$}", cell.label());
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        let skips = self.skip_notes();
        if !skips.is_empty() {
            out.push_str("skipped:\n");
            for skip in skips {
                out.push_str("  ");
                out.push_str(&skip);
                out.push('\n');
            }
        }
        out
    }

    /// One line per backend and skip reason: a backend that skips everything for one reason
    /// (a missing server, say) takes one line, not one per scenario.
    fn skip_notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        for (column, backend) in self.backends.iter().enumerate() {
            let mut reasons: Vec<(&str, Vec<&str>)> = Vec::new();
            let mut present = 0;
            for (scenario, cells) in &self.rows {
                match &cells[column] {
                    Cell::Skip(reason) => {
                        match reasons.iter_mut().find(|(known, _)| known == reason) {
                            Some((_, scenarios)) => scenarios.push(scenario),
                            None => reasons.push((reason, vec![scenario])),
                        }
                        present += 1;
                    }
                    Cell::Missing => {}
                    Cell::Pass | Cell::Fail => present += 1,
                }
            }
            for (reason, scenarios) in reasons {
                let which = match scenarios.as_slice() {
                    [one] => format!("{one} on {backend}"),
                    many if many.len() == present => {
                        format!("all {} scenarios on {backend}", many.len())
                    }
                    many => format!("{} on {backend}", many.join(", ")),
                };
                notes.push(format!("{which}: {reason}"));
            }
        }
        notes
    }
}

fn cell(run: &TestRun, scenario: &str) -> Cell {
    let Some((test, outcome)) = run
        .outcomes
        .iter()
        .find(|(test, _)| scenario_of(test) == scenario)
    else {
        return Cell::Missing;
    };
    match outcome {
        Outcome::Failed => Cell::Fail,
        Outcome::Ignored => {
            Cell::Skip("marked #[ignore], which this workspace does not allow".to_owned())
        }
        Outcome::Passed => match run.skip_reason(test) {
            Some(reason) => Cell::Skip(reason.to_owned()),
            None => Cell::Pass,
        },
    }
}

/// The scenario a test runs: the last segment of its path.
fn scenario_of(test: &str) -> &str {
    test.rsplit("::").next().unwrap_or(test)
}

/// Storage scenarios first, then executor, differential, persistence, workflow, lifecycle and
/// schedule ones, each group by number (`s2` before `s10`); names outside those groups come last,
/// alphabetically.
pub fn scenario_order(a: &str, b: &str) -> Ordering {
    scenario_key(a).cmp(&scenario_key(b)).then_with(|| a.cmp(b))
}

fn scenario_key(name: &str) -> (u8, u64) {
    let mut chars = name.chars();
    let group = match chars.next().map(|c| c.to_ascii_lowercase()) {
        Some('s') => 0,
        Some('e') => 1,
        Some('d') => 2,
        Some('p') => 3,
        Some('w') => 4,
        Some('l') => 5,
        Some('c') => 6,
        _ => return (7, 0),
    };
    let rest = chars.as_str();
    let digits_end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    match rest[..digits_end].parse::<u64>() {
        Ok(number) => (group, number),
        Err(_) => (7, 0),
    }
}

#[cfg(test)]
mod tests;
