#!/usr/bin/env bash
# Vendor the API reference's viewer: swagger-ui-dist at the version package-lock.json pins, from
# node_modules/ into static/vendor/swagger-ui/ (served by the site itself, never from a CDN).
# Run after changing its version in package.json (`npm install`, then this); commit the result.
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
(cd "$ROOT" && npm ci --no-audit --no-fund --ignore-scripts --silent)
SRC="node_modules/swagger-ui-dist"
DEST="static/vendor/swagger-ui"
mkdir -p "$DEST"
cp "$SRC/swagger-ui-bundle.js" "$SRC/LICENSE" "$SRC/NOTICE" "$DEST/"
# the source map is not shipped: drop the reference (the static files' manifest would look for it)
sed '/sourceMappingURL=/d' "$SRC/swagger-ui.css" >"$DEST/swagger-ui.css"
"$PY" -c 'import json; print(json.load(open("node_modules/swagger-ui-dist/package.json"))["version"])' >"$DEST/VERSION"
log "static/vendor/swagger-ui/ is swagger-ui-dist $(cat "$DEST/VERSION")"
