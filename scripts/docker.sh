#!/usr/bin/env bash
# Docker for the sandbox backend: install and start the engine, build the sandbox images.
#
#   scripts/docker.sh [engine|images|all]   (default: all)
#   source scripts/docker.sh; docker_engine_ensure && docker_images_build
#
# engine: when `docker info` fails, installs Debian's docker.io (+ debootstrap for the base image)
#         if we are root, then starts dockerd (systemd when it runs, else in the background, logging
#         to /var/log/rcb-dockerd.log) and waits up to 60 s for it. Retries without iptables or with
#         the vfs storage driver when the kernel refuses those.
# images: builds the offline base image and the environment images of the demo and test problem
#         sets (python -m benchmark_core.sandbox.docker build); existing tags are reused.
# A production host gets Docker the same way (or from docker.com's packages); the worker only needs
# DOCKER_HOST pointing at an engine and the images built there (run `images` against it).

DOCKER_LOG="${RCB_DOCKERD_LOG:-/var/log/rcb-dockerd.log}"

_docker_log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

docker_engine_up() { docker info >/dev/null 2>&1; }

_dockerd_wait() {
  local i
  for i in $(seq 60); do
    docker_engine_up && return 0
    # dockerd gave up: no point waiting the full minute
    [ -n "${1:-}" ] && ! kill -0 "$1" 2>/dev/null && return 1
    sleep 1
  done
  return 1
}

_dockerd_start() {
  local pidfile=/var/run/docker.pid old
  if [ -f "$pidfile" ]; then
    old="$(cat "$pidfile" 2>/dev/null || true)"
    if [ -n "$old" ] && kill -0 "$old" 2>/dev/null; then
      # an engine is starting or shutting down: give it the minute before starting another
      _docker_log "dockerd (pid $old) is starting or stopping; waiting for it"
      _dockerd_wait "$old" && return 0   # returns early when that process ends
    fi
    kill -0 "$old" 2>/dev/null || rm -f "$pidfile"
  fi
  DOCKER_LOG_OFFSET=$(( $(stat -c %s "$DOCKER_LOG" 2>/dev/null || echo 0) + 1 ))
  # setsid: the engine outlives this shell and the test run that started it
  setsid dockerd "$@" >>"$DOCKER_LOG" 2>&1 < /dev/null &
  local pid=$!
  _dockerd_wait "$pid"
}

# what the last start attempt logged (older runs' lines must not steer the retries)
_dockerd_new_log() { tail -c +"${DOCKER_LOG_OFFSET:-1}" "$DOCKER_LOG" 2>/dev/null; }

docker_engine_ensure() {
  docker_engine_up && return 0
  if [ "$(id -u)" -ne 0 ]; then
    _docker_log "no Docker engine answers and we are not root: cannot install or start one"
    return 1
  fi
  local missing=()
  command -v dockerd >/dev/null || missing+=(docker.io)
  command -v debootstrap >/dev/null || missing+=(debootstrap)
  command -v iptables >/dev/null || missing+=(iptables)
  if [ ${#missing[@]} -gt 0 ]; then
    _docker_log "installing Debian packages: ${missing[*]}"
    apt-get update -qq -o DPkg::Lock::Timeout=300 || true
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      -o DPkg::Lock::Timeout=300 "${missing[@]}" >/dev/null || { _docker_log "apt-get install ${missing[*]} failed"; return 1; }
  fi
  if [ -d /run/systemd/system ] && systemctl start docker 2>/dev/null && _dockerd_wait; then
    return 0
  fi
  mkdir -p "$(dirname "$DOCKER_LOG")"
  _docker_log "starting dockerd (log: $DOCKER_LOG)"
  _dockerd_start && return 0
  # some kernels or outer sandboxes refuse iptables rules or overlayfs: our containers need neither
  if _dockerd_new_log | grep -qi iptables; then
    _docker_log "dockerd failed on iptables; retrying with --iptables=false"
    _dockerd_start --iptables=false --ip-masq=false --bridge=none && return 0
  fi
  if _dockerd_new_log | grep -qiE 'overlay|storage.driver|graphdriver'; then
    _docker_log "dockerd failed on its storage driver; retrying with vfs"
    _dockerd_start --iptables=false --ip-masq=false --bridge=none --storage-driver=vfs && return 0
  fi
  _docker_log "dockerd did not start; last lines of $DOCKER_LOG:"
  _dockerd_new_log | tail -n 20 >&2
  return 1
}

docker_images_build() {
  local root py
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  py="${PY:-$root/.venv/bin/python}"
  [ -x "$py" ] || py=python3
  local sets=("$root/demo")
  local extra
  for extra in "$root/tests/data/torch_pset" "$root/tests/probes/pset"; do
    [ -f "$extra/papers.yaml" ] && sets+=("$extra")
  done
  _docker_log "building sandbox images (reused when present)"
  local started=$SECONDS
  (cd "$root" && "$py" -m benchmark_core.sandbox.docker build "${sets[@]}") || return 1
  _docker_log "sandbox images ready in $((SECONDS - started))s"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  case "${1:-all}" in
    engine) docker_engine_ensure ;;
    images) docker_images_build ;;
    all) docker_engine_ensure && docker_images_build ;;
    *) echo "usage: $0 [engine|images|all]" >&2; exit 2 ;;
  esac
fi
