#!/usr/bin/env bash
# A throw-away PostgreSQL 15 server on loopback for development and CI.
#
# Source it and call the functions:
#     source .ci/postgres.sh && pg_start     # exports STELE_TEST_POSTGRES_URL
#     pg_stop
# or run it:
#     bash .ci/postgres.sh start|stop|status
#
# Settings (environment, all optional):
#     STELE_PG_DIR   where the data directory, socket and log live (default /tmp/stele-pg)
#     STELE_PG_PORT  the TCP port on 127.0.0.1 (default 54329)
#     STELE_PG_BIN   the PostgreSQL binaries (default /usr/lib/postgresql/15/bin)
#     STELE_PG_OPTIONS  more server options, e.g. "-c ssl=on -c ssl_cert_file=..."
#     STELE_PG_HBA_FIRST  one pg_hba.conf line put before the trust lines (a new data
#                    directory only), e.g. a password rule for one role
#
# `bash .ci/postgres.sh crash` stops the server abruptly (`pg_ctl stop -m immediate`, as a
# power cut would); `start` then recovers it from its WAL.
#
# The scripts run as root; the server runs as the `postgres` OS user. Authentication is
# `trust`, on loopback only. `fsync` stays on: durability is what the tests check.
# Starting is idempotent: a server that already runs from the same directory is reused.

_stele_pg_settings() {
    STELE_PG_DIR="${STELE_PG_DIR:-/tmp/stele-pg}"
    STELE_PG_PORT="${STELE_PG_PORT:-54329}"
    STELE_PG_BIN="${STELE_PG_BIN:-/usr/lib/postgresql/15/bin}"
    _STELE_PG_DATA="$STELE_PG_DIR/data"
    _STELE_PG_SOCKET="$STELE_PG_DIR/socket"
    _STELE_PG_LOG="$STELE_PG_DIR/server.log"
}

# Runs a command as the `postgres` OS user (or as-is when we already are that user).
_stele_pg_as_postgres() {
    if [ "$(id -un)" = "postgres" ]; then
        "$@"
    else
        runuser -u postgres -- "$@"
    fi
}

# Installs the PostgreSQL 15 server from Debian's packages when its binaries are missing.
_stele_pg_ensure_binaries() {
    if [ -x "$STELE_PG_BIN/pg_ctl" ]; then
        return 0
    fi
    echo "postgres.sh: $STELE_PG_BIN/pg_ctl is missing; installing postgresql-15" >&2
    if [ "$(id -u)" != "0" ]; then
        echo "postgres.sh: cannot install postgresql-15 without root" >&2
        return 1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
            postgresql-15 >/dev/null || return 1
    # The Debian package may create and start its own cluster; ours is separate, so stop it
    # to leave the machine's resources to the tests (best effort).
    if command -v pg_ctlcluster >/dev/null 2>&1; then
        pg_ctlcluster 15 main stop >/dev/null 2>&1 || true
    fi
    [ -x "$STELE_PG_BIN/pg_ctl" ]
}

# Starts the server (or reuses a running one) and exports STELE_TEST_POSTGRES_URL.
pg_start() {
    _stele_pg_settings
    _stele_pg_ensure_binaries || return 1
    export STELE_TEST_POSTGRES_URL="postgres://postgres@127.0.0.1:${STELE_PG_PORT}/postgres"

    if ! id postgres >/dev/null 2>&1; then
        echo "postgres.sh: the OS user 'postgres' does not exist" >&2
        return 1
    fi

    if [ -f "$_STELE_PG_DATA/PG_VERSION" ] &&
        _stele_pg_as_postgres "$STELE_PG_BIN/pg_ctl" -D "$_STELE_PG_DATA" status >/dev/null 2>&1; then
        echo "postgres.sh: reusing the server running in $_STELE_PG_DATA on port $STELE_PG_PORT"
        return 0
    fi

    install -d -m 0755 "$STELE_PG_DIR"
    install -d -o postgres -m 0700 "$_STELE_PG_DATA"
    install -d -o postgres -m 0755 "$_STELE_PG_SOCKET"
    touch "$_STELE_PG_LOG"
    chown postgres "$_STELE_PG_LOG"

    if [ ! -f "$_STELE_PG_DATA/PG_VERSION" ]; then
        _stele_pg_as_postgres "$STELE_PG_BIN/initdb" -D "$_STELE_PG_DATA" -U postgres \
            --auth-local=trust --auth-host=trust --encoding=UTF8 --locale=C.UTF-8 \
            >"$STELE_PG_DIR/initdb.log" 2>&1 || {
            echo "postgres.sh: initdb failed:" >&2
            cat "$STELE_PG_DIR/initdb.log" >&2
            return 1
        }
        # Loopback only, trust; nothing else is accepted.
        printf '%s\n' "${STELE_PG_HBA_FIRST:-# (no STELE_PG_HBA_FIRST line)}" >"$_STELE_PG_DATA/pg_hba.conf"
        cat >>"$_STELE_PG_DATA/pg_hba.conf" <<'EOF'
local   all   all                 trust
host    all   all   127.0.0.1/32  trust
host    all   all   ::1/128       trust
EOF
        chown postgres "$_STELE_PG_DATA/pg_hba.conf"
    fi

    _stele_pg_as_postgres "$STELE_PG_BIN/pg_ctl" -D "$_STELE_PG_DATA" -l "$_STELE_PG_LOG" -w -t 60 \
        -o "-c listen_addresses=127.0.0.1 -c port=$STELE_PG_PORT -c unix_socket_directories=$_STELE_PG_SOCKET -c max_connections=300 -c shared_buffers=128MB -c fsync=on -c synchronous_commit=on ${STELE_PG_OPTIONS:-}" \
        start >/dev/null || {
        echo "postgres.sh: the server did not start; its log:" >&2
        tail -n 50 "$_STELE_PG_LOG" >&2
        return 1
    }
    echo "postgres.sh: started PostgreSQL on 127.0.0.1:$STELE_PG_PORT (data in $_STELE_PG_DATA)"
}

# Stops the server (fast shutdown). Stopping a server that does not run is not an error.
pg_stop() {
    _stele_pg_settings
    if [ -f "$_STELE_PG_DATA/PG_VERSION" ] &&
        _stele_pg_as_postgres "$STELE_PG_BIN/pg_ctl" -D "$_STELE_PG_DATA" status >/dev/null 2>&1; then
        _stele_pg_as_postgres "$STELE_PG_BIN/pg_ctl" -D "$_STELE_PG_DATA" stop -m fast -w >/dev/null
        echo "postgres.sh: stopped the server in $_STELE_PG_DATA"
    else
        echo "postgres.sh: no server runs in $_STELE_PG_DATA"
    fi
}

# Stops the server abruptly: no checkpoint, sessions cut, as a crash would.
# Crashing a server that does not run is not an error.
pg_crash() {
    _stele_pg_settings
    if [ -f "$_STELE_PG_DATA/PG_VERSION" ] &&
        _stele_pg_as_postgres "$STELE_PG_BIN/pg_ctl" -D "$_STELE_PG_DATA" status >/dev/null 2>&1; then
        _stele_pg_as_postgres "$STELE_PG_BIN/pg_ctl" -D "$_STELE_PG_DATA" stop -m immediate -w >/dev/null
        echo "postgres.sh: crashed the server in $_STELE_PG_DATA (stop -m immediate)"
    else
        echo "postgres.sh: no server runs in $_STELE_PG_DATA"
    fi
}

# Run as a script: `bash .ci/postgres.sh start|stop|crash|status`.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    set -euo pipefail
    case "${1:-}" in
    start)
        pg_start
        echo "export STELE_TEST_POSTGRES_URL=$STELE_TEST_POSTGRES_URL"
        ;;
    stop) pg_stop ;;
    crash) pg_crash ;;
    status)
        _stele_pg_settings
        _stele_pg_as_postgres "$STELE_PG_BIN/pg_ctl" -D "$_STELE_PG_DATA" status
        ;;
    *)
        echo "usage: bash $0 start|stop|crash|status" >&2
        exit 2
        ;;
    esac
fi
