#!/usr/bin/env bash
# False suspicions on a CPU-saturated machine: five race-instrumented edge
# nodes (edge demo) under a steady load, with one CPU burner per core, for
# DURATION seconds. Prints each node's suspicions and local stalls and the
# total per hour. Target: 0.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-600}
BIN=${BIN:-/tmp/edge-race}
[ "${BUILD:-1}" = 1 ] && go build -race -o "$BIN" ./cmd/edge
"$BIN" demo --nodes 5 >/tmp/fd-busy-demo.log 2>&1 &
demo=$!
burners=()
cleanup() {
  kill "${burners[@]}" 2>/dev/null || true
  kill "$demo" 2>/dev/null || true
  wait 2>/dev/null || true
}
trap cleanup EXIT
scrape() { curl -s -m 5 -H "Authorization: Bearer demo-token" "http://127.0.0.1:$((9179 + $1))/metrics"; }
for _ in $(seq 60); do
  ok=0
  for i in 1 2 3 4 5; do
    [ "$(scrape "$i" | awk '/^edge_view_members /{print $2}')" = 5 ] && ok=$((ok + 1))
  done
  [ "$ok" = 5 ] && break
  sleep 1
done
echo "all 5 nodes trust all peers; loading the CPUs for ${DURATION}s"
sum() { # sum METRIC over nodes
  local t=0
  for i in 1 2 3 4 5; do
    v=$(scrape "$i" | awk -v m="$1" 'index($0, m) == 1 {s += $NF} END {print s + 0}')
    t=$(awk -v a="$t" -v b="$v" 'BEGIN{print a + b}')
  done
  echo "$t"
}
s0=$(sum edge_fd_suspicions_total)
l0=$(sum edge_fd_local_stalls_total)
for _ in $(seq "$(nproc)"); do
  (while :; do :; done) &
  burners+=($!)
done
"$BIN" load --target http://127.0.0.1:8080,http://127.0.0.1:8081,http://127.0.0.1:8082,http://127.0.0.1:8083,http://127.0.0.1:8084 --zipf 1.0 --pages 2000 --rate 100 --duration "${DURATION}s" >/tmp/fd-busy-load.log 2>&1 || true
s1=$(sum edge_fd_suspicions_total)
l1=$(sum edge_fd_local_stalls_total)
for i in 1 2 3 4 5; do
  echo "node $i: $(scrape "$i" | grep -E '^edge_fd_(suspicions_total|local_delay_seconds)' | tr '\n' ' ')"
done
awk -v s="$((${s1%.*} - ${s0%.*}))" -v l="$((${l1%.*} - ${l0%.*}))" -v d="$DURATION" \
  'BEGIN { printf "false suspicions: %d in %d s (%.1f per hour); local stall rounds: %d\n", s, d, s * 3600 / d, l }'
