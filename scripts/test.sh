#!/usr/bin/env bash
# Run every test: installs what the tests need (Debian packages, .venv), then pytest.
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
apt_install "${SYSTEM_PACKAGES[@]}" "${TEST_SYSTEM_PACKAGES[@]}"
ensure_venv requirements-dev.txt
ensure_node_modules
ensure_test_envs
# the docker backend's tests need an engine and the sandbox images; without them they skip
# loudly (and fail under CI=true)
source "$ROOT/scripts/docker.sh"
if [ "$(id -u)" -eq 0 ] || docker_engine_up; then
  { docker_engine_ensure && docker_images_build; } || log "no usable Docker engine: the docker tests will skip (fail under CI=true)"
fi
# the settings refuse to start without a secret; tests get a throw-away one, and plain-HTTP
# cookies so that browser tests can log in to the live test server
export DJANGO_SECRET_KEY="${DJANGO_SECRET_KEY:-test-$(head -c 24 /dev/urandom | base64 | tr -dc 'A-Za-z0-9')}"
export DJANGO_SECURE_COOKIES="${DJANGO_SECURE_COOKIES:-0}"
log "running the test suite"
exec "$PY" -m pytest "$@"
