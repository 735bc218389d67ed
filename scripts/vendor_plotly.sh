#!/usr/bin/env bash
# Vendor the browser's plotly.js: the cartesian bundle from npm, at the plotly.js version the pinned
# Python plotly writes figures for, into static/vendor/; then regenerate static/css/plotly.css.
# Run after upgrading plotly in requirements.txt (needs npm and the npm registry); commit the result.
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
VERSION="$("$PY" -c 'from plotly.offline import get_plotlyjs_version as v; print(v())')"
PACKAGE="plotly.js-cartesian-dist-min@$VERSION"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
log "fetching $PACKAGE"
# npm pack checks the tarball against the registry's integrity hash
(cd "$TMP" && npm pack --silent "$PACKAGE" >/dev/null && tar xzf ./*.tgz)
mkdir -p static/vendor
cp "$TMP/package/plotly-cartesian.min.js" static/vendor/plotly-cartesian.min.js
cp "$TMP/package/LICENSE" static/vendor/plotly-cartesian.LICENSE
DJANGO_DEBUG=1 "$PY" -c 'from leaderboard.plotly_bundle import plotly_css_text; open("static/css/plotly.css", "w").write(plotly_css_text())'
log "static/vendor/plotly-cartesian.min.js is plotly.js $VERSION ($(wc -c <static/vendor/plotly-cartesian.min.js) bytes)"
