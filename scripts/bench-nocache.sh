#!/usr/bin/env bash
# What browsers' hard reloads cost the origin under each
# cache.client_no_cache mode: Zipf page requests to one edge node in front
# of the demo origin, without and with a share of requests carrying
# Cache-Control: no-cache and Pragma: no-cache, each run cold. Prints per
# mode the origin requests of both runs and their ratio (target of the
# cache rules issue: ≤ 1.05 with coalesce or ignore).
# Everything listens on 127.0.0.1.
#
# Knobs: RATE (800), DURATION (30s), PAGES (5000), ZIPF (0.9), SHARE (0.2),
# MODES ("honour coalesce ignore"), INTERVAL (coalesce's, 10s).
set -euo pipefail
cd "$(dirname "$0")/.."

RATE=${RATE:-800}
DURATION=${DURATION:-30s}
PAGES=${PAGES:-5000}
ZIPF=${ZIPF:-0.9}
SHARE=${SHARE:-0.2}
MODES=${MODES:-"honour coalesce ignore"}
INTERVAL=${INTERVAL:-10s}
ORIGIN=127.0.0.1:18590
EDGE=127.0.0.1:18580
EDGE_ADMIN=127.0.0.1:19580

# shellcheck source=scripts/bench-lib.sh
. scripts/bench-lib.sh
bench_install curl:curl
[ -x bin/edge ] || make build >/dev/null

# run MODE SHARE -> origin requests of one cold run
run() {
  ./bin/edge origin --listen "$ORIGIN" 2>"$work/origin.log" &
  local origin_pid=$!
  EDGE_CACHE_CLIENT_NO_CACHE=$1 EDGE_CACHE_REVALIDATE_INTERVAL=$INTERVAL \
    ./bin/edge serve --origin "http://$ORIGIN" --listen "$EDGE" --admin-listen "$EDGE_ADMIN" --log-level warn 2>"$work/edge.log" &
  local edge_pid=$!
  wait_http "http://$EDGE/p/1"
  local before after out
  before=$(curl -fsS "http://$ORIGIN/_stats" | python3 -c 'import json,sys; print(json.load(sys.stdin)["total"])')
  out=$(./bin/edge load --target "http://$EDGE" --zipf "$ZIPF" --pages "$PAGES" --rate "$RATE" --duration "$DURATION" \
    --no-cache-share "$2" --json 2>/dev/null)
  after=$(curl -fsS "http://$ORIGIN/_stats" | python3 -c 'import json,sys; print(json.load(sys.stdin)["total"])')
  kill "$edge_pid" "$origin_pid"; wait "$edge_pid" "$origin_pid" 2>/dev/null || true
  echo "$out" | python3 -c '
import json, sys
s = json.load(sys.stdin)["summary"]
print("%d %d %.1f" % (int(sys.argv[1]), s["requests"], s["p99_ms"]))' "$((after - before))"
}

echo "Zipf $ZIPF over $PAGES demo pages, $RATE req/s for $DURATION, hard-reload share $SHARE; coalesce interval $INTERVAL; each run cold"
for mode in $MODES; do
  read -r base n0 p0 <<<"$(run "$mode" 0)"
  read -r with n1 p1 <<<"$(run "$mode" "$SHARE")"
  python3 -c '
import sys
mode, base, with_, n0, n1, p0, p1 = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6], sys.argv[7]
print("%-8s origin requests %6d without reloads, %6d with (ratio %.3f); client requests %d / %d; p99 %s / %s ms" % (mode, base, with_, with_ / max(base, 1), n0, n1, p0, p1))' \
    "$mode" "$base" "$with" "$n0" "$n1" "$p0" "$p1"
done
