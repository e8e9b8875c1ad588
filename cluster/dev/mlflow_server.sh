#!/usr/bin/env bash
# A private PostgreSQL cluster and an MLflow tracking server on it, for development and
# tests (not systemd: initdb + pg_ctl in a folder of our own, owned by postgres).
#
#   cluster/dev/mlflow_server.sh start|stop|status
#
# Settings (environment): RCPF_MLFLOW_DIR (state folder, default /tmp/rcpforge-mlflow),
# RCPF_MLFLOW_PORT (5055), RCPF_PG_PORT (5433), RCPF_MLFLOW_HOST (127.0.0.1: bind to
# loopback unless told otherwise), RCPF_PG_PASSWORD (generated once, kept in DIR/pgpass).
# `start` prints the tracking URL and the backend-store URI (password masked) and writes
# the full backend URI to DIR/backend_uri (mode 600).
set -euo pipefail

DIR=${RCPF_MLFLOW_DIR:-/tmp/rcpforge-mlflow}
PORT=${RCPF_MLFLOW_PORT:-5055}
PG_PORT=${RCPF_PG_PORT:-5433}
HOST=${RCPF_MLFLOW_HOST:-127.0.0.1}
DB=mlflow
DB_USER=rcpforge
PYTHON=${PYTHON:-python3}

die() { echo "mlflow_server.sh: $*" >&2; exit 1; }

pg_bin() {
    local found
    found=$(command -v pg_ctl 2>/dev/null || ls -d /usr/lib/postgresql/*/bin/pg_ctl 2>/dev/null | sort -V | tail -1 || true)
    [ -n "$found" ] && dirname "$found"
}

ensure_postgres() {
    if [ -z "$(pg_bin)" ]; then
        [ "$(id -u)" = 0 ] || die "PostgreSQL is not installed and we are not root: apt-get install -y postgresql"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >/dev/null || die "apt-get install postgresql failed"
    fi
    PG=$(pg_bin)
    [ -n "$PG" ] || die "pg_ctl not found after installing postgresql"
}

# Run a command as the cluster's owner: postgres when we are root, ourselves otherwise.
as_owner() {
    if [ "$(id -u)" = 0 ]; then su postgres -s /bin/sh -c "$1"; else sh -c "$1"; fi
}

pg_running() { [ -f "$DIR/pg/data/postmaster.pid" ] && as_owner "$PG/pg_ctl -D '$DIR/pg/data' status" >/dev/null 2>&1; }

start_postgres() {
    mkdir -p "$DIR/pg"
    if [ "$(id -u)" = 0 ]; then
        chmod o+x "$DIR"  # postgres must reach DIR/pg (mktemp makes folders 700)
        chown postgres "$DIR/pg"
    fi
    if [ ! -f "$DIR/pgpass" ]; then
        (umask 077; "$PYTHON" -c 'import secrets; print(secrets.token_hex(16))' > "$DIR/pgpass")
    fi
    PASSWORD=${RCPF_PG_PASSWORD:-$(cat "$DIR/pgpass")}
    if [ ! -d "$DIR/pg/data" ]; then
        as_owner "$PG/initdb -D '$DIR/pg/data' -A trust -U postgres >'$DIR/pg/initdb.log' 2>&1" \
            || die "initdb failed, see $DIR/pg/initdb.log"
    fi
    if ! pg_running; then
        as_owner "$PG/pg_ctl -D '$DIR/pg/data' -w -l '$DIR/pg/log' -o \"-p $PG_PORT -k '$DIR/pg' -c listen_addresses=127.0.0.1\" start >/dev/null" \
            || die "PostgreSQL did not start, see $DIR/pg/log"
    fi
    # Idempotent: the role gets the (possibly new) password, the database is made once.
    as_owner "psql -q -h '$DIR/pg' -p $PG_PORT -U postgres -d postgres -v ON_ERROR_STOP=1 >/dev/null" <<SQL
DO \$\$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$DB_USER') THEN CREATE ROLE $DB_USER LOGIN; END IF;
END \$\$;
ALTER ROLE $DB_USER PASSWORD '$PASSWORD';
SELECT 'CREATE DATABASE $DB OWNER $DB_USER' WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = '$DB')\gexec
SQL
    BACKEND="postgresql+psycopg2://$DB_USER:$PASSWORD@127.0.0.1:$PG_PORT/$DB"
    (umask 077; echo "$BACKEND" > "$DIR/backend_uri")
}

health() { "$PYTHON" - "$1" <<'PY'
import sys, urllib.request
try:
    sys.exit(0 if urllib.request.urlopen(sys.argv[1], timeout=2).status == 200 else 1)
except Exception:
    sys.exit(1)
PY
}

server_running() { [ -f "$DIR/mlflow.pid" ] && kill -0 "$(cat "$DIR/mlflow.pid")" 2>/dev/null; }

start() {
    ensure_postgres
    start_postgres
    mkdir -p "$DIR/artifacts"
    if ! server_running; then
        # The schema is created once here, before any server worker or client opens it:
        # concurrent first opens race on the migration.
        "$PYTHON" -m mlflow db upgrade "$BACKEND" >"$DIR/upgrade.log" 2>&1 || die "mlflow db upgrade failed, see $DIR/upgrade.log"
        # No job runner: MLflow 3 otherwise starts a pool of huey consumers (each a whole
        # Python with mlflow imported) for GenAI jobs rcpforge never submits.
        MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false setsid "$PYTHON" -m mlflow server --backend-store-uri "$BACKEND" --default-artifact-root "$DIR/artifacts" \
            --host "$HOST" --port "$PORT" --workers 2 >"$DIR/mlflow.log" 2>&1 </dev/null &
        echo $! > "$DIR/mlflow.pid"
    fi
    local url="http://127.0.0.1:$PORT"
    for _ in $(seq 1 120); do
        if health "$url/health"; then
            echo "tracking: $url"
            echo "backend: postgresql+psycopg2://$DB_USER:***@127.0.0.1:$PG_PORT/$DB (full URI in $DIR/backend_uri)"
            return 0
        fi
        server_running || die "mlflow server exited, see $DIR/mlflow.log"
        sleep 0.5
    done
    die "mlflow server not healthy after 60 s, see $DIR/mlflow.log"
}

stop() {
    if server_running; then
        local pid; pid=$(cat "$DIR/mlflow.pid")
        kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
        kill -KILL -- "-$pid" 2>/dev/null || true
    fi
    rm -f "$DIR/mlflow.pid"
    PG=$(pg_bin || true)
    if [ -n "$PG" ] && pg_running; then
        as_owner "$PG/pg_ctl -D '$DIR/pg/data' -m fast -w stop >/dev/null" || true
    fi
    echo "stopped"
}

status() {
    PG=$(pg_bin || true)
    local rc=0
    if [ -n "$PG" ] && pg_running; then echo "postgresql: running on 127.0.0.1:$PG_PORT"; else echo "postgresql: stopped"; rc=1; fi
    if server_running && health "http://127.0.0.1:$PORT/health"; then echo "mlflow: healthy on http://127.0.0.1:$PORT"
    else echo "mlflow: not running"; rc=1; fi
    return $rc
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) status ;;
    *) die "usage: $0 start|stop|status" ;;
esac
