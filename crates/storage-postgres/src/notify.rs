//! Wake-ups across processes: the payloads sent with `pg_notify` right after each write
//! transaction commits, the in-process waiter registry they are dispatched to, and the dedicated
//! listener connection that receives them and reconnects when it is lost.

use crate::{codec::micros, config::PostgresConfig};
use chrono::{DateTime, Utc};
use concepts::FunctionFqn;
use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::Duration,
};
use tokio::sync::{oneshot, watch};
use tokio_postgres::AsyncMessage;

/// The one channel every store of a database listens on; payloads are typed by their prefix.
pub(crate) const CHANNEL: &str = "stele";

/// Payloads longer than this are replaced by a wake-everyone payload (the server's limit is
/// 8000 bytes).
const MAX_PAYLOAD: usize = 1000;

/// What a committed write may have changed, as sent to every listener of the database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Wakeup {
    /// An execution of `ffqn` became pending at `at_micros` (`p:<micros>:<ffqn>`).
    Pending {
        /// The function.
        ffqn: String,
        /// When it is due, in microseconds.
        at_micros: i64,
    },
    /// Execution's responses grew (`r:<execution id>`).
    Responses(String),
    /// Execution finished (`f:<execution id>`).
    Finished(String),
    /// Anything may have happened (`*`): wake every waiter.
    All,
}

impl Wakeup {
    /// The `pg_notify` payload.
    pub(crate) fn payload(&self) -> String {
        let payload = match self {
            Self::Pending { ffqn, at_micros } => format!("p:{at_micros}:{ffqn}"),
            Self::Responses(id) => format!("r:{id}"),
            Self::Finished(id) => format!("f:{id}"),
            Self::All => "*".to_string(),
        };
        if payload.len() > MAX_PAYLOAD {
            "*".to_string()
        } else {
            payload
        }
    }

    /// Parses a payload; unknown payloads wake everyone (a newer binary may send them).
    pub(crate) fn parse(payload: &str) -> Self {
        if let Some(rest) = payload.strip_prefix("p:")
            && let Some((at, ffqn)) = rest.split_once(':')
            && let Ok(at_micros) = at.parse::<i64>()
        {
            return Self::Pending {
                ffqn: ffqn.to_string(),
                at_micros,
            };
        }
        if let Some(id) = payload.strip_prefix("r:") {
            return Self::Responses(id.to_string());
        }
        if let Some(id) = payload.strip_prefix("f:") {
            return Self::Finished(id.to_string());
        }
        Self::All
    }
}

/// Publishes `wakeups` to every listener of the database, in a transaction of its own that
/// commits asynchronously (`synchronous_commit = off` for it alone): it is sent after the
/// write committed, so it is never seen before the write, and it does not hold the server's
/// notification lock across a WAL flush (see the crate docs). A failure is logged, not
/// returned: the write itself has committed, and notifications are hints.
pub(crate) async fn publish(client: &deadpool_postgres::ClientWrapper, wakeups: &Wakeups) {
    let payloads = wakeups.payloads();
    if payloads.is_empty() {
        return;
    }
    let result = async {
        let statement = client.prepare_cached(PUBLISH).await?;
        client.execute(&statement, &[&CHANNEL, &payloads]).await
    };
    if let Err(e) = result.await {
        tracing::warn!(error = %e, "cannot publish notifications; waiters fall back to polling");
    }
}

/// One statement, so one implicit transaction: `set_config(..., true)` makes its commit
/// asynchronous, which is all this transaction writes.
const PUBLISH: &str = "SELECT set_config('synchronous_commit', 'off', true), pg_notify($1, p) \
    FROM UNNEST($2::text[]) AS p";

/// The wake-ups of one transaction, deduplicated: per function only the earliest pending time.
#[derive(Debug, Default)]
pub(crate) struct Wakeups {
    pending: BTreeMap<String, i64>,
    responses: std::collections::BTreeSet<String>,
    finished: std::collections::BTreeSet<String>,
}

impl Wakeups {
    /// An execution of `ffqn` became pending at `at`.
    pub(crate) fn pending(&mut self, ffqn: &FunctionFqn, at: DateTime<Utc>) {
        let at = micros(at);
        self.pending
            .entry(ffqn.to_string())
            .and_modify(|t| *t = (*t).min(at))
            .or_insert(at);
    }

    /// The responses of `execution_id` grew.
    pub(crate) fn responses(&mut self, execution_id: &str) {
        self.responses.insert(execution_id.to_string());
    }

    /// `execution_id` finished.
    pub(crate) fn finished(&mut self, execution_id: &str) {
        self.finished.insert(execution_id.to_string());
    }

    /// Every wake-up.
    pub(crate) fn to_vec(&self) -> Vec<Wakeup> {
        let pending = self.pending.iter().map(|(ffqn, at)| Wakeup::Pending {
            ffqn: ffqn.clone(),
            at_micros: *at,
        });
        let responses = self.responses.iter().cloned().map(Wakeup::Responses);
        let finished = self.finished.iter().cloned().map(Wakeup::Finished);
        pending.chain(responses).chain(finished).collect()
    }

    /// The payloads to send.
    pub(crate) fn payloads(&self) -> Vec<String> {
        self.to_vec().iter().map(Wakeup::payload).collect()
    }
}

/// A waiter of `wait_for_pending`.
struct PendingWaiter {
    ffqns: Vec<String>,
    /// Wakes on a function of `ffqns` pending at or before this (microseconds).
    at_micros: i64,
    /// When it registered: its horizon moves on with real time while it waits.
    registered: tokio::time::Instant,
    tx: oneshot::Sender<()>,
}

type ExecutionWaiters = HashMap<String, BTreeMap<u64, oneshot::Sender<()>>>;

#[derive(Default)]
struct Waiters {
    closed: bool,
    next_id: u64,
    pending: BTreeMap<u64, PendingWaiter>,
    responses: ExecutionWaiters,
    finished: ExecutionWaiters,
}

/// Which registry a [`Registration`] is in.
#[derive(Debug, Clone)]
enum WaiterKey {
    Pending(u64),
    Responses(String, u64),
    Finished(String, u64),
}

/// The in-process waiter registry. Every wait registers before it checks the database, so a
/// wake-up for a write that commits after the check finds the registration.
#[derive(Default)]
pub(crate) struct Hub {
    waiters: Mutex<Waiters>,
}

/// A waiter's registration: await [`Registration::woken`]; dropping it removes the entry.
pub(crate) struct Registration {
    hub: Arc<Hub>,
    key: WaiterKey,
    rx: Option<oneshot::Receiver<()>>,
}

impl Registration {
    /// Returns when woken, or when the store closes.
    pub(crate) async fn woken(&mut self) {
        if let Some(rx) = self.rx.take() {
            // Woken, or the sender was dropped by `close`: either way, look again.
            let _ = rx.await;
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut waiters = self.hub.lock();
        match &self.key {
            WaiterKey::Pending(id) => {
                waiters.pending.remove(id);
            }
            WaiterKey::Responses(execution_id, id) => {
                unregister(&mut waiters.responses, execution_id, *id);
            }
            WaiterKey::Finished(execution_id, id) => {
                unregister(&mut waiters.finished, execution_id, *id);
            }
        }
    }
}

fn unregister(waiters: &mut ExecutionWaiters, execution_id: &str, id: u64) {
    if let Some(map) = waiters.get_mut(execution_id) {
        map.remove(&id);
        if map.is_empty() {
            waiters.remove(execution_id);
        }
    }
}

fn wake_execution(waiters: &mut ExecutionWaiters, execution_id: &str) {
    if let Some(map) = waiters.remove(execution_id) {
        for (_, tx) in map {
            let _ = tx.send(());
        }
    }
}

impl Hub {
    fn lock(&self) -> MutexGuard<'_, Waiters> {
        // Every section below leaves the maps consistent, so a poisoned lock is still usable.
        self.waiters.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a `wait_for_pending` waiter.
    pub(crate) fn register_pending(
        self: &Arc<Self>,
        ffqns: Arc<[FunctionFqn]>,
        at: DateTime<Utc>,
    ) -> Registration {
        let mut waiters = self.lock();
        let id = next_id(&mut waiters);
        let (tx, rx) = oneshot::channel();
        if !waiters.closed {
            waiters.pending.insert(
                id,
                PendingWaiter {
                    ffqns: ffqns.iter().map(ToString::to_string).collect(),
                    at_micros: micros(at),
                    registered: tokio::time::Instant::now(),
                    tx,
                },
            );
        }
        Registration {
            hub: Arc::clone(self),
            key: WaiterKey::Pending(id),
            rx: Some(rx),
        }
    }

    /// Registers a waiter for new responses of `execution_id`.
    pub(crate) fn register_responses(self: &Arc<Self>, execution_id: &str) -> Registration {
        self.register_execution(execution_id, false)
    }

    /// Registers a waiter for `execution_id` to finish.
    pub(crate) fn register_finished(self: &Arc<Self>, execution_id: &str) -> Registration {
        self.register_execution(execution_id, true)
    }

    fn register_execution(self: &Arc<Self>, execution_id: &str, finished: bool) -> Registration {
        let mut waiters = self.lock();
        let id = next_id(&mut waiters);
        let (tx, rx) = oneshot::channel();
        if !waiters.closed {
            let map = if finished {
                &mut waiters.finished
            } else {
                &mut waiters.responses
            };
            map.entry(execution_id.to_string())
                .or_default()
                .insert(id, tx);
        }
        let key = if finished {
            WaiterKey::Finished(execution_id.to_string(), id)
        } else {
            WaiterKey::Responses(execution_id.to_string(), id)
        };
        Registration {
            hub: Arc::clone(self),
            key,
            rx: Some(rx),
        }
    }

    /// Wakes (and removes) the waiters a wake-up concerns.
    pub(crate) fn dispatch(&self, wakeup: &Wakeup) {
        let mut waiters = self.lock();
        match wakeup {
            Wakeup::Pending { ffqn, at_micros } => {
                let woken: Vec<u64> = waiters
                    .pending
                    .iter()
                    .filter(|(_, w)| {
                        let waited =
                            i64::try_from(w.registered.elapsed().as_micros()).unwrap_or(i64::MAX);
                        *at_micros <= w.at_micros.saturating_add(waited) && w.ffqns.contains(ffqn)
                    })
                    .map(|(id, _)| *id)
                    .collect();
                for id in woken {
                    if let Some(waiter) = waiters.pending.remove(&id) {
                        let _ = waiter.tx.send(());
                    }
                }
            }
            Wakeup::Responses(execution_id) => {
                wake_execution(&mut waiters.responses, execution_id);
            }
            Wakeup::Finished(execution_id) => {
                wake_execution(&mut waiters.finished, execution_id);
            }
            Wakeup::All => wake_all(&mut waiters),
        }
    }

    /// Wakes every waiter once (after the listener reconnected: anything may have been
    /// missed).
    pub(crate) fn wake_all(&self) {
        wake_all(&mut self.lock());
    }

    /// Releases every waiter and refuses new registrations.
    pub(crate) fn close(&self) {
        let mut waiters = self.lock();
        waiters.closed = true;
        waiters.pending.clear();
        waiters.responses.clear();
        waiters.finished.clear();
    }

    /// `(wait_for_pending, subscribe_to_next_responses, wait_for_finished_result)` waiters.
    pub(crate) fn counts(&self) -> (usize, usize, usize) {
        let waiters = self.lock();
        (
            waiters.pending.len(),
            waiters.responses.values().map(BTreeMap::len).sum(),
            waiters.finished.values().map(BTreeMap::len).sum(),
        )
    }
}

fn next_id(waiters: &mut Waiters) -> u64 {
    let id = waiters.next_id;
    waiters.next_id = waiters.next_id.wrapping_add(1);
    id
}

fn wake_all(waiters: &mut Waiters) {
    for (_, waiter) in std::mem::take(&mut waiters.pending) {
        let _ = waiter.tx.send(());
    }
    for (_, map) in std::mem::take(&mut waiters.responses) {
        for (_, tx) in map {
            let _ = tx.send(());
        }
    }
    for (_, map) in std::mem::take(&mut waiters.finished) {
        for (_, tx) in map {
            let _ = tx.send(());
        }
    }
}

/// The state of a store's listener connection.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListenerState {
    /// True while the listener is connected and listening.
    pub connected: bool,
    /// The server process id of the listener's connection, while connected.
    pub backend_pid: Option<i32>,
    /// How many times the listener has connected (1 after the first connection; each
    /// reconnection adds one).
    pub connects: u64,
    /// How many notifications it has received.
    pub notifications: u64,
}

/// Runs the listener until `shutdown` fires (or its sender is dropped): connects, `LISTEN`s,
/// dispatches notifications to `hub`, and reconnects with exponential backoff when the
/// connection is lost, waking every waiter after each (re)connection.
pub(crate) async fn run_listener(
    config: PostgresConfig,
    hub: Arc<Hub>,
    state: watch::Sender<ListenerState>,
    shutdown: watch::Receiver<bool>,
) {
    listen_until_shutdown(config, hub, &state, shutdown).await;
    state.send_modify(|s| {
        s.connected = false;
        s.backend_pid = None;
    });
}

async fn listen_until_shutdown(
    config: PostgresConfig,
    hub: Arc<Hub>,
    state: &watch::Sender<ListenerState>,
    mut shutdown: watch::Receiver<bool>,
) {
    let pg = config.listener_pg_config();
    let mut backoff = config.listener_min_backoff;
    loop {
        if *shutdown.borrow() {
            return;
        }
        let outcome = tokio::select! {
            outcome = listen_once(&pg, &hub, state) => outcome,
            _ = shutdown.changed() => return,
        };
        state.send_modify(|s| {
            s.connected = false;
            s.backend_pid = None;
        });
        match outcome {
            Ok(ListenOutcome::WasConnected(reason)) => {
                tracing::warn!(%reason, "the notification listener lost its connection; reconnecting");
                backoff = config.listener_min_backoff;
            }
            Ok(ListenOutcome::NeverConnected(reason)) | Err(reason) => {
                tracing::warn!(%reason, ?backoff, "the notification listener cannot connect; retrying");
            }
        }
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            _ = shutdown.changed() => return,
        }
        backoff = (backoff * 2).min(config.listener_max_backoff);
    }
}

enum ListenOutcome {
    /// It was listening, then the connection ended.
    WasConnected(String),
    /// The connection failed before it listened.
    NeverConnected(String),
}

/// One connection's life: connect, `LISTEN`, dispatch until the connection ends.
async fn listen_once(
    pg: &tokio_postgres::Config,
    hub: &Hub,
    state: &watch::Sender<ListenerState>,
) -> Result<ListenOutcome, String> {
    let (client, mut connection) = pg
        .connect(tokio_postgres::NoTls)
        .await
        .map_err(|e| e.to_string())?;
    let drive = async {
        loop {
            match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                Some(Ok(AsyncMessage::Notification(n))) => {
                    state.send_modify(|s| s.notifications = s.notifications.wrapping_add(1));
                    hub.dispatch(&Wakeup::parse(n.payload()));
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => return e.to_string(),
                None => return "the server closed the connection".to_string(),
            }
        }
    };
    let setup = async {
        client
            .batch_execute(&format!("LISTEN {CHANNEL}"))
            .await
            .map_err(|e| e.to_string())?;
        let pid: i32 = client
            .query_one("SELECT pg_backend_pid()", &[])
            .await
            .map_err(|e| e.to_string())?
            .get(0);
        Ok::<i32, String>(pid)
    };
    tokio::pin!(drive);
    let pid = tokio::select! {
        reason = &mut drive => return Ok(ListenOutcome::NeverConnected(reason)),
        pid = setup => pid?,
    };
    state.send_modify(|s| {
        s.connected = true;
        s.backend_pid = Some(pid);
        s.connects = s.connects.wrapping_add(1);
    });
    // Anything committed while no listener was connected went unheard: everyone looks again.
    hub.wake_all();
    let reason = drive.await;
    drop(client);
    Ok(ListenOutcome::WasConnected(reason))
}

/// How long `connect` waits for the listener's first connection at most.
pub(crate) fn first_listen_timeout(config: &PostgresConfig) -> Duration {
    config.connect_timeout.saturating_mul(2)
}
