//! WAL checkpoints off the writer's commit path, on a thread with a connection of its own:
//! SQLite's automatic checkpoint, inside the `COMMIT` that crosses its threshold, would hold up
//! everything batched with it. A checkpointer overtaken by a steady stream of commits never
//! copies the log to its end, so at [`INLINE_CHECKPOINT_FRAMES`] the writer checkpoints itself.

use rusqlite::{Connection, OpenFlags};
use std::{
    cell::Cell,
    ffi::c_int,
    path::Path,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
        mpsc,
    },
    thread::JoinHandle,
    time::Duration,
};

/// The writer asks for a checkpoint each time its commits have added this many frames (pages)
/// to the log: SQLite's default automatic checkpoint threshold.
pub(crate) const CHECKPOINT_FRAMES: u32 = 1000;

/// A log this long is checkpointed by the writer itself, between two transactions.
pub(crate) const INLINE_CHECKPOINT_FRAMES: u32 = 4 * CHECKPOINT_FRAMES;

thread_local! {
    /// The frames in the log after the last commit of this thread's connection, as the WAL
    /// hook reported them (each writer thread owns one connection).
    static WAL_FRAMES: Cell<u32> = const { Cell::new(0) };
}

/// The WAL hook of the writer's connection: notes the log's frames after a commit.
#[expect(
    clippy::unnecessary_wraps,
    reason = "the signature rusqlite's WAL hook requires"
)]
fn note_wal_frames(_wal: &rusqlite::hooks::Wal, frames: c_int) -> rusqlite::Result<()> {
    WAL_FRAMES.set(u32::try_from(frames).unwrap_or(0));
    Ok(())
}

/// The writer's side of the checkpointer thread.
pub(crate) struct Checkpointer {
    wake: Option<mpsc::SyncSender<()>>,
    thread: Option<JoinHandle<()>>,
    /// The log's frames when the writer last asked for a checkpoint.
    asked_at: u32,
    /// The checkpoints the thread completed (tests wait for none: `stop` joins the thread).
    #[cfg(test)]
    done: Arc<AtomicU64>,
}

impl Checkpointer {
    /// Opens the checkpointer's connection to `path` and starts its thread; on success the
    /// writer's connection `writer` stops checkpointing in its commits. `None` (and a warning)
    /// if either fails: the writer then keeps SQLite's automatic checkpoint.
    pub(crate) fn start(writer: &Connection, path: &Path, busy_timeout: Duration) -> Option<Self> {
        let (wake, woken) = mpsc::sync_channel::<()>(1);
        let done = Arc::new(AtomicU64::new(0));
        let (thread_done, thread_path) = (Arc::clone(&done), path.to_path_buf());
        let started = writer
            .pragma_query_value(None, "synchronous", |row| row.get::<_, i64>(0))
            .and_then(|synchronous| open(path, synchronous, busy_timeout))
            .map_err(|err| format!("cannot open the SQLite checkpointer's connection: {err}"))
            .and_then(|conn| {
                std::thread::Builder::new()
                    .name("stele-sqlite-checkpointer".to_string())
                    .spawn(move || run(&conn, &thread_path, &woken, &thread_done))
                    .map_err(|err| format!("cannot start the SQLite checkpointer: {err}"))
            });
        let warn = |err: &String| {
            tracing::warn!(path = %path.display(), "{err}; the writer checkpoints in its commits");
        };
        let thread = started.inspect_err(warn).ok()?;
        WAL_FRAMES.set(0);
        writer.wal_hook(Some(note_wal_frames));
        Some(Self {
            wake: Some(wake),
            thread: Some(thread),
            asked_at: 0,
            #[cfg(test)]
            done,
        })
    }

    /// After a commit and its replies: asks for a checkpoint once the log has grown by
    /// [`CHECKPOINT_FRAMES`] since the last request, or runs one itself at
    /// [`INLINE_CHECKPOINT_FRAMES`].
    pub(crate) fn after_commit(&mut self, writer: &Connection, path: &Path) {
        let frames = WAL_FRAMES.get();
        if frames < self.asked_at {
            self.asked_at = 0;
        }
        if frames >= INLINE_CHECKPOINT_FRAMES {
            // Busy while the checkpointer copies: the next commit tries again.
            let checkpoint = writer.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
            if let Err(err) = checkpoint {
                tracing::warn!(path = %path.display(), "checkpointing the SQLite WAL on the writer: {err}");
            }
            return;
        }
        if frames >= self.asked_at.saturating_add(CHECKPOINT_FRAMES)
            && let Some(wake) = &self.wake
        {
            self.asked_at = frames;
            // A full channel means a request is already pending: that one covers this too.
            let _ = wake.try_send(());
        }
    }

    /// How many checkpoints the thread has completed.
    #[cfg(test)]
    pub(crate) fn checkpoints_done(&self) -> u64 {
        self.done.load(Ordering::SeqCst)
    }

    /// Stops the thread after the checkpoint it is running, and closes its connection.
    pub(crate) fn stop(&mut self) {
        self.wake = None;
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!("the SQLite checkpointer thread panicked");
        }
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn open(path: &Path, synchronous: i64, busy_timeout: Duration) -> rusqlite::Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags)?;
    conn.busy_timeout(busy_timeout)?;
    // A checkpoint syncs the database file as the store's `synchronous` says.
    conn.pragma_update(None, "synchronous", synchronous)?;
    // This connection never writes rows; it must not checkpoint on its own account either.
    conn.pragma_update(None, "wal_autocheckpoint", 0)?;
    Ok(conn)
}

/// The thread: one passive checkpoint per request, until the writer hangs up.
fn run(conn: &Connection, path: &Path, woken: &mpsc::Receiver<()>, done: &AtomicU64) {
    while woken.recv().is_ok() {
        let outcome = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| {
            Ok((row.get::<_, i64>(1)?, row.get::<_, i64>(2)?))
        });
        match outcome {
            Ok((log, copied)) => {
                tracing::trace!(path = %path.display(), log, copied, "checkpointed the SQLite WAL");
            }
            Err(err) => {
                tracing::warn!(path = %path.display(), "checkpointing the SQLite WAL: {err}");
            }
        }
        done.fetch_add(1, Ordering::SeqCst);
    }
}
