//! Wake-ups across processes: the payloads sent with `pg_notify` right after each write
//! transaction commits, and the dedicated listener connection that hands the ones it receives
//! to the store's [`WaiterHub`] and reconnects when it is lost.

use crate::{config::PostgresConfig, error::describe, tls::Tls};
use concepts::kernel::{self, WaiterHub, Wakeup};
use std::sync::Arc;
use tokio::sync::watch;
use tokio_postgres::AsyncMessage;

/// The one channel every store of a database listens on; payloads are typed by their prefix.
pub(crate) const CHANNEL: &str = "stele";

/// The wake-ups of a transaction, however many writes shared it, are packed into messages of
/// at most this many bytes (below the server's limit of 8,000), not sent one per wake-up.
const MAX_PACKED: usize = 7_000;

/// Publishes the wake-ups of a committed write ([`kernel::wakeup_messages`]) to every listener,
/// after its `COMMIT` (why, the crate docs say) in a transaction of its own that commits
/// asynchronously. It returns once the statement is handed to the connection, without waiting
/// for the server to run it: the write has committed, and notifications are hints. A failure
/// to prepare or send it is logged, not returned; an error the server answers is dropped with
/// the answer (the server logs it).
pub(crate) async fn publish(client: &deadpool_postgres::ClientWrapper, wakeups: &[Wakeup]) {
    let payloads = kernel::wakeup_messages(wakeups, MAX_PACKED);
    if payloads.is_empty() {
        return;
    }
    let warn = |e: tokio_postgres::Error| {
        tracing::warn!(error = %e, "cannot publish notifications; waiters fall back to polling");
    };
    let statement = match client.prepare_cached(PUBLISH).await {
        Ok(statement) => statement,
        Err(e) => return warn(e),
    };
    // The first poll hands the statement to the connection, in order after the write's
    // `COMMIT`; its answer is not awaited (the connection reads and drops it).
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&CHANNEL, &payloads];
    let sent = client.execute(&statement, &params);
    let mut sent = std::pin::pin!(sent);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    if let std::task::Poll::Ready(Err(e)) = sent.as_mut().poll(&mut cx) {
        warn(e);
    }
}

/// One statement, so one implicit transaction: `set_config(..., true)` makes its commit
/// asynchronous, which is all this transaction writes.
const PUBLISH: &str = "SELECT set_config('synchronous_commit', 'off', true), pg_notify($1, p) \
    FROM UNNEST($2::text[]) AS p";

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

/// Runs the listener until `shutdown` fires (or its sender is dropped), reconnecting with
/// exponential backoff, cut short when a pooled connection of the store reaches the server.
pub(crate) async fn run_listener(
    config: PostgresConfig,
    tls: Tls,
    hub: Arc<WaiterHub>,
    state: watch::Sender<ListenerState>,
    mut shutdown: watch::Receiver<bool>,
) {
    let disconnected = |s: &mut ListenerState| {
        s.connected = false;
        s.backend_pid = None;
    };
    let pg = config.listener_pg_config();
    let mut backoff = config.listener_min_backoff;
    let mut server_seen = tls.connections();
    while !*shutdown.borrow() {
        // A connection of the store that opens from now on means the server is reachable.
        server_seen.mark_unchanged();
        let outcome = tokio::select! {
            outcome = listen_once(&pg, &tls, &hub, &state) => outcome,
            _ = shutdown.changed() => break,
        };
        state.send_modify(disconnected);
        match outcome {
            Ok(reason) => {
                tracing::warn!(%reason, "the notification listener lost its connection; reconnecting");
                backoff = config.listener_min_backoff;
                // Its own connection, and those of the store while it listened, are old news.
                server_seen.mark_unchanged();
            }
            Err(reason) => {
                tracing::warn!(%reason, ?backoff, "the notification listener cannot connect; retrying");
            }
        }
        // Another connection of the store that opened since the server is back: the listener
        // tries at once rather than sleeping out its backoff.
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            _ = server_seen.changed() => {
                tracing::debug!("another connection reached the server; the listener retries now");
            }
            _ = shutdown.changed() => break,
        }
        backoff = (backoff * 2).min(config.listener_max_backoff);
    }
    state.send_modify(disconnected);
}

/// One connection's life: connect, `LISTEN`, deliver until the connection ends. `Ok` says why
/// a connection that listened ended, `Err` why none did.
async fn listen_once(
    pg: &tokio_postgres::Config,
    tls: &Tls,
    hub: &WaiterHub,
    state: &watch::Sender<ListenerState>,
) -> Result<String, String> {
    let (client, mut connection) = tls.connect(pg).await.map_err(|e| describe(&e))?;
    let drive = async {
        loop {
            match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                Some(Ok(AsyncMessage::Notification(n))) => {
                    state.send_modify(|s| s.notifications = s.notifications.wrapping_add(1));
                    match kernel::parse_wakeup_message(n.payload()) {
                        Some(wakeups) => hub.deliver(&wakeups),
                        None => hub.wake_everyone(),
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => return describe(&e),
                None => return "the server closed the connection".to_string(),
            }
        }
    };
    let setup = async {
        client.batch_execute(&format!("LISTEN {CHANNEL}")).await?;
        let row = client.query_one("SELECT pg_backend_pid()", &[]).await?;
        row.try_get::<_, i32>(0)
    };
    tokio::pin!(drive);
    let pid = tokio::select! {
        reason = &mut drive => return Err(reason),
        pid = setup => pid.map_err(|e| describe(&e))?,
    };
    // Anything committed while no listener was connected went unheard: everyone looks again,
    // before the state says "connected" (which `connect` waits for): a waiter that registers
    // after that is woken by writes only.
    hub.wake_everyone();
    state.send_modify(|s| {
        s.connected = true;
        s.backend_pid = Some(pid);
        s.connects = s.connects.wrapping_add(1);
    });
    let reason = drive.await;
    drop(client);
    Ok(reason)
}
