#!/usr/bin/env bash
# A/B of two edge binaries on plain cached hits: the same origin, both
# edges up at once, wrk runs alternating between them (ROUNDS of DURATION
# each), and the mean req/s of each. For "did this change slow hits down?",
# where a difference of a few percent is lost in the spread between
# separate bench-compare runs.
#
#   scripts/bench-ab.sh OLD_BINARY NEW_BINARY
#
# e.g. git worktree add /tmp/old <rev> && (cd /tmp/old && make build) &&
#      make build && scripts/bench-ab.sh /tmp/old/bin/edge bin/edge
# Knobs: ROUNDS (5), DURATION (8s), CONNS (64), OBJECT (/size/4096),
# NEW_ARGS (more arguments of the new binary's serve, e.g. "-c rules.yaml").
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 2 ] || { echo "usage: $0 OLD_BINARY NEW_BINARY" >&2; exit 2; }
old=$1 new=$2
ROUNDS=${ROUNDS:-5} DURATION=${DURATION:-8s} CONNS=${CONNS:-64} OBJECT=${OBJECT:-/size/4096}
# shellcheck source=scripts/bench-lib.sh
. scripts/bench-lib.sh
bench_install wrk:wrk
"$new" origin --listen 127.0.0.1:18290 --latency 0s --jitter 0s 2>/dev/null &
pids+=($!)
"$old" serve --origin http://127.0.0.1:18290 --listen 127.0.0.1:18291 --admin-listen 127.0.0.1:18293 --cache-size 256MiB --log-level warn 2>/dev/null &
pids+=($!)
# shellcheck disable=SC2086
"$new" serve ${NEW_ARGS:-} --origin http://127.0.0.1:18290 --listen 127.0.0.1:18292 --admin-listen 127.0.0.1:18294 --cache-size 256MiB --log-level warn 2>/dev/null &
pids+=($!)
wait_http "http://127.0.0.1:18291$OBJECT"
wait_http "http://127.0.0.1:18292$OBJECT"
for p in 18291 18292; do curl -s -o /dev/null "http://127.0.0.1:$p$OBJECT"; curl -s -o /dev/null "http://127.0.0.1:$p$OBJECT"; done
for i in $(seq "$ROUNDS"); do
  for p in 18291 18292; do
    r=$(wrk -t1 -c"$CONNS" -d"$DURATION" "http://127.0.0.1:$p$OBJECT" | awk '/^Requests\/sec/ {print $2}')
    name=old; [ $p = 18292 ] && name=new
    echo "round $i $name $r"
  done
done | tee "$work/ab"
awk '{s[$3]+=$4; n[$3]++} END {printf "mean req/s: old %.0f  new %.0f  new/old %.3f\n", s["old"]/n["old"], s["new"]/n["new"], (s["new"]/n["new"])/(s["old"]/n["old"])}' "$work/ab"
