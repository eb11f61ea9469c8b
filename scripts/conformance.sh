#!/usr/bin/env bash
# Runs the HTTP cache conformance suite (npm http-cache-tests, Mark
# Nottingham's cache-tests) against edge and compares the required passes
# with the committed baseline. Installs the suite (and Node.js if missing)
# into .cache/, starts the suite's origin on 127.0.0.1:8000 and an edge node
# in front of it, runs the suite's CLI, and writes docs/conformance/results.json.
#
# usage: scripts/conformance.sh [--save]
#   --save  copy the results into docs/conformance/ and make them the new baseline
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
SUITE_VERSION=${SUITE_VERSION:-0.4.5}
ORIGIN_PORT=8000
EDGE=127.0.0.1:18300
EDGE_ADMIN=127.0.0.1:18301

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "installing Node.js from Debian packages"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
fi
dir=.cache/conformance
suite=$dir/node_modules/http-cache-tests
if [ ! -f "$suite/package.json" ] || ! grep -q "\"version\": \"$SUITE_VERSION\"" "$suite/package.json"; then
  mkdir -p "$dir"
  (cd "$dir" && npm install --no-audit --no-fund --silent "http-cache-tests@$SUITE_VERSION" >/dev/null)
fi
[ -x bin/edge ] || make build >/dev/null

work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

(cd "$suite" && npm_config_port=$ORIGIN_PORT npm_config_protocol=http npm_config_pidfile="$work/server.pid" \
  exec node server/server.mjs) >"$work/origin.log" 2>&1 &
pids+=($!)
# The suite's client marks every request with Test-ID, Test-Name and Req-Num
# (a counter). The edge keys fields it does not know (docs/operations.md,
# "What reaches the origin"), which would give each request a variant of its
# own; the suite's origin renders them into nothing cached, so, as an
# operator would, they are declared unkeyed.
EDGE_FORWARDING_UNKEYED_HEADERS="Test-ID,Test-Name,Req-Num" \
./bin/edge serve --origin "http://127.0.0.1:$ORIGIN_PORT" --listen "$EDGE" --admin-listen "$EDGE_ADMIN" \
  --node-id edge --log-level warn 2>"$work/edge.log" &
pids+=($!)
for _ in $(seq 1 100); do
  curl -fsS -o /dev/null "http://$EDGE_ADMIN/readyz" 2>/dev/null && curl -s -o /dev/null "http://127.0.0.1:$ORIGIN_PORT/" && break
  sleep 0.1
done

out=$dir/results.json
echo "running http-cache-tests $SUITE_VERSION against edge at $EDGE (origin 127.0.0.1:$ORIGIN_PORT)"
(cd "$suite" && npm run --silent cli --base="http://$EDGE") >"$work/results.json"
if ! node -e 'JSON.parse(require("fs").readFileSync(process.argv[1]))' "$work/results.json" 2>/dev/null; then
  echo "the suite did not produce JSON:"; head -20 "$work/results.json"; tail -5 "$work/edge.log"; exit 1
fi
cp "$work/results.json" "$out"
if [ "${1:-}" = "--save" ]; then
  cp "$out" docs/conformance/results.json
  node scripts/conformance-summary.mjs "$root/$suite" docs/conformance/results.json docs/conformance/baseline.json --write-baseline
else
  node scripts/conformance-summary.mjs "$root/$suite" "$out" docs/conformance/baseline.json
fi
