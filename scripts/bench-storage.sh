#!/usr/bin/env bash
# bench-storage: the disk tier against RAM only and against nginx proxy_cache
# with the same disk budget, on a real trace with object sizes (adaptsize).
#
# The trace is replayed through `edge load --trace --sized` (each request is
# the demo origin's /size/{bytes}?k={key}, so every object has its trace
# size) against:
#   edge-disk   RAM 64 MiB + disk 2 GiB
#   edge-ram    RAM 64 MiB only
#   nginx       proxy_cache with max_size 2 GiB (and a 64 MiB keys zone)
# Hit ratios are measured at the origin (requests and bytes it sent), the
# same way for all three. Then each server is restarted (RAM empty, disk
# kept) and every distinct object of at most 64 KiB is requested once: all
# are disk hits, and their client-side latency is the disk-hit latency.
#
# usage: scripts/bench-storage.sh   (TRACE, RATE, RAM, DISK override)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-lib.sh
bench_install nginx:nginx curl:curl python3:python3
[ -x bin/edge ] || make build >/dev/null
TRACE=${TRACE:-../shared/traces/cache/adaptsize-request.trace.xz}
RATE=${RATE:-1500}
RAM=${RAM:-64MiB}
DISK=${DISK:-2GiB}
ORIGIN=127.0.0.1:18400
EDGE=127.0.0.1:18401
EDGE_ADMIN=127.0.0.1:18402
NGINX=127.0.0.1:18403

[ -f "$TRACE" ] || { echo "no trace at $TRACE" >&2; exit 1; }
n=$(xz -dcf "$TRACE" | wc -l)
duration=$(( (n + RATE - 1) / RATE ))
# The disk-hit phase: distinct objects of at most 64 KiB, once each.
xz -dcf "$TRACE" | awk '$3 <= 65536 && !seen[$2]++ && c++ < 20000 { print 0, $2, $3 }' >"$work/small.trace"
small=$(wc -l <"$work/small.trace")

./bin/edge origin --listen "$ORIGIN" --latency 2ms --jitter 1ms 2>"$work/origin.log" &
pids+=($!)
wait_http "http://$ORIGIN/_stats"

stat() { curl -fsS "http://$ORIGIN/_stats" | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['total'], d['bytes_sent'])"; }
rss_kib() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }

# replay NAME URL: the whole trace, then prints object/byte hit ratio and latency.
replay() {
  local name=$1 url=$2
  read -r t0 b0 < <(stat)
  ./bin/edge load --target "$url" --rate "$RATE" --duration "${duration}s" --trace "$TRACE" --format adaptsize \
    --sized --max-inflight 4000 --json >"$work/$name.json" 2>/dev/null
  read -r t1 b1 < <(stat)
  python3 - "$work/$name.json" "$TRACE" "$((t1 - t0))" "$((b1 - b0))" "$name" <<'PY'
import json, lzma, sys
s = json.load(open(sys.argv[1]))["summary"]
sizes = [int(l.split()[2]) for l in (lzma.open if sys.argv[2].endswith(".xz") else open)(sys.argv[2], "rt") if len(l.split()) == 3]
sent = s["requests"]
total_bytes = sum(min(x, 64 << 20) for x in (sizes * 2)[:sent])
reqs, obytes = int(sys.argv[3]), int(sys.argv[4])
print(f"{sys.argv[5]:10s} requests {sent} (errors {s['errors']}, dropped {s['dropped']})  object hit {1 - reqs / max(sent, 1):.4f}  "
      f"byte hit {1 - obytes / max(total_bytes, 1):.4f}  latency ms p50 {s['p50_ms']:.2f} p99 {s['p99_ms']:.2f}")
PY
}

# diskhits NAME URL: every small object once, after a restart.
diskhits() {
  local name=$1 url=$2
  read -r t0 _ < <(stat)
  ./bin/edge load --target "$url" --rate 1000 --duration "$(( (small + 999) / 1000 ))s" --trace "$work/small.trace" \
    --format adaptsize --sized --json >"$work/$name-disk.json" 2>/dev/null
  read -r t1 _ < <(stat)
  python3 - "$work/$name-disk.json" "$name" "$((t1 - t0))" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["summary"]
hits = s["requests"] - int(sys.argv[3])
print(f"{sys.argv[2]:10s} after a restart, objects <= 64 KiB once each: {s['requests']} requests, {hits} answered without the origin "
      f"(disk hits); latency ms p50 {s['p50_ms']:.3f} p99 {s['p99_ms']:.3f} p99.9 {s['p999_ms']:.3f}")
PY
}

start_edge() { # start_edge NAME [disk args...]
  local name=$1
  shift
  ./bin/edge serve --origin "http://$ORIGIN" --listen "$EDGE" --admin-listen "$EDGE_ADMIN" --node-id "$name" \
    --cache-size "$RAM" --log-level warn "$@" 2>>"$work/$name.log" &
  edge_pid=$!
  pids+=("$edge_pid")
  wait_http "http://$EDGE_ADMIN/healthz"
}

stop_pid() { kill -TERM "$1" 2>/dev/null || true; while kill -0 "$1" 2>/dev/null; do sleep 0.1; done; }

echo "trace $TRACE: $n requests at $RATE/s; RAM $RAM, disk $DISK; $(nproc) cores; $(date -u +%F)"
echo
start_edge edge-disk --disk-path "$work/disk" --disk-size "$DISK"
replay edge-disk "http://$EDGE"
echo "edge-disk  RSS $(( $(rss_kib "$edge_pid") / 1024 )) MiB; disk $(du -sm "$work/disk" | cut -f1) MiB"
stop_pid "$edge_pid"
start_edge edge-disk --disk-path "$work/disk" --disk-size "$DISK"
diskhits edge-disk "http://$EDGE"
curl -fsS "http://$EDGE_ADMIN/metrics" | grep -E '^edge_disk_(hits_total|recovery_seconds|objects) ' | tr '\n' ' '
echo
stop_pid "$edge_pid"

start_edge edge-ram
replay edge-ram "http://$EDGE"
echo "edge-ram   RSS $(( $(rss_kib "$edge_pid") / 1024 )) MiB"
stop_pid "$edge_pid"

NGINX_CACHE_MAX=2g NGINX_KEYS_ZONE=64m start_nginx "$ORIGIN" "    listen $NGINX;"
wait_http "http://$NGINX/size/10?k=warm"
replay nginx "http://$NGINX"
nginx_rss=0
for p in $(pgrep -f "nginx: (master|worker)"); do nginx_rss=$(( nginx_rss + $(rss_kib "$p") )); done
echo "nginx      RSS $(( nginx_rss / 1024 )) MiB (master and workers); disk $(du -sm "$work/nginx-cache" | cut -f1) MiB"
kill -QUIT "$(cat "$work/nginx.pid")"
while [ -f "$work/nginx.pid" ] && kill -0 "$(cat "$work/nginx.pid")" 2>/dev/null; do sleep 0.1; done
NGINX_CACHE_MAX=2g NGINX_KEYS_ZONE=64m start_nginx "$ORIGIN" "    listen $NGINX;"
wait_http "http://$NGINX/size/10?k=warm2"
sleep 2 # nginx's cache loader reads the cache directory in the background
diskhits nginx "http://$NGINX"
