//! Child processes that a test starts, reads line by line and kills: the `durability-node`s of
//! the crash and multi-process tests, the `stele` binary of the CLI tests.
//!
//! Each child's standard output is read by a thread of its own into one channel, so a test
//! waits on every child at once with a timeout, and a pipe never fills up while the test is
//! busy elsewhere. Standard error goes to a file per child, shown when the test fails.
//! Dropping [`Processes`] kills and reaps every child still running, so no process outlives a
//! failed test.

use std::{
    io::{BufRead, BufReader, Read},
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    sync::mpsc,
    time::Duration,
};

/// A command of `program` with `args`, its standard input closed and the environment a user's
/// shell may set for Stele removed (the database, the log filter, an OTLP collector), so that
/// a test runs what it names and nothing else.
#[must_use]
pub fn clean_command(program: &str, args: &[&str]) -> Command {
    let mut command = Command::new(program);
    command.args(args).stdin(Stdio::null());
    for variable in [
        "STELE_DATABASE",
        "RUST_LOG",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_SERVICE_NAME",
    ] {
        command.env_remove(variable);
    }
    command
}

/// Starts `command` (its standard output discarded), reads its standard error line by line,
/// and returns the child, the rest of those lines and the first, read within `timeout`.
///
/// # Panics
/// When it does not start or prints no line in time.
pub fn start_reading_stderr(
    mut command: Command,
    timeout: Duration,
) -> (Child, mpsc::Receiver<String>, String) {
    let mut child = command
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|err| panic!("cannot start {command:?}: {err}"));
    let lines = read_lines(child.stderr.take().expect("a piped stderr"));
    let first = lines
        .recv_timeout(timeout)
        .unwrap_or_else(|err| panic!("{command:?} printed no line: {err}"));
    (child, lines, first)
}

/// How many of its last lines of standard error a failure shows per child.
const STDERR_TAIL: usize = 60;

/// The lines of `reader`, read by a thread of its own until its end; the channel disconnects
/// then.
pub fn read_lines<R: Read + Send + 'static>(reader: R) -> mpsc::Receiver<String> {
    let (sender, lines) = mpsc::channel();
    forward_lines(reader, move |line| match line {
        Some(line) => sender.send(line).is_ok(),
        None => false,
    });
    lines
}

/// Calls `send` with each line of `reader`, then with `None` at its end, on a thread of its
/// own; stops early when `send` returns false.
fn forward_lines<R: Read + Send + 'static>(
    reader: R,
    mut send: impl FnMut(Option<String>) -> bool + Send + 'static,
) {
    std::thread::spawn(move || {
        for line in BufReader::new(reader).lines() {
            let Ok(line) = line else { break };
            if !send(Some(line)) {
                return;
            }
        }
        send(None);
    });
}

/// What a child printed next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// A line of its standard output, without the line break.
    Line(String),
    /// It closed its standard output (it exited, most likely).
    Closed,
}

/// One child and what the test knows of it.
struct ChildProcess {
    label: String,
    child: Child,
    stderr: PathBuf,
    closed: bool,
    killed: bool,
}

/// The child processes of one test, each known by its index (in the order started).
pub struct Processes {
    children: Vec<ChildProcess>,
    sender: mpsc::Sender<(usize, Option<String>)>,
    output: mpsc::Receiver<(usize, Option<String>)>,
    log_dir: PathBuf,
}

impl Processes {
    /// No children yet; their standard error will go to `<log_dir>/<label>.stderr`.
    #[must_use]
    pub fn new(log_dir: &Path) -> Self {
        let (sender, output) = mpsc::channel();
        Self {
            children: Vec::new(),
            sender,
            output,
            log_dir: log_dir.to_path_buf(),
        }
    }

    /// Starts `command` with no standard input, its standard output read line by line and its
    /// standard error in a file; returns the child's index.
    ///
    /// # Panics
    /// When the stderr file cannot be created or the command cannot start.
    pub fn start(&mut self, label: &str, mut command: Command) -> usize {
        let idx = self.children.len();
        let stderr = self.log_dir.join(format!("{label}.stderr"));
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).expect("a stderr file"))
            .spawn()
            .unwrap_or_else(|e| panic!("starting {label}: {e}"));
        let stdout = child.stdout.take().expect("piped stdout");
        let sender = self.sender.clone();
        forward_lines(stdout, move |line| sender.send((idx, line)).is_ok());
        self.children.push(ChildProcess {
            label: label.to_string(),
            child,
            stderr,
            closed: false,
            killed: false,
        });
        idx
    }

    /// What any child printed next, waiting at most `timeout`; `None` when nothing came.
    pub fn next(&mut self, timeout: Duration) -> Option<(usize, Output)> {
        let received = self.output.recv_timeout(timeout).ok()?;
        Some(self.take(received))
    }

    /// What any child printed next, if it is there already.
    pub fn try_next(&mut self) -> Option<(usize, Output)> {
        let received = self.output.try_recv().ok()?;
        Some(self.take(received))
    }

    fn take(&mut self, (idx, line): (usize, Option<String>)) -> (usize, Output) {
        match line {
            Some(line) => (idx, Output::Line(line)),
            None => {
                self.children[idx].closed = true;
                (idx, Output::Closed)
            }
        }
    }

    /// The label child `idx` was started with.
    #[must_use]
    pub fn label(&self, idx: usize) -> &str {
        &self.children[idx].label
    }

    /// What child `idx` wrote to its standard error so far.
    #[must_use]
    pub fn stderr(&self, idx: usize) -> String {
        std::fs::read_to_string(&self.children[idx].stderr).unwrap_or_default()
    }

    /// Whether child `idx` closed its standard output.
    #[must_use]
    pub fn is_closed(&self, idx: usize) -> bool {
        self.children[idx].closed
    }

    /// Whether the test killed child `idx`.
    #[must_use]
    pub fn is_killed(&self, idx: usize) -> bool {
        self.children[idx].killed
    }

    /// SIGKILLs child `idx` and reaps it.
    ///
    /// # Panics
    /// When the signal cannot be sent or the child not reaped.
    pub fn kill(&mut self, idx: usize) -> ExitStatus {
        let child = &mut self.children[idx];
        child.child.kill().expect("SIGKILL");
        child.killed = true;
        child.child.wait().expect("waiting for the killed child")
    }

    /// Waits until child `idx` exits.
    ///
    /// # Panics
    /// When it cannot be waited for.
    pub fn wait(&mut self, idx: usize) -> ExitStatus {
        self.children[idx]
            .child
            .wait()
            .expect("waiting for the child")
    }

    /// Kills every child and panics with `what` and the end of each child's standard error.
    ///
    /// # Panics
    /// Always.
    pub fn fail(&mut self, what: &str) -> ! {
        let mut report = String::new();
        for child in &mut self.children {
            let _ = child.child.kill();
            let _ = child.child.wait();
            let stderr = std::fs::read_to_string(&child.stderr).unwrap_or_default();
            let lines: Vec<&str> = stderr.lines().collect();
            let tail = &lines[lines.len().saturating_sub(STDERR_TAIL)..];
            report.push_str(&format!(
                "\n--- {} stderr (its last {} lines):\n{}",
                child.label,
                tail.len(),
                tail.join("\n")
            ));
        }
        panic!("{what}{report}")
    }
}

impl Drop for Processes {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.child.kill();
            let _ = child.child.wait();
        }
    }
}
