#!/usr/bin/env bash
# Run every test: installs what the tests need (Debian packages, .venv), then pytest.
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
apt_install "${SYSTEM_PACKAGES[@]}" "${TEST_SYSTEM_PACKAGES[@]}"
ensure_venv requirements-dev.txt
log "running the test suite"
exec "$PY" -m pytest "$@"
