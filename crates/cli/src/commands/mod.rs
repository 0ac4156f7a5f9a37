//! The commands of `stele`: argument parsing, dispatch, the error type and its exit codes.

mod demo;
mod executions;
mod node;
mod operate;
mod render;
mod schedules;
mod serve;
mod submit;

use cli::database::{self, DatabaseUrl, OpenError, OpenMode};
use concepts::{DbConnection, DbError, ExecutionId, ValidationError};
use std::{fmt::Write as _, io::Write as _, sync::Arc};

/// Run a self-checking demo workload, run and operate durable executions, inspect them.
///
/// The database is a SQLite file (created by `stele demo` or `stele serve` if missing; no
/// other command creates one) or a PostgreSQL URL.
/// Exit codes: 0 success, 1 runtime failure, 2 usage or bad input, 3 not found, 4 the database
/// cannot be opened, 130 interrupted.
#[derive(Debug, clap::Parser)]
#[command(name = "stele", version, about, long_about, max_term_width = 100)]
pub struct Cli {
    /// The database: a SQLite file path, sqlite://PATH, or postgres://USER@HOST/DB.
    #[arg(
        long = "database",
        visible_alias = "db",
        value_name = "URL",
        global = true,
        env = "STELE_DATABASE",
        default_value = "stele.db"
    )]
    database: String,

    #[command(subcommand)]
    command: Command,
}

impl Cli {
    /// The command line of this process, parsed: clap's checks, and one of its own that
    /// clap cannot say. `serve --http-token` needs `--http` when it is written on the command
    /// line, but `STELE_HTTP_TOKEN` may be exported whether `--http` is given or not (clap's
    /// `requires` counts a value from the environment as the flag, and refused a `serve`
    /// without `--http` in a shell that exports the token).
    ///
    /// # Errors
    /// The arguments do not parse, or help or the version was asked for.
    pub fn parse_args() -> Result<Self, clap::Error> {
        Self::parse_from_args(std::env::args_os())
    }

    fn parse_from_args(
        args: impl IntoIterator<Item = std::ffi::OsString>,
    ) -> Result<Self, clap::Error> {
        use clap::{CommandFactory as _, FromArgMatches as _, parser::ValueSource};
        let mut command = Self::command();
        let matches = command.try_get_matches_from_mut(args)?;
        if let Some(("serve", serve)) = matches.subcommand()
            && serve.value_source("http_token") == Some(ValueSource::CommandLine)
            && !serve.contains_id("http")
        {
            return Err(command.error(
                clap::error::ErrorKind::MissingRequiredArgument,
                "--http-token needs --http ADDR: the token guards the HTTP API, which only \
                 --http serves",
            ));
        }
        Self::from_arg_matches(&matches).map_err(|err| err.format(&mut command))
    }

    /// Where `stele serve` exports its traces, if it was given a collector.
    pub fn otlp_endpoint(&self) -> Option<&str> {
        match &self.command {
            Command::Serve(args) => args.otlp_endpoint(),
            _ => None,
        }
    }
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Run the demo workload: submit it, run it to the end with live progress, print a
    /// summary that checks every execution finished exactly once.
    ///
    /// On a database that already holds a workload it submits nothing and resumes it (after a
    /// crash, a kill or Ctrl-C); on a finished one it prints the summary.
    Demo(demo::DemoArgs),
    /// Run the demo's functions on the database until Ctrl-C or SIGTERM: one executor per
    /// function, the timers watcher and, with --prune-older-than, the retention task.
    ///
    /// This is what runs the executions `stele submit` creates. Stopped, it takes no new work,
    /// gives the runs in flight --drain-timeout to finish and exits with 130; runs still going
    /// then are picked up by the next `stele serve` once their leases expire, or at once by
    /// one started again under the same --identity.
    Serve(serve::ServeArgs),
    /// Submit a top-level execution of a function, due now.
    ///
    /// Prints the execution id and `created`, or `already existed` with its state when an
    /// execution with the same --id, function and parameters exists (a retried submit writes
    /// nothing). The same --id with another function or other parameters is refused (exit 2).
    Submit(submit::SubmitArgs),
    /// Inspect and operate executions: list, show, wait for one, cancel, complete a promise,
    /// prune finished ones.
    #[command(subcommand)]
    Executions(executions::ExecutionsCommand),
    /// Create and operate schedules: recurring executions of a function that `stele serve`
    /// fires at each tick of a cron expression or an interval, once across every process.
    #[command(subcommand)]
    Schedules(schedules::SchedulesCommand),
}

/// Runs the parsed command.
pub async fn run(cli: Cli) -> Result<(), CliError> {
    let url: DatabaseUrl = cli
        .database
        .parse()
        .map_err(|err| CliError::new(Exit::Usage, format!("--database: {err}")))?;
    match cli.command {
        Command::Demo(args) => demo::run(&url, args).await,
        Command::Serve(args) => serve::run(&url, args).await,
        Command::Submit(args) => submit::run(&url, args).await,
        Command::Executions(command) => executions::run(&url, command).await,
        Command::Schedules(command) => schedules::run(&url, command).await,
    }
}

/// Opens the store, runs `body` with it, and closes the store whatever `body` returned.
async fn with_store<F, T>(url: &DatabaseUrl, mode: OpenMode, body: F) -> Result<T, CliError>
where
    F: AsyncFnOnce(Arc<dyn DbConnection>) -> Result<T, CliError>,
{
    let db = database::open_with_notes(url, mode, &note)
        .await
        .map_err(|err| CliError::open(url, err))?;
    let outcome = body(db.clone()).await;
    db.close().await;
    outcome
}

/// The exit codes of `stele`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// 1: a runtime failure (a database error, a failed check).
    Failure,
    /// 2: usage or bad input.
    Usage,
    /// 3: no such database file, no such execution.
    NotFound,
    /// 4: the database cannot be opened.
    Database,
    /// 130: interrupted by Ctrl-C or `SIGTERM`.
    Interrupted,
    /// 0, silently: stdout was closed by its reader (`stele executions list | head`).
    OutputClosed,
}

impl Exit {
    /// The process exit code.
    pub fn code(self) -> u8 {
        match self {
            Self::OutputClosed => 0,
            Self::Failure => 1,
            Self::Usage => 2,
            Self::NotFound => 3,
            Self::Database => 4,
            Self::Interrupted => 130,
        }
    }
}

/// A failed command: its exit code and a one-line message.
#[derive(Debug)]
pub struct CliError {
    exit: Exit,
    error: anyhow::Error,
}

impl CliError {
    /// An error with this exit code and message.
    pub fn new(exit: Exit, message: impl Into<String>) -> Self {
        Self {
            exit,
            error: anyhow::Error::msg(message.into()),
        }
    }

    /// A storage error: `NotFound` is exit 3, anything else a runtime failure.
    pub fn db(context: impl std::fmt::Display, err: DbError) -> Self {
        let exit = match err {
            DbError::NotFound(_) => Exit::NotFound,
            _ => Exit::Failure,
        };
        Self {
            exit,
            error: anyhow::Error::new(err).context(context.to_string()),
        }
    }

    /// A storage error of a request that carries the operator's input (an id, a value): a
    /// conflicting repeat (`Duplicate`) or a request the model refuses (`Validation`) is bad
    /// input (exit 2) and its message is the refusal itself; `NotFound` is exit 3; anything
    /// else is [`CliError::db`].
    pub fn request(context: impl std::fmt::Display, err: DbError) -> Self {
        let (exit, detail) = match &err {
            DbError::NotFound(_) => (Exit::NotFound, err.to_string()),
            DbError::Duplicate(kind) => (Exit::Usage, kind.to_string()),
            DbError::Validation(ValidationError::InvalidRequest(reason)) => {
                (Exit::Usage, reason.clone())
            }
            DbError::Validation(invalid) => (Exit::Usage, invalid.to_string()),
            _ => return Self::db(context, err),
        };
        Self::new(exit, format!("{context}: {detail}"))
    }

    /// No execution with this id (exit 3).
    pub fn no_execution(execution_id: &ExecutionId, url: &DatabaseUrl) -> Self {
        Self::new(
            Exit::NotFound,
            format!("no execution {execution_id} in {url}"),
        )
    }

    /// A store that could not be opened.
    pub fn open(url: &DatabaseUrl, err: OpenError) -> Self {
        use concepts::SchemaRefusal;
        use storage_postgres::PostgresError;
        use storage_sqlite::SqliteOpenError;
        let (exit, error) = match err {
            OpenError::Missing(_) => (Exit::NotFound, anyhow::Error::new(err)),
            OpenError::Postgres(PostgresError::InvalidConfig { .. }) => {
                (Exit::Usage, anyhow::Error::new(err))
            }
            OpenError::Postgres(PostgresError::Schema { refusal, .. })
            | OpenError::Sqlite(SqliteOpenError::Schema { refusal, .. })
                if matches!(refusal, SchemaRefusal::TooOld { .. }) =>
            {
                (
                    Exit::Database,
                    anyhow::Error::msg(format!(
                        "{err} (a command that writes, such as `stele serve`, migrates it)"
                    )),
                )
            }
            OpenError::Postgres(PostgresError::Schema { .. }) => {
                (Exit::Database, anyhow::Error::new(err))
            }
            OpenError::Postgres(_) => (
                Exit::Database,
                anyhow::Error::new(err)
                    .context(format!("cannot open the PostgreSQL database {url}")),
            ),
            OpenError::Sqlite(SqliteOpenError::Open { .. }) => (
                Exit::Database,
                anyhow::Error::msg(format!(
                    "{err} (check that its directory exists and can be written)"
                )),
            ),
            OpenError::Sqlite(_) => (Exit::Database, anyhow::Error::new(err)),
        };
        Self { exit, error }
    }

    fn output(err: &std::io::Error) -> Self {
        if err.kind() == std::io::ErrorKind::BrokenPipe {
            Self::new(Exit::OutputClosed, "stdout was closed")
        } else {
            Self::new(Exit::Failure, format!("cannot write to stdout: {err}"))
        }
    }

    /// The exit code.
    pub fn exit(&self) -> Exit {
        self.exit
    }

    /// The message for stderr, on one line: the error and its causes, down to the first cause
    /// whose text the message already quotes (errors that print their source stop the chain
    /// there). `None` when nothing should be printed.
    pub fn message(&self) -> Option<String> {
        if self.exit == Exit::OutputClosed {
            return None;
        }
        let mut message = String::new();
        for cause in self.error.chain() {
            let text = cause.to_string();
            if message.is_empty() {
                message = text;
            } else if message.contains(&text) {
                break;
            } else {
                let _ = write!(message, ": {text}");
            }
        }
        Some(message.replace('\n', " "))
    }
}

/// The value parser of a whole-number option (`N`) from `min` to `max`: every bad value (a
/// sign, a fraction, a word, nothing, too large for the range or for any integer) gets the
/// same reason, which [`usage_error_line`] prints as one line.
fn whole_number(
    min: u32,
    max: u32,
) -> impl Fn(&str) -> Result<u32, String> + Clone + Send + Sync + 'static {
    move |text| {
        text.parse::<u32>()
            .ok()
            .filter(|n| (min..=max).contains(n))
            .ok_or_else(|| format!("not a whole number from {min} to {max}"))
    }
}

/// A command-line parsing error as one line without its `error: ` prefix: clap's message and
/// its tips, without the usage and the `--help` hint it adds on lines of their own.
pub fn usage_error_line(err: &clap::Error) -> String {
    let text = err.to_string();
    let parts: Vec<&str> = text
        .lines()
        .take_while(|line| !line.starts_with("Usage:") && !line.starts_with("For more information"))
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect();
    let line = parts.join("; ");
    line.strip_prefix("error: ").unwrap_or(&line).to_string()
}

/// Bad input: `invalid <what>: <why>` (exit 2).
fn bad_input(what: &str, err: impl std::fmt::Display) -> CliError {
    CliError::new(Exit::Usage, format!("invalid {what}: {err}"))
}

/// Parses an execution id given on the command line (exit 2 when malformed).
fn parse_execution_id(text: &str) -> Result<ExecutionId, CliError> {
    text.parse().map_err(|err| bad_input("execution id", err))
}

/// A line on stderr, for people; stdout holds only what scripts read.
fn note(text: &str) {
    eprintln!("{text}");
}

/// Resolves on Ctrl-C or, on Unix, `SIGTERM`. The handlers are installed by this call, not
/// when the future is first polled, so a signal that arrives in between is not lost (and does
/// not kill the process the default way).
fn interrupted() -> impl Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let interrupt = signal(SignalKind::interrupt());
        let terminate = signal(SignalKind::terminate());
        async move {
            match (interrupt, terminate) {
                (Ok(mut interrupt), Ok(mut terminate)) => {
                    tokio::select! {
                        _ = interrupt.recv() => {}
                        _ = terminate.recv() => {}
                    }
                }
                _ => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
    }
    #[cfg(not(unix))]
    {
        async {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// Writes `text` to stdout.
fn print(text: &str) -> Result<(), CliError> {
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(|err| CliError::output(&err))
}

/// Writes `value` to stdout as pretty JSON and a newline.
fn print_json<T: serde::Serialize>(value: &T) -> Result<(), CliError> {
    let mut text = serde_json::to_string_pretty(value)
        .map_err(|err| CliError::new(Exit::Failure, format!("cannot encode JSON: {err}")))?;
    text.push('\n');
    print(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer quotes its source: {0}")]
    struct Quoting(#[source] Inner);

    #[derive(Debug, thiserror::Error)]
    #[error("inner")]
    struct Inner(#[source] std::io::Error);

    #[test]
    fn a_whole_number_is_in_its_range_and_nothing_else_is() {
        let parse = whole_number(1, 100);
        assert_eq!(parse("1"), Ok(1));
        assert_eq!(parse("100"), Ok(100));
        for bad in [
            "0",
            "101",
            "-1",
            "1.5",
            "ten",
            "",
            "99999999999999999999999",
        ] {
            assert_eq!(
                parse(bad),
                Err("not a whole number from 1 to 100".to_string()),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn a_usage_error_is_one_line_with_its_tip() {
        use clap::Parser as _;
        let err = Cli::try_parse_from(["stele", "executions", "list", "--jsn"]).unwrap_err();
        let line = usage_error_line(&err);
        assert!(!line.contains('\n'), "{line:?}");
        assert!(
            line.starts_with("unexpected argument '--jsn' found"),
            "{line:?}"
        );
        assert!(line.contains("'--json'"), "the tip is kept: {line:?}");
        let err = Cli::try_parse_from(["stele", "demo", "--executions", "-1"]).unwrap_err();
        assert_eq!(
            usage_error_line(&err),
            "invalid value '-1' for '--executions <N>': not a whole number from 1 to 100000"
        );
    }

    #[test]
    fn http_alone_serves_on_loopback() {
        use clap::Parser as _;
        let http = |args: &[&str]| match Cli::try_parse_from(args).expect("parses").command {
            Command::Serve(args) => args.http_address(),
            _ => panic!("serve"),
        };
        assert_eq!(http(&["stele", "serve"]), None);
        assert_eq!(
            http(&["stele", "serve", "--http"]).as_deref(),
            Some("127.0.0.1:8080")
        );
        assert_eq!(
            http(&["stele", "serve", "--http", "127.0.0.1:0"]).as_deref(),
            Some("127.0.0.1:0")
        );
    }

    #[test]
    fn messages_are_one_line_without_repeating_a_quoted_cause() {
        let quoting = Quoting(Inner(std::io::Error::other("deepest")));
        let err = CliError {
            exit: Exit::Failure,
            error: anyhow::Error::new(quoting).context("while testing"),
        };
        assert_eq!(
            err.message().unwrap(),
            "while testing: outer quotes its source: inner"
        );
        let multiline = CliError::new(Exit::Usage, "two\nlines");
        assert_eq!(multiline.message().unwrap(), "two lines");
        assert_eq!(CliError::new(Exit::OutputClosed, "x").message(), None);
    }

    #[test]
    fn exit_codes_are_the_documented_ones() {
        let codes: Vec<u8> = [
            Exit::OutputClosed,
            Exit::Failure,
            Exit::Usage,
            Exit::NotFound,
            Exit::Database,
            Exit::Interrupted,
        ]
        .map(Exit::code)
        .to_vec();
        assert_eq!(codes, [0, 1, 2, 3, 4, 130]);
        let not_found = CliError::db("reading", DbError::NotFound("execution E_x".into()));
        assert_eq!(not_found.exit(), Exit::NotFound);
        assert_eq!(
            CliError::db("reading", DbError::Closed).exit(),
            Exit::Failure
        );
        let missing = CliError::open(
            &DatabaseUrl::Sqlite("x.db".into()),
            OpenError::Missing("x.db".into()),
        );
        assert_eq!(missing.exit(), Exit::NotFound);
    }
}
