#!/usr/bin/env bash
# Compares edge with nginx proxy_cache and Varnish on a cached 4 KiB object,
# in the same run, with the same wrk settings, and prints req/s, p50/p99 and
# the ratios, and the CPU time each server used per request (µs of CPU per
# hit, from /proc: user + system time of all its processes, before and after
# each wrk run). wrk shares the cores with the server, so req/s depends on how
# the two split them; CPU per request does not, and is the primary figure.
# Installs nginx, Varnish and wrk from Debian packages if missing.
# Everything listens on 127.0.0.1 and is stopped on exit.
#
# Two floors run beside them (bench/hitfloor): "nethttp", a bare net/http
# server answering the same 4 KiB from a pre-built header map with write
# merging (the floor of any hit path that keeps net/http), and "raw", a
# minimal HTTP/1.1 loop with one write per response (the floor of a
# specialised hit path). They serve one object and are not servers.
#
# "edge-nh" is a second edge with tuning.hit_path off: every hit goes
# through net/http, as before the hit path (EDGE_NH=0 leaves it out).
#
# Knobs (environment): DURATION (10s), CONNS (64), THREADS (1), ROUNDS (3),
# OBJECT (/size/4096), FLOORS (1; 0 leaves the floors out), EDGE_FLAGS (edge serve
# flags), EDGE_ENV (its environment, e.g. GOMAXPROCS=1), PIN (1: servers on
# CPU 1, wrk on CPU 0; scripts/bench-lib.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-10s}
CONNS=${CONNS:-64}
THREADS=${THREADS:-1}
ROUNDS=${ROUNDS:-3}
OBJECT=${OBJECT:-/size/4096}
ORIGIN=127.0.0.1:18090
EDGE=127.0.0.1:18080
EDGE_ADMIN=127.0.0.1:19180
NGINX=127.0.0.1:18081
VARNISH=127.0.0.1:18082
FLOOR_NETHTTP=127.0.0.1:18083
FLOOR_RAW=127.0.0.1:18084
FLOORS=${FLOORS:-1}
EDGE_NH=${EDGE_NH:-1}
EDGE_NH_ADDR=127.0.0.1:18085
EDGE_NH_ADMIN=127.0.0.1:19181

BENCH_PIN_SUPPORTED=1 # every server and client below takes $SERVER_PIN / $CLIENT_PIN
# shellcheck source=scripts/bench-lib.sh
. scripts/bench-lib.sh
bench_install nginx:nginx varnishd:varnish wrk:wrk
bench_build_edge

$SERVER_PIN ./bin/edge origin --listen "$ORIGIN" --latency 0s --jitter 0s 2>"$work/origin.log" &
pids+=($!)
$SERVER_PIN env ${EDGE_ENV:-} ./bin/edge serve --origin "http://$ORIGIN" --listen "$EDGE" --admin-listen "$EDGE_ADMIN" \
  --cache-size 256MiB --log-level warn --admin-token bench ${EDGE_FLAGS:-} 2>"$work/edge.log" &
pids+=($!)
edge_pid=$!

servers="edge nginx varnish"
if [ "$EDGE_NH" = 1 ]; then
  printf 'tuning:\n  hit_path: false\n' >"$work/edge-nh.yaml"
  $SERVER_PIN env ${EDGE_ENV:-} ./bin/edge serve --config "$work/edge-nh.yaml" --origin "http://$ORIGIN" --listen "$EDGE_NH_ADDR" \
    --admin-listen "$EDGE_NH_ADMIN" --cache-size 256MiB --log-level warn --admin-token bench ${EDGE_FLAGS:-} 2>"$work/edge-nh.log" &
  pids+=($!)
  edge_nh_pid=$!
  servers="$servers edge-nh"
fi

start_nginx "$ORIGIN" "    listen $NGINX;"

cat >"$work/default.vcl" <<VCL
vcl 4.1;
backend default { .host = "${ORIGIN%:*}"; .port = "${ORIGIN#*:}"; }
VCL
$SERVER_PIN varnishd -F -j none -n "$work/varnish" -a "$VARNISH" -f "$work/default.vcl" -s malloc,256m \
  -p thread_pools=2 >"$work/varnish.log" 2>&1 &
pids+=($!)
varnish_pid=$!

if [ "$FLOORS" = 1 ]; then
  (cd bench && go build -o ../bin/hitfloor ./hitfloor)
  $SERVER_PIN ./bin/hitfloor -mode nethttp -listen "$FLOOR_NETHTTP" 2>"$work/floor-nethttp.log" &
  pids+=($!)
  nethttp_pid=$!
  $SERVER_PIN ./bin/hitfloor -mode raw -listen "$FLOOR_RAW" 2>"$work/floor-raw.log" &
  pids+=($!)
  raw_pid=$!
  servers="$servers nethttp raw"
  wait_http "http://$FLOOR_NETHTTP$OBJECT"
  wait_http "http://$FLOOR_RAW$OBJECT"
fi

wait_http "http://$EDGE$OBJECT"
if [ "$EDGE_NH" = 1 ]; then
  wait_http "http://$EDGE_NH_ADDR$OBJECT"
  curl -fsS -o /dev/null "http://$EDGE_NH_ADDR$OBJECT"
fi
wait_http "http://$NGINX$OBJECT"
wait_http "http://$VARNISH$OBJECT"
for u in "http://$EDGE$OBJECT" "http://$NGINX$OBJECT" "http://$VARNISH$OBJECT"; do
  curl -fsS -o /dev/null "$u"; curl -fsS -o /dev/null "$u"
done
echo "hit check:"
echo "  edge:    $(curl -sI "http://$EDGE$OBJECT" | grep -i '^cache-status' | tr -d '\r')"
echo "  nginx:   $(curl -sI "http://$NGINX$OBJECT" | grep -i '^cache-status' | tr -d '\r')"
echo "  varnish: $(curl -sI "http://$VARNISH$OBJECT" | grep -iE '^(x-varnish|age)' | tr '\r\n' '  ')"

# tree_pids PID... prints the pids and all their descendants (nginx's and
# Varnish's workers are children of the process we started).
tree_pids() {
  local p
  for p in "$@"; do
    echo "$p"
    tree_pids $(cat "/proc/$p/task/"*/children 2>/dev/null) 2>/dev/null || true
  done
}


server_pids() {
  case $1 in
  edge) tree_pids "$edge_pid" ;;
  edge-nh) echo "$edge_nh_pid" ;;
  nginx) tree_pids "$(cat "$work/nginx.pid")" ;;
  varnish) tree_pids "$varnish_pid" ;;
  nethttp) echo "$nethttp_pid" ;;
  raw) echo "$raw_pid" ;;
  esac
}

# run NAME URL -> appends "NAME rps p50_ms p99_ms cpu_us_per_req" to $work/results
run() {
  local out procs before after
  procs=$(server_pids "$1")
  before=$(proc_ticks $procs)
  out=$($CLIENT_PIN wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" --latency "$2")
  after=$(proc_ticks $procs)
  local rps p50 p99 errs reqs cpu
  rps=$(awk '/^Requests\/sec/ {print $2}' <<<"$out")
  reqs=$(awk '/requests in/ {print $1}' <<<"$out")
  p50=$(to_ms "$(awk '$1=="50%" {print $2}' <<<"$out")")
  p99=$(to_ms "$(awk '$1=="99%" {print $2}' <<<"$out")")
  errs=$(awk '/Non-2xx|Socket errors/ {print}' <<<"$out" | tr '\n' ' ')
  # A run wrk could not measure, or one whose answers were not the cached
  # 200, would enter the medians as a rate of something else: stop (as
  # bench-tls.sh does). Socket errors (timeouts under load) are printed.
  if [ -z "$rps" ] || [ -z "$reqs" ] || [ "$reqs" = 0 ]; then
    bench_tool_failed "$1" wrk "$out"
  fi
  if grep -q 'Non-2xx' <<<"$out"; then
    echo "bench-compare: $1 answered non-2xx responses, so its rate is not the cached object's: $errs" >&2
    exit 1
  fi
  cpu=$(awk -v t=$((after - before)) -v hz="$(getconf CLK_TCK)" -v n="$reqs" 'BEGIN { printf "%.2f", t / hz * 1e6 / n }')
  echo "$1 $rps $p50 $p99 $cpu" >>"$work/results"
  printf '  %-8s %10.0f req/s   p50 %7.3f ms   p99 %7.3f ms   CPU %6.2f µs/req %s\n' "$1" "$rps" "$p50" "$p99" "$cpu" "$errs"
}

echo
echo "wrk -t$THREADS -c$CONNS -d$DURATION on $OBJECT (cached), $ROUNDS rounds, servers interleaved; $(if [ "${PIN:-0}" = 1 ]; then echo "servers pinned to CPU 1, wrk to CPU 0"; else echo "$(nproc) cores shared by wrk and the server"; fi)"
for r in $(seq 1 "$ROUNDS"); do
  echo "round $r"
  run edge "http://$EDGE$OBJECT"
  run nginx "http://$NGINX$OBJECT"
  run varnish "http://$VARNISH$OBJECT"
  if [ "$EDGE_NH" = 1 ]; then
    run edge-nh "http://$EDGE_NH_ADDR$OBJECT"
  fi
  if [ "$FLOORS" = 1 ]; then
    run nethttp "http://$FLOOR_NETHTTP$OBJECT"
    run raw "http://$FLOOR_RAW$OBJECT"
  fi
done

echo
echo "median over rounds:"
awk -v servers="$servers" '
  { rps[$1]=rps[$1] " " $2; p50[$1]=p50[$1] " " $3; p99[$1]=p99[$1] " " $4; cpu[$1]=cpu[$1] " " $5 }
  function med(s,   a, n, i, j, t) { n=split(s, a, " "); for (i=1;i<=n;i++) for (j=i+1;j<=n;j++) if (a[j]+0 < a[i]+0) { t=a[i]; a[i]=a[j]; a[j]=t }
    return (n%2) ? a[(n+1)/2] : (a[n/2]+a[n/2+1])/2 }
  END {
    for (s in rps) { R[s]=med(rps[s]); P50[s]=med(p50[s]); P99[s]=med(p99[s]); C[s]=med(cpu[s]) }
    printf "  %-8s %10s %10s %10s %12s %14s\n", "server", "req/s", "p50 ms", "p99 ms", "CPU µs/req", "CPU s/10k req"
    n=split(servers, order, " ")
    for (i=1;i<=n;i++) { s=order[i]; printf "  %-8s %10.0f %10.3f %10.3f %12.2f %14.3f\n", s, R[s], P50[s], P99[s], C[s], C[s]/100 }
    printf "\n  edge/nginx   req/s ratio %.2f   p99 ratio %.2f   CPU per request ratio %.2f (target: req/s >= 0.9, p99 <= 1.5)\n", R["edge"]/R["nginx"], P99["edge"]/P99["nginx"], C["edge"]/C["nginx"]
    printf "  edge/varnish req/s ratio %.2f   p99 ratio %.2f   CPU per request ratio %.2f (target: req/s >= 1.2)\n", R["edge"]/R["varnish"], P99["edge"]/P99["varnish"], C["edge"]/C["varnish"]
    if ("edge-nh" in C) {
      printf "  edge hit path against edge through net/http: req/s %.2fx, CPU per request %.2fx\n", R["edge"]/R["edge-nh"], C["edge"]/C["edge-nh"]
    }
    if ("nethttp" in C) {
      printf "  floors: net/http %.2f µs/req (edge adds %.2f), raw HTTP/1.1 loop %.2f µs/req; net/http/nginx req/s %.2f, raw/nginx req/s %.2f\n", C["nethttp"], C["edge"]-C["nethttp"], C["raw"], R["nethttp"]/R["nginx"], R["raw"]/R["nginx"]
    }
  }' "$work/results"
echo
echo "edge's hit path: $(curl -s "http://$EDGE_ADMIN/metrics" | grep -E '^edge_hitpath_(answered_total|net_http_connections_total)' | tr '\n' ' ')"
