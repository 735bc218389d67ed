# Shared set-up steps for scripts/run.sh, scripts/test.sh and .ci/run. Source it; do not run it.
# Each step is idempotent: it does nothing when what it installs is already there.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
PY="$VENV/bin/python"

log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

# Debian packages the project needs; installed only when missing and we may (root or sudo).
SYSTEM_PACKAGES=(python3-venv redis-server bubblewrap)
TEST_SYSTEM_PACKAGES=(chromium wrk)
# npm for the accessibility test's axe-core: Debian's package only where no npm is installed (a
# machine with NodeSource's nodejs has npm already, and Debian's npm conflicts with that nodejs)
command -v npm >/dev/null || TEST_SYSTEM_PACKAGES+=(npm)

apt_install() {
  local missing=()
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null; then sudo="sudo"; else
      log "missing Debian packages: ${missing[*]} (install them as root)"; return 1; fi
  fi
  log "installing Debian packages: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# JavaScript the tests take from npm (package.json, pinned by package-lock.json: axe-core), into
# node_modules/; reinstalled when the lock file changes.
ensure_node_modules() {
  local stamp="$ROOT/node_modules/.installed-$(sha256sum "$ROOT/package-lock.json" | cut -c1-16)"
  if [ ! -f "$stamp" ]; then
    log "installing npm packages from package-lock.json"
    (cd "$ROOT" && npm ci --no-audit --no-fund --ignore-scripts --silent)
    touch "$stamp"
  fi
}

# The interpreter .venv is made from, and with it the bwrap sandbox's interpreter and every
# environment `env build` makes (docs/sandboxes.md, "bwrap's interpreter"): RCB_BASE_PYTHON when
# set; else Debian's python3 when it is a 3.11, the build the docker images run (linked statically
# with an optimised libpython: a run of the warm runner costs ~15 % less CPU than under a
# --enable-shared build without optimisations, pyenv's default); else the first python3 on PATH.
base_python() {
  if [ -n "${RCB_BASE_PYTHON:-}" ]; then echo "$RCB_BASE_PYTHON"; return; fi
  if [ -x /usr/bin/python3 ] && [ "$(/usr/bin/python3 -c 'import sys; print(sys.version_info[:2] == (3, 11))' 2>/dev/null)" = True ] \
     && /usr/bin/python3 -c 'import ensurepip, venv' 2>/dev/null; then
    echo /usr/bin/python3; return
  fi
  command -v python3
}

# The interpreter a venv was made from (its pyvenv.cfg's executable), empty when unknown.
venv_base() {
  awk -F' = ' '$1 == "executable" {print $2}' "$1/pyvenv.cfg" 2>/dev/null || true
}

ensure_venv() {
  local req="$1" base want
  base="$(base_python)"
  if ! want="$("$base" -c 'import os, sys, venv; print(os.path.realpath(sys._base_executable))' 2>/dev/null)"; then
    log "cannot make .venv from '$base': not a Python interpreter with the venv module (RCB_BASE_PYTHON?)"
    return 1
  fi
  if [ -x "$PY" ] && [ -n "$(venv_base "$VENV")" ] && [ "$(venv_base "$VENV")" != "$want" ]; then
    log "re-creating .venv from $base (it was made from $(venv_base "$VENV"))"
    rm -rf "$VENV"
  fi
  if [ ! -x "$PY" ]; then
    log "creating virtual environment at .venv from $base"
    "$base" -m venv "$VENV"
  fi
  local stamp="$VENV/.installed-$(cat "$ROOT"/requirements*.txt | sha256sum | cut -c1-16)-$(basename "$req")"
  if [ ! -f "$stamp" ]; then
    log "installing Python packages from $(basename "$req")"
    "$PY" -m pip install -q --upgrade pip >/dev/null
    "$PY" -m pip install -q -r "$ROOT/$req"
    touch "$stamp"
  fi
}

# The settings every process of the site reads (rcbsite/envfile.py): .env's entries that are not
# exported apply to the calling script too, and a generated DJANGO_SECRET_KEY is added to .env
# unless one is set, so manage.py commands typed later in a shell need nothing exported.
# Environments the tests score papers in (tests/data/env_pset names 'jax': jax, jaxlib, flax,
# about 600 MB): built once as venvs under var/envs (RCB_TEST_ENVS_DIR), then reused by the hash of
# their requirements. The tests would build them on first use; doing it here keeps that out of pytest.
ensure_test_envs() {
  local dir="${RCB_TEST_ENVS_DIR:-$ROOT/var/envs}"
  log "building the tests' environments in $dir (reused when built)"
  "$PY" -m benchmark_core env build "$ROOT/tests/data/env_pset" --dir "$dir" >/dev/null
}

prepare_settings() {
  eval "$("$PY" "$ROOT/rcbsite/envfile.py" shell)"
  export RCB_VAR_DIR="${RCB_VAR_DIR:-$ROOT/var}"
  mkdir -p "$RCB_VAR_DIR/log"
  "$PY" "$ROOT/rcbsite/envfile.py" prepare
}
