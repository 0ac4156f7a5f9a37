//! The targets table: per backend, each measured figure beside the limit of the machine that
//! the same run measured, their ratio, and the target that ratio is held to.
//!
//! A measurement adds its rows with [`Targets::add`]; `bench` prints every backend's table at
//! the end, so one run of `cargo xtask bench` shows each target as met or missed by a ratio
//! taken in one sitting.

use std::{collections::BTreeMap, fmt::Write as _};

/// What a figure is held to.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Goal {
    /// value / limit ≥ the given ratio (a rate against the machine's rate).
    RatioAtLeast(f64),
    /// value / limit ≤ the given ratio (a latency against the machine's latency).
    RatioAtMost(f64),
    /// value ≤ the given absolute bound (in the figure's unit).
    AtMost(f64),
    /// value ≥ the given absolute bound (in the figure's unit: a rate the target names).
    AtLeast(f64),
    /// Reported only.
    Report,
}

/// The limit a figure is compared with, measured in the same run.
#[derive(Debug, Clone)]
pub(crate) struct Limit {
    /// What was measured, e.g. "single-row FULL INSERT transactions/s".
    pub(crate) name: String,
    /// Its value, in the figure's unit.
    pub(crate) value: f64,
}

/// One row of a backend's table.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    /// What was measured, e.g. "end to end, executions/s".
    pub(crate) figure: String,
    /// The measured value.
    pub(crate) value: f64,
    /// The unit, e.g. "/s" or "ms".
    pub(crate) unit: &'static str,
    /// The limit it is compared with, if any.
    pub(crate) limit: Option<Limit>,
    /// The target.
    pub(crate) goal: Goal,
}

impl Row {
    /// A row compared with `limit`.
    pub(crate) fn against(
        figure: impl Into<String>,
        value: f64,
        unit: &'static str,
        limit_name: impl Into<String>,
        limit_value: f64,
        goal: Goal,
    ) -> Self {
        Self {
            figure: figure.into(),
            value,
            unit,
            limit: Some(Limit {
                name: limit_name.into(),
                value: limit_value,
            }),
            goal,
        }
    }

    /// A row with no limit (an absolute bound, or reported only).
    pub(crate) fn alone(
        figure: impl Into<String>,
        value: f64,
        unit: &'static str,
        goal: Goal,
    ) -> Self {
        Self {
            figure: figure.into(),
            value,
            unit,
            limit: None,
            goal,
        }
    }

    fn ratio(&self) -> Option<f64> {
        self.limit
            .as_ref()
            .filter(|limit| limit.value > 0.0)
            .map(|limit| self.value / limit.value)
    }

    /// The target as text and whether it holds (`None` when reported only).
    fn verdict(&self) -> (String, Option<bool>) {
        match (self.goal, self.ratio()) {
            (Goal::RatioAtLeast(r), Some(ratio)) => {
                (format!("≥ {}×", format_ratio(r)), Some(ratio >= r))
            }
            (Goal::RatioAtMost(r), Some(ratio)) => {
                (format!("≤ {}×", format_ratio(r)), Some(ratio <= r))
            }
            (Goal::RatioAtLeast(r) | Goal::RatioAtMost(r), None) => {
                (format!("{}× (no limit measured)", format_ratio(r)), None)
            }
            (Goal::AtMost(bound), _) => (
                format!("≤ {}", format_value(bound, self.unit)),
                Some(self.value <= bound),
            ),
            (Goal::AtLeast(bound), _) => (
                format!("≥ {}", format_value(bound, self.unit)),
                Some(self.value >= bound),
            ),
            (Goal::Report, _) => ("-".to_string(), None),
        }
    }
}

/// A target ratio as given (`2`, `0.25`), or to three decimals when it has more (a third is
/// `0.333`).
fn format_ratio(ratio: f64) -> String {
    let given = format!("{ratio}");
    if given.len() <= 5 {
        given
    } else {
        format!("{ratio:.3}")
    }
}

/// Formats `value` with a precision that suits its size.
fn format_value(value: f64, unit: &str) -> String {
    let number = if value >= 100.0 {
        format!("{value:.0}")
    } else if value >= 1.0 {
        format!("{value:.2}")
    } else {
        format!("{value:.3}")
    };
    if unit.starts_with('/') {
        format!("{number}{unit}")
    } else if unit.is_empty() {
        number
    } else {
        format!("{number} {unit}")
    }
}

/// Every backend's rows, in the order they were added.
#[derive(Debug, Default)]
pub(crate) struct Targets {
    tables: BTreeMap<String, Vec<Row>>,
}

impl Targets {
    /// Adds a row to `backend`'s table.
    pub(crate) fn add(&mut self, backend: &str, row: Row) {
        self.tables
            .entry(backend.to_string())
            .or_default()
            .push(row);
    }

    /// Adds each of `rows` to the table of `backend`.
    pub(crate) fn add_all(&mut self, backend: &str, rows: impl IntoIterator<Item = Row>) {
        for row in rows {
            self.add(backend, row);
        }
    }

    /// True when no row was added.
    pub(crate) fn is_empty(&self) -> bool {
        self.tables.is_empty()
    }

    /// One Markdown table per backend.
    pub(crate) fn render(&self) -> String {
        let mut out = String::new();
        for (backend, rows) in &self.tables {
            let _ = writeln!(out, "\nTargets, {backend}:\n");
            let _ = writeln!(
                out,
                "| figure | measured | limit (same run) | limit | ratio | target | met |"
            );
            let _ = writeln!(out, "|---|---:|---|---:|---:|---|---|");
            for row in rows {
                let (limit_name, limit_value) = row.limit.as_ref().map_or_else(
                    || ("-".to_string(), "-".to_string()),
                    |limit| (limit.name.clone(), format_value(limit.value, row.unit)),
                );
                let ratio = row
                    .ratio()
                    .map_or_else(|| "-".to_string(), |r| format!("{r:.2}×"));
                let (target, met) = row.verdict();
                let met = match met {
                    Some(true) => "yes",
                    Some(false) => "no",
                    None => "-",
                };
                let _ = writeln!(
                    out,
                    "| {} | {} | {limit_name} | {limit_value} | {ratio} | {target} | {met} |",
                    row.figure,
                    format_value(row.value, row.unit),
                );
            }
        }
        out
    }
}

/// The machine the figures were measured on: its cores and CPU model.
pub(crate) fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|line| line.starts_with("model name"))
                .and_then(|line| line.split(':').nth(1))
                .map(|name| name.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".to_string());
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    format!("{cores} cores, {cpu}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_below_its_ratio_is_missed_and_a_bound_is_checked() {
        let mut targets = Targets::default();
        targets.add(
            "sqlite",
            Row::against(
                "end to end",
                15_000.0,
                "/s",
                "FULL commits/s",
                7_000.0,
                Goal::RatioAtLeast(2.0),
            ),
        );
        targets.add(
            "memory",
            Row::alone(
                "instructions/execution",
                12_000.0,
                "",
                Goal::AtMost(10_000.0),
            ),
        );
        let text = targets.render();
        assert!(
            text.contains(
                "| end to end | 15000/s | FULL commits/s | 7000/s | 2.14× | ≥ 2× | yes |"
            ),
            "{text}"
        );
        assert!(
            text.contains("| instructions/execution | 12000 | - | - | - | ≤ 10000 | no |"),
            "{text}"
        );
        assert!(text.find("Targets, memory").unwrap() < text.find("Targets, sqlite").unwrap());
    }
}
