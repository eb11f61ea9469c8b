#!/usr/bin/env bash
# A/B of new TLS handshakes between two edge binaries, alternating rounds
# of `openssl s_time -new` (no resumption; each connection fetches a cached
# 4 KiB object): connections per second and the server's CPU per
# connection. For a change to the accept or handshake path, where
# `make bench-tls`'s ratio against nginx is too coarse to see a few %.
#
#   OLD=/tmp/edge-before NEW=bin/edge ROUNDS=3 SECS=8 bash scripts/ab-tls-handshakes.sh
set -euo pipefail
cd "$(dirname "$0")/.."
OLD=${OLD:?OLD=path of the edge binary before the change}
NEW=${NEW:-bin/edge}
ROUNDS=${ROUNDS:-3}
SECS=${SECS:-8}
# shellcheck source=scripts/bench-lib.sh
. scripts/bench-lib.sh
bench_install openssl:openssl curl:curl
bench_cert "$work"
"$NEW" origin --listen 127.0.0.1:18290 --latency 0s --jitter 0s 2>"$work/origin.log" &
pids+=($!)
start() { # binary plain-port admin-port tls-port
  "$1" serve --origin http://127.0.0.1:18290 --listen "127.0.0.1:$2" --admin-listen "127.0.0.1:$3" --cache-size 64MiB \
    --tls-listen "127.0.0.1:$4" --tls-cert "$work/cert.pem" --tls-key "$work/key.pem" --log-level warn 2>>"$work/edge.log" &
  pids+=($!)
}
start "$OLD" 18281 19281 18443
old=${pids[-1]}
start "$NEW" 18282 19282 18444
new=${pids[-1]}
for port in 18443 18444; do
  for _ in $(seq 50); do curl -ksf -o /dev/null "https://127.0.0.1:$port/size/4096" && break; sleep 0.1; done
  curl -ksf -o /dev/null "https://127.0.0.1:$port/size/4096"
done
hz=$(getconf CLK_TCK)
for r in $(seq "$ROUNDS"); do
  order="old new"
  [ $((r % 2)) -eq 0 ] && order="new old"
  for which in $order; do
    if [ "$which" = old ]; then port=18443 pid=$old; else port=18444 pid=$new; fi
    c0=$(proc_ticks "$pid"); t0=$(date +%s.%N)
    out=$(openssl s_time -connect "127.0.0.1:$port" -new -www /size/4096 -time "$SECS" 2>&1)
    t1=$(date +%s.%N); c1=$(proc_ticks "$pid")
    n=$(echo "$out" | grep -oE '^[0-9]+ connections in' | head -1 | awk '{print $1}')
    [ -n "$n" ] && [ "$n" -gt 0 ] || bench_tool_failed "$which" s_time "$out"
    awk -v w="$which" -v r="$r" -v n="$n" -v t0="$t0" -v t1="$t1" -v c=$((c1 - c0)) -v hz="$hz" \
      'BEGIN{printf "round %d %-3s %6d connections %6.0f/s   cpu %.3f ms/connection\n", r, w, n, n/(t1-t0), c*1000/hz/n}'
  done
done
