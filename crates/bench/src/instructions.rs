//! Instructions per execution of the memory backend, end to end, counted by
//! `valgrind --tool=callgrind`: a figure of the code, not of the machine's speed or load.
//!
//! `--instructions` re-runs the benchmark binary under callgrind with collection off at the
//! start and toggled on and off around [`measure_phase`] (`--toggle-collect`), which runs the
//! end-to-end workload of the throughput rows on the memory backend on a current-thread
//! runtime: the requests are built, created with one `create_batch`, and one executor runs
//! them to their last acknowledged `Finished`. Store creation and teardown are outside the
//! phase. One thread makes the count repeatable (a multi-thread runtime adds its workers'
//! parking and stealing, which depend on timing); the figure is the phase's instructions
//! divided by the executions. `--callgrind-out` keeps the profile for `callgrind_annotate`;
//! `--with-recorder` counts with the recorder `stele serve` installs (the cost of the metrics).

use anyhow::{Context, bail};
use std::{path::PathBuf, process::Command, sync::Arc};

/// The function whose calls callgrind counts (a pattern of `--toggle-collect`).
const PHASE: &str = "stele_bench::instructions::measure_phase*";

/// The arguments of the instruction count.
#[derive(clap::Args, Debug)]
pub(crate) struct InstructionArgs {
    /// Count the instructions per execution of the memory backend under
    /// `valgrind --tool=callgrind` (instead of every other measurement).
    #[arg(long)]
    pub(crate) instructions: bool,
    /// With --instructions: keep callgrind's profile at this path (for `callgrind_annotate`).
    #[arg(long)]
    callgrind_out: Option<PathBuf>,
    /// Run with the metrics recorder `stele serve` installs (`cli::prometheus::serve_recorder`,
    /// its recent counts noted every 5 s), to measure what recording costs: the instruction
    /// count with --instructions, every other row without.
    #[arg(long)]
    pub(crate) with_recorder: bool,
    /// Run the counted phase itself (the benchmark starts itself this way under callgrind).
    #[arg(long, hide = true)]
    pub(crate) instructions_phase: bool,
}

/// Runs the benchmark's own binary under callgrind for `executions` executions and returns
/// the instructions per execution.
pub(crate) fn count(
    args: &InstructionArgs,
    executions: usize,
    batch_size: usize,
) -> anyhow::Result<f64> {
    anyhow::ensure!(
        executions > 0,
        "--executions: 0 executions cannot be counted"
    );
    let dir = tempfile::tempdir()?;
    let out = args
        .callgrind_out
        .clone()
        .unwrap_or_else(|| dir.path().join("callgrind.out"));
    let exe = std::env::current_exe().context("locating the benchmark's binary")?;
    let output = Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg("--collect-atstart=no")
        .arg(format!("--toggle-collect={PHASE}"))
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg(&exe)
        .args(["--instructions-phase", "--executions"])
        .arg(executions.to_string())
        .arg("--batch-size")
        .arg(batch_size.to_string())
        .args(args.with_recorder.then_some("--with-recorder"))
        .output()
        .context(
            "running valgrind: is it installed? (`apt-get install valgrind`; --instructions \
             needs `valgrind --tool=callgrind`)",
        )?;
    if !output.status.success() {
        bail!(
            "valgrind --tool=callgrind failed ({}):\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let profile = std::fs::read_to_string(&out)
        .with_context(|| format!("reading callgrind's profile {}", out.display()))?;
    let total = total_instructions(&profile)
        .with_context(|| format!("no `totals:` line in callgrind's profile {}", out.display()))?;
    anyhow::ensure!(
        total > 0,
        "callgrind counted no instruction in {PHASE}: was the function inlined or renamed?"
    );
    if let Some(kept) = &args.callgrind_out {
        eprintln!(
            "callgrind's profile: {} (`callgrind_annotate --inclusive=yes {}`)",
            kept.display(),
            kept.display()
        );
    }
    Ok(total as f64 / executions as f64)
}

/// The instruction count of a callgrind profile (its `totals:` or `summary:` line).
fn total_instructions(profile: &str) -> Option<u64> {
    profile.lines().find_map(|line| {
        let rest = line
            .strip_prefix("totals:")
            .or_else(|| line.strip_prefix("summary:"))?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// The counted run, in the process callgrind started: a memory store (and the recorder, with
/// `--with-recorder`), then the phase.
pub(crate) fn run_phase(
    executions: usize,
    batch_size: usize,
    with_recorder: bool,
) -> anyhow::Result<()> {
    if with_recorder {
        install_recorder()?;
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let db: Arc<dyn concepts::DbConnection> = Arc::new(storage_memory::MemoryStore::new());
    measure_phase(&runtime, &db, executions, batch_size)?;
    runtime.block_on(db.close());
    Ok(())
}

/// Installs the recorder `stele serve` installs (`cli::prometheus::install`) and turns
/// recording on; the recent counts it keeps for the overview, to note every few seconds.
pub(crate) fn install_recorder() -> anyhow::Result<Arc<node::recent::Recent>> {
    let (_handle, recent) = cli::prometheus::install()
        .map_err(|err| anyhow::anyhow!("installing the recorder: {err}"))?;
    Ok(recent)
}

/// What callgrind counts: the end-to-end workload on `db`, from building the requests to the
/// executor's close after the last `Finished`. Never inlined: callgrind finds it by name.
#[inline(never)]
fn measure_phase(
    runtime: &tokio::runtime::Runtime,
    db: &Arc<dyn concepts::DbConnection>,
    executions: usize,
    batch_size: usize,
) -> anyhow::Result<()> {
    runtime
        .block_on(crate::run_noop("memory", db, executions, batch_size))
        .map(drop)
}

#[cfg(test)]
mod tests {
    use super::total_instructions;

    #[test]
    fn the_total_is_read_from_the_totals_line() {
        let profile = "version: 1\ncreator: callgrind-3.19.0\nevents: Ir\nfl=(1) a.rs\n\
                       fn=(1) f\n3 10\nsummary: 12345\ntotals: 12345\n";
        assert_eq!(total_instructions(profile), Some(12345));
        assert_eq!(total_instructions("events: Ir\n"), None);
    }
}
