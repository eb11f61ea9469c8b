#!/usr/bin/env bash
# False suspicions on a CPU-saturated machine: NODES edge nodes (edge
# demo; race-instrumented with RACE=1) under RATE requests/s of `edge load`,
# with one CPU burner per core, for DURATION seconds. Prints each node's
# suspicions and local stalls, the total per hour, and the load's summary
# (error kinds included). Target: 0. The issue's setting (a new user's
# machine): NODES=3 RATE=1000 RACE=0.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-600}
NODES=${NODES:-5}
RATE=${RATE:-100}
RACE=${RACE:-1}
if [ "$RACE" = 1 ]; then
  BIN=${BIN:-/tmp/edge-race}
  [ "${BUILD:-1}" = 1 ] && go build -race -o "$BIN" ./cmd/edge
else
  BIN=${BIN:-/tmp/edge-busy}
  [ "${BUILD:-1}" = 1 ] && go build -o "$BIN" ./cmd/edge
fi
nodes=$(seq "$NODES")
targets=$(for i in $nodes; do printf 'http://127.0.0.1:%d,' $((8079 + i)); done)
"$BIN" demo --nodes "$NODES" >/tmp/fd-busy-demo.log 2>&1 &
demo=$!
burners=()
cleanup() {
  kill "${burners[@]}" 2>/dev/null || true
  kill "$demo" 2>/dev/null || true
  wait 2>/dev/null || true
}
trap cleanup EXIT
scrape() { curl -s -m 5 -H "Authorization: Bearer edge-demo-admin-token" "http://127.0.0.1:$((9179 + $1))/metrics"; }
for _ in $(seq 60); do
  ok=0
  for i in $nodes; do
    [ "$(scrape "$i" | awk '/^edge_view_members /{print $2}')" = "$NODES" ] && ok=$((ok + 1))
  done
  [ "$ok" = "$NODES" ] && break
  sleep 1
done
echo "all $NODES nodes trust all peers; loading the CPUs for ${DURATION}s"
sum() { # sum METRIC over nodes
  local t=0
  for i in $nodes; do
    v=$(scrape "$i" | awk -v m="$1" 'index($0, m) == 1 {s += $NF} END {print s + 0}')
    t=$(awk -v a="$t" -v b="$v" 'BEGIN{print a + b}')
  done
  echo "$t"
}
# edge_peer_suspicions_total: until 2026-12-02 this script summed
# edge_fd_suspicions_total, a name no node exports, and so always printed 0.
s0=$(sum edge_peer_suspicions_total)
l0=$(sum edge_fd_local_stalls_total)
for _ in $(seq "$(nproc)"); do
  (while :; do :; done) &
  burners+=($!)
done
"$BIN" load --target "${targets%,}" --zipf 1.0 --pages 2000 --rate "$RATE" --duration "${DURATION}s" >/tmp/fd-busy-load.log 2>&1 || true
s1=$(sum edge_peer_suspicions_total)
l1=$(sum edge_fd_local_stalls_total)
for i in $nodes; do
  echo "node $i: $(scrape "$i" | grep -E '^edge_peer_suspicions_total|^edge_fd_local_delay_seconds' | tr '\n' ' ')"
done
cat /tmp/fd-busy-load.log
awk -v s="$((${s1%.*} - ${s0%.*}))" -v l="$((${l1%.*} - ${l0%.*}))" -v d="$DURATION" \
  'BEGIN { printf "false suspicions: %d in %d s (%.1f per hour); local stall rounds: %d\n", s, d, s * 3600 / d, l }'
