//! Instructions per execution of each backend, end to end, counted by
//! `valgrind --tool=callgrind`: a figure of the code, not of the machine's speed or load; and for
//! PostgreSQL the server's CPU time per execution, from the server processes' own accounting.
//!
//! The benchmark re-runs its own binary under callgrind (`--instructions-phase <backend>`),
//! which opens a store (memory, a SQLite file in a temporary directory, or the PostgreSQL
//! database the parent created), runs [`measure_phase`] on a current-thread runtime (the
//! end-to-end workload of the throughput rows: the requests are built, created with one
//! `create_batch`, and one executor runs them until every outcome is written; [`workload`]
//! says how its end is observed), and closes the store. Callgrind dumps its counts when the phase starts and when it has ended
//! (`--dump-before` of the phase and of [`phase_ended`]): without `--separate-threads` every
//! thread's costs are kept together, so the second dump holds what every thread executed during
//! the phase (SQLite's writer, checkpointer and reader threads, the driver's tasks), and
//! nothing of opening or closing the store. One runtime thread makes the count repeatable (a
//! multi-thread runtime adds its workers' parking and stealing, which depend on timing); the
//! figure is the phase's instructions divided by the executions. Time spent in system calls
//! (a commit's `fsync`, PostgreSQL's round trips) is not an instruction of the process.
//!
//! The PostgreSQL server runs outside callgrind. Its CPU time is read from `/proc` (user plus
//! system time of the postmaster and every process it started, including those it already
//! reaped) before and after the same phase run natively, on a fresh database each time, so
//! that its transactions are grouped as in the throughput rows, not as a client slowed down
//! fifty times by callgrind would group them; the median of [`SERVER_RUNS`] runs. It needs the
//! server on this machine: a remote one leaves the row out, with a note.
//!
//! `--callgrind-out PATH` keeps each backend's profile of the phase at `PATH.<backend>` (for
//! `callgrind_annotate`); `--with-recorder` counts with the recorder `stele serve` installs
//! (the cost of the metrics).

use crate::{
    PostgresRun,
    targets::{Goal, Row},
};
use anyhow::{Context, bail};
use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::Arc,
};
use storage_sqlite::{SqliteConfig, SqlitePool};

/// The function whose call callgrind dumps before (a pattern of `--dump-before`): the counts
/// so far, of opening the store, are zeroed.
const PHASE: &str = "stele_bench::instructions::measure_phase*";
/// The function called right after the phase, whose call callgrind dumps before: that dump
/// holds the phase. (`--dump-after` of the phase itself is not triggered reliably: callgrind
/// does not see every return.)
const PHASE_END: &str = "stele_bench::instructions::phase_ended*";

/// How many native runs the server's CPU time per execution is the median of.
const SERVER_RUNS: usize = 3;

/// The figures of issue 25 at its start (the code of commit `deb6acb`, measured by this
/// module; docs/BENCHMARKS.md, "The CPU an execution costs"): instructions per execution of SQLite (every thread), of PostgreSQL's
/// client (every thread), and the PostgreSQL server's CPU per execution in microseconds. The
/// targets are half of each.
pub(crate) const SQLITE_START: f64 = 318_000.0;
/// See [`SQLITE_START`].
pub(crate) const POSTGRES_CLIENT_START: f64 = 167_400.0;
/// See [`SQLITE_START`].
pub(crate) const POSTGRES_SERVER_START_US: f64 = 80.0;

/// The arguments of the instruction counts.
#[derive(clap::Args, Debug)]
pub(crate) struct InstructionArgs {
    /// Only count the instructions per execution of each backend of --backends under
    /// `valgrind --tool=callgrind` (and PostgreSQL's server CPU per execution), instead of
    /// every other measurement.
    #[arg(long)]
    pub(crate) instructions: bool,
    /// Leave the instruction counts out of a full run.
    #[arg(long)]
    pub(crate) no_instructions: bool,
    /// Keep callgrind's profile of each backend's phase at this path with `.<backend>`
    /// appended (for `callgrind_annotate`).
    #[arg(long)]
    callgrind_out: Option<PathBuf>,
    /// Run with the metrics recorder `stele serve` installs (`cli::prometheus::serve_recorder`,
    /// its recent counts noted every 5 s), to measure what recording costs: the instruction
    /// counts with --instructions, every other row without.
    #[arg(long)]
    pub(crate) with_recorder: bool,
    /// Run the counted phase itself on this backend (the benchmark starts itself this way
    /// under callgrind).
    #[arg(long, hide = true)]
    pub(crate) instructions_phase: Option<String>,
    /// With --instructions-phase postgres: the database the parent created for the phase.
    #[arg(long, hide = true)]
    phase_database: Option<String>,
}

/// What the counted phase runs on, as the parent passes it to the child under callgrind.
pub(crate) struct PhaseArgs<'a> {
    pub(crate) executions: usize,
    pub(crate) batch_size: usize,
    pub(crate) synchronous: &'a str,
    pub(crate) postgres_url: Option<&'a str>,
}

/// The instruction rows of `backend` (and the server's CPU for PostgreSQL), or a note saying
/// why there are none.
pub(crate) async fn rows(
    args: &InstructionArgs,
    backend: &str,
    phase: &PhaseArgs<'_>,
) -> anyhow::Result<Result<Vec<Row>, String>> {
    anyhow::ensure!(
        phase.executions > 0,
        "--executions: 0 executions cannot be counted"
    );
    if let Some(kept) = &args.callgrind_out {
        let dir = kept.parent().filter(|dir| !dir.as_os_str().is_empty());
        anyhow::ensure!(
            dir.is_none_or(Path::is_dir),
            "--callgrind-out {}: the directory {} does not exist (create it first)",
            kept.display(),
            dir.map_or_else(String::new, |dir| dir.display().to_string())
        );
    }
    eprintln!("counting instructions per execution on {backend} under callgrind ...");
    match backend {
        "memory" => {
            let count = count(args, backend, phase, None)?;
            Ok(Ok(vec![Row::alone(
                "instructions per execution",
                count,
                "",
                Goal::AtMost(10_000.0),
            )]))
        }
        "sqlite" => {
            let count = count(args, backend, phase, None)?;
            Ok(Ok(vec![Row::alone(
                "instructions per execution, every thread",
                count,
                "",
                Goal::AtMost(SQLITE_START / 2.0),
            )]))
        }
        "postgres" => {
            let Some(url) = phase.postgres_url else {
                return Ok(Err(crate::NO_POSTGRES.to_string()));
            };
            let run = PostgresRun::create(url, "instructions").await?;
            let counted = count(args, backend, phase, Some(&run.name));
            run.drop_database().await?;
            let mut rows = vec![Row::alone(
                "client instructions per execution, every thread",
                counted?,
                "",
                Goal::AtMost(POSTGRES_CLIENT_START / 2.0),
            )];
            eprintln!("measuring the PostgreSQL server's CPU time per execution ...");
            match server_cpu_per_execution(url, phase).await? {
                Ok(us) => rows.push(Row::alone(
                    "server CPU per execution (user + system, median of 3 native runs)",
                    us,
                    "µs",
                    Goal::AtMost(POSTGRES_SERVER_START_US / 2.0),
                )),
                // The client's row stands without it.
                Err(why) => println!("\nNote: {why}."),
            }
            Ok(Ok(rows))
        }
        other => bail!("unknown backend `{other}` (expected memory, sqlite or postgres)"),
    }
}

/// Runs the benchmark's own binary under callgrind for the phase on `backend` and returns the
/// instructions per execution.
fn count(
    args: &InstructionArgs,
    backend: &str,
    phase: &PhaseArgs<'_>,
    database: Option<&str>,
) -> anyhow::Result<f64> {
    let dir = tempfile::tempdir()?;
    let out = dir.path().join("callgrind.out");
    let exe = std::env::current_exe().context("locating the benchmark's binary")?;
    let mut command = Command::new("valgrind");
    command
        .arg("--tool=callgrind")
        .arg(format!("--dump-before={PHASE}"))
        .arg(format!("--dump-before={PHASE_END}"))
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg(&exe)
        .args(["--instructions-phase", backend, "--executions"])
        .arg(phase.executions.to_string())
        .arg("--batch-size")
        .arg(phase.batch_size.to_string())
        .args(["--synchronous", phase.synchronous])
        .args(args.with_recorder.then_some("--with-recorder"));
    if let (Some(url), Some(database)) = (phase.postgres_url, database) {
        command
            .args(["--postgres-url", url])
            .args(["--phase-database", database]);
    }
    let output = command.output().context(
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
    let (path, profile) = phase_profile(dir.path())?;
    let total = total_instructions(&profile).with_context(|| {
        format!(
            "no `totals:` line in callgrind's profile {}",
            path.display()
        )
    })?;
    anyhow::ensure!(
        total > 0,
        "callgrind counted no instruction in {PHASE}: was the function inlined or renamed?"
    );
    if let Some(kept) = &args.callgrind_out {
        let mut name = kept.as_os_str().to_owned();
        name.push(format!(".{backend}"));
        let kept = PathBuf::from(name);
        std::fs::copy(&path, &kept).with_context(|| format!("copying to {}", kept.display()))?;
        eprintln!(
            "callgrind's profile of {backend}: {} (`callgrind_annotate --inclusive=yes {}`)",
            kept.display(),
            kept.display()
        );
    }
    Ok(total as f64 / phase.executions as f64)
}

/// The dump callgrind wrote when the phase returned, among the files in `dir`.
fn phase_profile(dir: &Path) -> anyhow::Result<(PathBuf, String)> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let profile = std::fs::read_to_string(&path)
            .with_context(|| format!("reading callgrind's profile {}", path.display()))?;
        if is_phase_dump(&profile) {
            return Ok((path, profile));
        }
    }
    bail!("callgrind wrote no dump at {PHASE_END}: was the function inlined or renamed?")
}

/// True for the dump written when the phase returned (its trigger names [`phase_ended`]).
fn is_phase_dump(profile: &str) -> bool {
    let end = PHASE_END.trim_end_matches('*');
    profile
        .lines()
        .take_while(|line| !line.starts_with("fl=") && !line.starts_with("ob="))
        .any(|line| line.starts_with("desc: Trigger:") && line.contains(end))
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

/// The counted run, in the process callgrind started: a store of `backend` (and the recorder,
/// with `--with-recorder`), then the phase, then the store's close.
pub(crate) fn run_phase(
    args: &InstructionArgs,
    backend: &str,
    phase: &PhaseArgs<'_>,
) -> anyhow::Result<()> {
    if args.with_recorder {
        install_recorder()?;
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let dir = tempfile::tempdir()?;
    let db: Arc<dyn concepts::DbConnection> = runtime.block_on(async {
        anyhow::Ok::<Arc<dyn concepts::DbConnection>>(match backend {
            "memory" => Arc::new(storage_memory::MemoryStore::new()),
            "sqlite" => {
                let sync = crate::synchronous(phase.synchronous)?;
                let config = SqliteConfig::new(dir.path().join("phase.db")).with_synchronous(sync);
                Arc::new(SqlitePool::open(config).await?)
            }
            "postgres" => {
                let url = phase.postgres_url.context("--postgres-url")?;
                let database = args.phase_database.as_deref().context("--phase-database")?;
                let server = storage_postgres::PostgresConfig::from_url(url)?;
                let store =
                    storage_postgres::PostgresStore::connect(server.with_database(database))
                        .await?;
                Arc::new(store)
            }
            other => bail!("unknown backend `{other}`"),
        })
    })?;
    let measured = measure_phase(&runtime, &db, phase.executions, phase.batch_size);
    phase_ended(measured.is_ok());
    let checked = measured.and_then(|()| runtime.block_on(check_finished(&db, phase.executions)));
    runtime.block_on(db.close());
    checked
}

/// Marks the end of the phase for callgrind (see [`PHASE_END`]). Never inlined, and with an
/// effect, so that it stays a call.
#[inline(never)]
fn phase_ended(ok: bool) {
    if !std::hint::black_box(ok) {
        eprintln!("the counted phase failed");
    }
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
    runtime.block_on(workload(db, executions, batch_size))
}

/// The end-to-end workload of the throughput rows (`run_noop`), its end observed without the
/// store handle those rows count the acknowledged `Finished` appends through (`CountingDb`):
/// that wrapper's own boxed call of every outcome, about 400 instructions an execution, is
/// the benchmark's, not the program's. The worker counts its runs instead; once it has run
/// every execution, the node's shutdown waits for the runs still writing their outcomes. That
/// every execution finished is checked afterwards, outside the count ([`check_finished`]).
async fn workload(
    db: &Arc<dyn concepts::DbConnection>,
    executions: usize,
    batch_size: usize,
) -> anyhow::Result<()> {
    let requests = crate::noop_requests(executions)?;
    let worker = Arc::new(CountingWorker::new(executions)?);
    db.create_batch(requests).await.context("create_batch")?;
    let node = node::Node::builder(db.clone(), crate::Now)
        .without_timers_watcher()
        .worker(worker.clone(), crate::multi::noop_settings(batch_size)?)
        .start()?;
    let deadline = std::time::Duration::from_secs(600);
    let ran = tokio::time::timeout(deadline, worker.ran_all.notified()).await;
    let drained = node.shutdown(crate::multi::STOP).await;
    ran.with_context(|| format!("not every execution ran within {deadline:?}"))?;
    anyhow::ensure!(
        drained.left == 0,
        "{} runs were still writing their outcomes when the node stopped",
        drained.left
    );
    Ok(())
}

/// The no-op worker of the counted phase (`BenchWorker`'s answer), which says when it has run
/// `executions` times.
struct CountingWorker {
    ffqns: [concepts::FunctionFqn; 1],
    executions: usize,
    ran: std::sync::atomic::AtomicUsize,
    /// Keeps its permit from the last run until the phase awaits it.
    ran_all: tokio::sync::Notify,
}

impl CountingWorker {
    fn new(executions: usize) -> anyhow::Result<Self> {
        Ok(Self {
            ffqns: [crate::FFQN.parse()?],
            executions,
            ran: std::sync::atomic::AtomicUsize::new(0),
            ran_all: tokio::sync::Notify::new(),
        })
    }
}

#[async_trait::async_trait]
impl executor::Worker for CountingWorker {
    async fn run(&self, ctx: executor::WorkerContext) -> executor::WorkerResult {
        let ran = self.ran.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        if ran == self.executions {
            self.ran_all.notify_one();
        }
        executor::WorkerResult::Ok(concepts::SupportedFunctionReturnValue::None, ctx.version)
    }

    fn exported_functions(&self) -> &[concepts::FunctionFqn] {
        &self.ffqns
    }
}

/// Fails unless all `executions` of the phase are `Finished` in `db`.
async fn check_finished(
    db: &Arc<dyn concepts::DbConnection>,
    executions: usize,
) -> anyhow::Result<()> {
    let finished = db
        .list_executions(
            concepts::ListExecutionsFilter {
                state: Some(concepts::PendingStateKind::Finished),
                ..concepts::ListExecutionsFilter::default()
            },
            concepts::Pagination {
                cursor: None,
                length: executions + 1,
            },
        )
        .await?;
    anyhow::ensure!(
        finished.len() == executions,
        "{} of the phase's {executions} executions finished",
        finished.len()
    );
    Ok(())
}

/// The PostgreSQL server's CPU time per execution, in microseconds: the median of
/// [`SERVER_RUNS`] native runs of the phase's workload, each on a fresh database; a note when
/// the server's processes cannot be read.
async fn server_cpu_per_execution(
    url: &str,
    phase: &PhaseArgs<'_>,
) -> anyhow::Result<Result<f64, String>> {
    let mut samples = Vec::with_capacity(SERVER_RUNS);
    for _ in 0..SERVER_RUNS {
        let run = PostgresRun::create(url, "server_cpu").await?;
        let measured = async {
            let postmaster = match postmaster_of(&run.server_url, &run.name).await? {
                Ok(pid) => pid,
                Err(why) => return Ok(Err(why)),
            };
            let db = run.connect().await?;
            let before = server_cpu_ticks(postmaster)?;
            let ran = workload(&db, phase.executions, phase.batch_size).await;
            let after = server_cpu_ticks(postmaster)?;
            let checked = async { check_finished(&db, phase.executions).await };
            let checked = match ran {
                Ok(()) => checked.await,
                Err(err) => Err(err),
            };
            db.close().await;
            checked?;
            let seconds = (after - before) as f64 / clock_ticks_per_second()?;
            anyhow::Ok(Ok(seconds * 1e6 / phase.executions as f64))
        }
        .await;
        run.drop_database().await?;
        match measured? {
            Ok(us) => samples.push(us),
            Err(why) => return Ok(Err(why)),
        }
    }
    samples.sort_by(f64::total_cmp);
    eprintln!("server CPU per execution, µs, sorted: {samples:.1?}");
    Ok(Ok(samples[samples.len() / 2]))
}

/// The process id of the postmaster serving the database `database` (the parent of a backend
/// of its own), or why it cannot be read from this machine's `/proc`.
async fn postmaster_of(url: &str, database: &str) -> anyhow::Result<Result<u32, String>> {
    let probe = crate::probe::Probe::postgres(url, database).await?;
    let crate::probe::Probe::Postgres { client, .. } = &probe else {
        bail!("a PostgreSQL probe is expected");
    };
    let backend: i32 = client
        .query_one("SELECT pg_backend_pid()", &[])
        .await?
        .get(0);
    // Read while the backend lives: once the probe closes, its process may be gone.
    let postmaster = postmaster_of_backend(backend);
    probe.close().await;
    Ok(postmaster)
}

/// The parent of the PostgreSQL backend process `backend`, or why it is not one of this
/// machine's.
fn postmaster_of_backend(backend: i32) -> Result<u32, String> {
    let not_local = |why: String| {
        format!(
            "the PostgreSQL server's CPU per execution was left out: its backend {backend} \
             is not a process of this machine ({why}); run the benchmark beside the server"
        )
    };
    let stat = std::fs::read_to_string(format!("/proc/{backend}/stat"))
        .map_err(|e| not_local(e.to_string()))?;
    let fields =
        stat_fields(&stat).ok_or_else(|| not_local("unreadable /proc stat".to_string()))?;
    let comm = std::fs::read_to_string(format!("/proc/{backend}/comm")).unwrap_or_default();
    if !comm.starts_with("postgres") {
        return Err(not_local(format!("its command is `{}`", comm.trim())));
    }
    fields[1]
        .parse()
        .map_err(|_| not_local("no parent".to_string()))
}

/// The fields of a `/proc/<pid>/stat` line after the command name: `[state, ppid, ...]`, so
/// field `n` of proc(5) (1-based) is at index `n - 3`.
fn stat_fields(stat: &str) -> Option<Vec<&str>> {
    let (_, rest) = stat.rsplit_once(')')?;
    Some(rest.split_whitespace().collect())
}

/// User plus system clock ticks of the postmaster `postmaster`, of the children it reaped
/// (`cutime`, `cstime`), and of every live process whose parent it is.
fn server_cpu_ticks(postmaster: u32) -> anyhow::Result<u64> {
    let ticks = |fields: &[&str], from: usize, to: usize| -> anyhow::Result<u64> {
        let mut sum = 0;
        for field in &fields[from..to] {
            sum += field.parse::<u64>().context("a CPU time in /proc")?;
        }
        Ok(sum)
    };
    let own = std::fs::read_to_string(format!("/proc/{postmaster}/stat"))
        .with_context(|| format!("reading /proc/{postmaster}/stat"))?;
    let fields = stat_fields(&own).context("parsing the postmaster's /proc stat")?;
    // utime, stime, cutime, cstime: fields 14 to 17.
    let mut total = ticks(&fields, 11, 15)?;
    for entry in std::fs::read_dir("/proc")? {
        let entry = entry?;
        let name = entry.file_name();
        if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        // A process may end between the listing and the read: its time is then in the
        // postmaster's `cutime` and `cstime`.
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let Some(fields) = stat_fields(&stat) else {
            continue;
        };
        if fields.get(1).and_then(|ppid| ppid.parse::<u32>().ok()) == Some(postmaster) {
            total += ticks(&fields, 11, 13)?;
        }
    }
    Ok(total)
}

/// The kernel's clock ticks per second (`getconf CLK_TCK`), in which `/proc` counts CPU time.
fn clock_ticks_per_second() -> anyhow::Result<f64> {
    let output = Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .context("running `getconf CLK_TCK`")?;
    let text = String::from_utf8_lossy(&output.stdout);
    text.trim()
        .parse()
        .with_context(|| format!("`getconf CLK_TCK` answered `{}`", text.trim()))
}

#[cfg(test)]
mod tests {
    use super::{is_phase_dump, stat_fields, total_instructions};

    #[test]
    fn the_total_is_read_from_the_totals_line() {
        let profile = "version: 1\ncreator: callgrind-3.19.0\nevents: Ir\nfl=(1) a.rs\n\
                       fn=(1) f\n3 10\nsummary: 12345\ntotals: 12345\n";
        assert_eq!(total_instructions(profile), Some(12345));
        assert_eq!(total_instructions("events: Ir\n"), None);
    }

    #[test]
    fn the_phase_dump_is_the_one_its_return_triggered() {
        let after = "version: 1\ndesc: Trigger: --dump-before=stele_bench::instructions::\
                     phase_ended\nevents: Ir\nfl=(1) a\n";
        let before = "version: 1\ndesc: Trigger: --dump-before=stele_bench::instructions::\
                      measure_phase\nevents: Ir\n";
        let end = "version: 1\ndesc: Trigger: Program termination\nevents: Ir\n";
        assert!(is_phase_dump(after));
        assert!(!is_phase_dump(before) && !is_phase_dump(end));
    }

    #[test]
    fn proc_stat_fields_start_after_the_command() {
        let stat = "42 (postgres: x) S 7 42 42 0 -1 4194560 1 0 0 0 5 3 2 1 20 0";
        let fields = stat_fields(stat).unwrap();
        assert_eq!(fields[1], "7");
        assert_eq!(&fields[11..15], ["5", "3", "2", "1"]);
    }
}
