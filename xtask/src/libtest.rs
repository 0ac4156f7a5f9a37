//! Reading the stdout of a libtest harness run with `--show-output`: each test's outcome and
//! its captured output.

use std::collections::BTreeMap;

/// The outcome libtest printed for one test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// `test <name> ... ok`.
    Passed,
    /// `test <name> ... FAILED`.
    Failed,
    /// `test <name> ... ignored` (with or without a reason).
    Ignored,
}

/// What one run of a test binary printed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TestRun {
    /// Outcome by full test name (module path included).
    pub outcomes: BTreeMap<String, Outcome>,
    /// Captured output by full test name, for the tests whose output libtest showed.
    pub outputs: BTreeMap<String, String>,
    /// Whether the closing `test result:` line was printed, that is the binary ran to the end.
    pub finished: bool,
}

impl TestRun {
    /// The reason of the first line `SKIPPED: <reason>` in the captured output of `test`.
    pub fn skip_reason(&self, test: &str) -> Option<&str> {
        self.outputs
            .get(test)?
            .lines()
            .find_map(|line| line.trim_start().strip_prefix("SKIPPED:").map(str::trim))
    }
}

/// Parses the stdout of `cargo test ... -- --show-output`.
///
/// Outcome lines are `test <name> ... <status>`; captured output sits between a header
/// `---- <name> stdout ----` and the next header or the `successes:` / `failures:` list that
/// closes the section.
pub fn parse(stdout: &str) -> TestRun {
    let mut run = TestRun::default();
    let mut section: Option<(String, Vec<&str>)> = None;
    for line in stdout.lines() {
        if let Some(name) = section_header(line) {
            close_section(&mut run, section.take());
            section = Some((name.to_owned(), Vec::new()));
            continue;
        }
        if let Some((_, lines)) = section.as_mut() {
            if line == "successes:" || line == "failures:" {
                close_section(&mut run, section.take());
            } else {
                lines.push(line);
            }
            continue;
        }
        if line.starts_with("test result: ") {
            run.finished = true;
        } else if let Some((name, outcome)) = outcome_line(line) {
            run.outcomes.insert(name.to_owned(), outcome);
        }
    }
    close_section(&mut run, section);
    run
}

fn section_header(line: &str) -> Option<&str> {
    line.strip_prefix("---- ")?.strip_suffix(" stdout ----")
}

fn close_section(run: &mut TestRun, section: Option<(String, Vec<&str>)>) {
    if let Some((name, mut lines)) = section {
        while lines.last().is_some_and(|line| line.trim().is_empty()) {
            lines.pop();
        }
        run.outputs.insert(name, lines.join("\n"));
    }
}

fn outcome_line(line: &str) -> Option<(&str, Outcome)> {
    let (name, status) = line.strip_prefix("test ")?.rsplit_once(" ... ")?;
    let outcome = match status.trim_end() {
        "ok" => Outcome::Passed,
        "FAILED" => Outcome::Failed,
        status if status.starts_with("ignored") => Outcome::Ignored,
        _ => return None,
    };
    Some((name, outcome))
}

#[cfg(test)]
mod tests;
