#!/usr/bin/env bash
# Capacity on misses, side by side: a real trace (web07, the demo origin's
# pages, mean about 44 KB) replayed through edge and through nginx
# (proxy_cache with the same cache budget, `gzip on`, both at nginx's
# defaults: gzip level 1 for text/html, proxy_cache_lock off, whose waiters
# would poll every 500 ms; NGINX_CACHE_LOCK=on to compare with it) in
# front of the same demo origin, at rising rates,
# with the Accept-Encoding a browser sends. Each step starts both servers
# cold and reports, per server and rate: failed (errors + dropped) share,
# p50/p99, the CPU the server used per request, and the origin requests.
# The last line gives the highest rate each sustained with < 1 % failed and
# p99 < 100 ms.
# Installs nginx from Debian if missing. Everything listens on 127.0.0.1.
#
# Knobs: RATES ("400 800 1200 1600 2000 2400"), DURATION (20s), CACHE
# (72MiB), TRACE (../shared/traces/cache/web07.trace.xz), FORMAT (int32be),
# AE (gzip, deflate, br, zstd).
set -euo pipefail
cd "$(dirname "$0")/.."

RATES=${RATES:-"400 800 1200 1600 2000 2400"}
DURATION=${DURATION:-20s}
SECS=${DURATION%s}
CACHE=${CACHE:-72MiB}
TRACE=${TRACE:-../shared/traces/cache/web07.trace.xz}
FORMAT=${FORMAT:-int32be}
AE=${AE:-"gzip, deflate, br, zstd"}
ORIGIN=127.0.0.1:18490
EDGE=127.0.0.1:18480
EDGE_ADMIN=127.0.0.1:19480
NGINX=127.0.0.1:18481

# shellcheck source=scripts/bench-lib.sh
. scripts/bench-lib.sh
bench_install nginx:nginx curl:curl
bench_build_edge
[ -r "$TRACE" ] || { echo "no trace at $TRACE" >&2; exit 1; }
hz=$(getconf CLK_TCK)
cache_mib=${CACHE%MiB}

# step SERVER RATE: one cold run, one line of results.
step() {
  local server=$1 rate=$2 target procs c0 out
  ./bin/edge origin --listen "$ORIGIN" 2>"$work/origin.log" &
  local origin_pid=$!
  if [ "$server" = edge ]; then
    ./bin/edge serve --origin "http://$ORIGIN" --listen "$EDGE" --admin-listen "$EDGE_ADMIN" --cache-size "$CACHE" \
      --log-level warn 2>"$work/edge.log" &
    local edge_pid=$!
    target=http://$EDGE
    wait_http "$target/p/1"
    procs=$edge_pid
  else
    NGINX_CACHE_LOCK=${NGINX_CACHE_LOCK:-off} NGINX_CACHE_MAX=${cache_mib}m start_nginx "$ORIGIN" "    listen $NGINX;
    gzip on;"
    target=http://$NGINX
    wait_http "$target/p/1"
    procs=$(pgrep -f "nginx: (master|worker)" | tr '\n' ' ')
  fi
  # shellcheck disable=SC2086
  c0=$(proc_ticks $procs)
  out=$(./bin/edge load --target "$target" --trace "$TRACE" --format "$FORMAT" --trace-limit $((rate * SECS + 1000)) \
    --rate "$rate" --duration "$DURATION" --accept-encoding "$AE" --origin-stats "http://$ORIGIN/_stats" --json 2>/dev/null)
  # shellcheck disable=SC2086
  local cpu=$(($(proc_ticks $procs) - c0))
  if [ "$server" = edge ]; then kill "$edge_pid"; wait "$edge_pid" 2>/dev/null || true; else kill "$(cat "$work/nginx.pid")"; sleep 0.5; rm -rf "$work/nginx-cache"; fi
  kill "$origin_pid"; wait "$origin_pid" 2>/dev/null || true
  echo "$out" | python3 -c '
import json, sys
server, rate, cpu, hz = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
d = json.load(sys.stdin); s = d["summary"]
req = max(s["requests"] + s.get("dropped", 0), 1)
failed = 100.0 * (s["errors"] + s.get("dropped", 0)) / req
origin = (1 - d["origin_offload"]) * s["requests"] if d["origin_offload"] >= 0 else -1
ok = failed < 1 and s["p99_ms"] < 100
print("%-6s %6d/s  achieved %7.0f/s  failed %5.2f%%  p50 %7.1f ms  p99 %7.1f ms  cpu %6.0f us/req  origin requests %6.0f  %s" % (
    server, rate, s["rate_achieved"], failed, s["p50_ms"], s["p99_ms"], cpu / hz * 1e6 / max(s["requests"], 1), origin, "ok" if ok else "over"))
' "$server" "$rate" "$cpu" "$hz" | tee -a "$work/results"
}

echo "web07 replay ($TRACE), $DURATION per step, cache $CACHE, Accept-Encoding \"$AE\"; each step cold"
for rate in $RATES; do
  for server in edge nginx; do
    step "$server" "$rate"
  done
done
awk '$NF == "ok" { r = $2 + 0; if (r > best[$1]) best[$1] = r } END {
  printf "highest rate with < 1%% failed and p99 < 100 ms: edge %d/s, nginx %d/s", best["edge"], best["nginx"]
  if (best["nginx"] > 0) printf ", ratio %.2f", best["edge"] / best["nginx"]
  printf "\n" }' "$work/results"
