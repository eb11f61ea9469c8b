#!/usr/bin/env bash
# Five nodes under wrk, one SIGKILLed: how long each survivor takes to
# suspect it, and whether any request failed. `edge demo --nodes 5`, wrk
# against the four survivors (one wrk per node, random demo pages), node 5
# SIGKILLed WARM seconds in; the suspicion times come from the survivors'
# status pages (each peer's transitions with their times). Targets: 0 failed
# requests, every survivor within 500 ms.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-/tmp/edge-kill}
WARM=${WARM:-20}      # seconds of load before the kill (detectors past their young margin)
AFTER=${AFTER:-10}    # seconds of load after it
CONNS=${CONNS:-16}    # wrk connections per node
[ "${BUILD:-1}" = 1 ] && go build -o "$BIN" ./cmd/edge
command -v wrk >/dev/null || { echo "fd-kill: needs wrk (apt-get install wrk)" >&2; exit 1; }
"$BIN" demo --nodes 5 >/tmp/fd-kill-demo.log 2>&1 &
demo=$!
out=$(mktemp -d)
cleanup() { kill "$demo" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$out"; }
trap cleanup EXIT
status() { curl -s -m 5 -H "Authorization: Bearer edge-demo-admin-token" "http://127.0.0.1:$((9179 + $1))/status.json"; }
for _ in $(seq 60); do
  ok=0
  for i in 1 2 3 4 5; do
    [ "$(status "$i" | jq '[.peers[] | select(.trusted)] | length' 2>/dev/null)" = 4 ] && ok=$((ok + 1))
  done
  [ "$ok" = 5 ] && break
  sleep 1
done
cat >"$out/pages.lua" <<'EOF'
request = function() return wrk.format("GET", "/p/" .. math.random(0, 1999)) end
EOF
for i in 1 2 3 4; do
  wrk -t1 -c"$CONNS" -d"$((WARM + AFTER))s" --timeout 10s -s "$out/pages.lua" "http://127.0.0.1:$((8079 + i))" >"$out/wrk$i.txt" 2>&1 &
done
sleep "$WARM"
victim=$(pgrep -f -- "--node-id edge-5( |$)" | head -1)
killed=$(date +%s%N)
kill -9 "$victim"
wait $(jobs -p | grep -v "^$demo$") 2>/dev/null || true
total=0
failed=0
for i in 1 2 3 4; do
  req=$(awk '/requests in/ {print $1}' "$out/wrk$i.txt")
  non2xx=$(awk '/Non-2xx/ {print $NF}' "$out/wrk$i.txt")
  sockerr=$(awk -F'[ ,]+' '/Socket errors/ {for (k = 1; k <= NF; k++) if ($k ~ /^[0-9]+$/) s += $k} END {print s + 0}' "$out/wrk$i.txt")
  total=$((total + ${req:-0}))
  failed=$((failed + ${non2xx:-0} + sockerr))
done
echo "requests: $total, failed (non-2xx/3xx or socket errors): $failed"
for i in 1 2 3 4; do
  at=$(status "$i" | jq -r '.peers[] | select(.id == "edge-5") | [.history[] | select(.Trusted == false)] | last | .At')
  ns=$(date -d "$at" +%s%N)
  echo "edge-$i suspected edge-5 $(( (ns - killed) / 1000000 )) ms after the SIGKILL"
done
