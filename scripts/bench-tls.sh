#!/usr/bin/env bash
# Compares edge with nginx (proxy_cache + ssl + http2) over TLS on a cached
# 4 KiB object, in the same run, with the same ECDSA P-256 certificate:
#   1. keep-alive HTTPS hits/s and p50/p99 (wrk over TLS);
#   2. new TLS handshakes per second, no resumption (openssl s_time -new,
#      each connection also fetches the object);
#   3. resumed TLS handshakes per second (openssl s_time -reuse: session
#      tickets), each connection fetching the object;
#   4. HTTP/2 hits/s (h2load, Debian package nghttp2-client), mean latency.
# For each it prints the median over ROUNDS, the ratio edge/nginx, and the
# CPU time each server used per 10k requests (wrk and the server share the
# two cores, so req/s alone understates the cheaper server).
# Installs nginx, wrk, openssl and nghttp2-client from Debian if missing.
#
# Knobs: DURATION (10s), CONNS (64), ROUNDS (3), OBJECT (/size/4096), PIN (1:
# servers on CPU 1, the clients on CPU 0; scripts/bench-lib.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-10s}
SECS=${DURATION%s}
CONNS=${CONNS:-64}
ROUNDS=${ROUNDS:-3}
OBJECT=${OBJECT:-/size/4096}
ORIGIN=127.0.0.1:18190
EDGE=127.0.0.1:18180
EDGE_TLS=127.0.0.1:18443
EDGE_ADMIN=127.0.0.1:19190
NGINX=127.0.0.1:18444

BENCH_PIN_SUPPORTED=1 # every server and client below takes $SERVER_PIN / $CLIENT_PIN
# shellcheck source=scripts/bench-lib.sh
. scripts/bench-lib.sh
bench_install nginx:nginx wrk:wrk h2load:nghttp2-client openssl:openssl
bench_build_edge

bench_cert "$work"

$SERVER_PIN ./bin/edge origin --listen "$ORIGIN" --latency 0s --jitter 0s 2>"$work/origin.log" &
pids+=($!)
$SERVER_PIN ./bin/edge serve --origin "http://$ORIGIN" --listen "$EDGE" --admin-listen "$EDGE_ADMIN" --cache-size 256MiB \
  --tls-listen "$EDGE_TLS" --tls-cert "$work/cert.pem" --tls-key "$work/key.pem" --log-level warn 2>"$work/edge.log" &
edge_pid=$!
pids+=($edge_pid)

start_nginx "$ORIGIN" "    listen $NGINX ssl http2;
    ssl_certificate $work/cert.pem;
    ssl_certificate_key $work/key.pem;
    ssl_protocols TLSv1.2 TLSv1.3;"

wait_http "https://$EDGE_TLS$OBJECT" -k
wait_http "https://$NGINX$OBJECT" -k
for u in "https://$EDGE_TLS$OBJECT" "https://$NGINX$OBJECT"; do curl -ks -o /dev/null "$u"; curl -ks -o /dev/null "$u"; done
echo "hit check:"
echo "  edge:  $(curl -ksI --http2 "https://$EDGE_TLS$OBJECT" | grep -iE '^(HTTP|cache-status)' | tr -d '\r' | tr '\n' ' ')"
echo "  nginx: $(curl -ksI --http2 "https://$NGINX$OBJECT" | grep -iE '^(HTTP|cache-status)' | tr -d '\r' | tr '\n' ' ')"

# cpu_ticks NAME -> user+system clock ticks of the server's processes
cpu_ticks() {
  if [ "$1" = edge ]; then proc_ticks "$edge_pid"; else proc_ticks $(pgrep -f "nginx: (master|worker)"); fi
}
hz=$(getconf CLK_TCK)
# record TEST SERVER VALUE P50 P99 CPU_MS_PER_10K
record() { echo "$*" >>"$work/results"; printf '  %-10s %-6s %10.0f/s   p50 %7s ms   p99 %7s ms   cpu %7.1f ms/10k\n' "$@"; }

keepalive() { # name url
  local c0 out rps p50 p99 cpu
  c0=$(cpu_ticks "$1")
  out=$($CLIENT_PIN wrk -t1 -c"$CONNS" -d"$DURATION" --latency "$2")
  cpu=$(( $(cpu_ticks "$1") - c0 ))
  rps=$(awk '/^Requests\/sec/ {print $2}' <<<"$out")
  [ -n "$rps" ] || bench_tool_failed "$1" wrk "$out"
  if grep -qE 'Non-2xx|Socket errors' <<<"$out"; then
    echo "  (wrk against $1: $(grep -E 'Non-2xx|Socket errors' <<<"$out" | tr -s ' ' | tr '\n' ';'))" >&2
  fi
  p50=$(to_ms "$(awk '$1=="50%" {print $2}' <<<"$out")")
  p99=$(to_ms "$(awk '$1=="99%" {print $2}' <<<"$out")")
  record https/1.1 "$1" "$rps" "$p50" "$p99" "$(awk -v c="$cpu" -v hz="$hz" -v r="$rps" -v s="$SECS" 'BEGIN{print c/hz*1000/(r*s/10000)}')"
}
handshakes() { # name hostport [label s_time-mode]
  local c0 out conns n cpu t0 t1 label=${3:-handshake} mode=${4:--new}
  c0=$(cpu_ticks "$1")
  t0=$(date +%s%N)
  out=$($CLIENT_PIN openssl s_time -connect "$2" "$mode" -time "$SECS" -www "$OBJECT" 2>/dev/null)
  t1=$(date +%s%N)
  cpu=$(( $(cpu_ticks "$1") - c0 ))
  # s_time prints "N connections in X real seconds" with X in whole
  # seconds (one more than asked, whatever the wall time: a review saw
  # "4 real seconds" for 3.2 to 4.2 s), so the rate is N over the wall
  # time measured here, and the CPU is per connection made.
  conns=$(awk '/connections in/ && /real seconds/ {print $1; exit}' <<<"$out")
  [ -n "$conns" ] || bench_tool_failed "$1" "s_time $mode" "$out"
  if [ "$mode" = -reuse ]; then
    # s_time prints r for each resumed connection and * for a full one.
    local fresh; fresh=$(tr -cd '*' <<<"$out" | wc -c)
    [ "$fresh" -le $(( conns / 100 + 1 )) ] || echo "  (s_time -reuse against $1: $fresh of $conns connections not resumed)" >&2
  fi
  n=$(awk -v c="${conns:-0}" -v t0="$t0" -v t1="$t1" 'BEGIN{printf "%.1f", c/((t1-t0)/1e9)}')
  record "$label" "$1" "$n" - - "$(awk -v c="$cpu" -v hz="$hz" -v k="${conns:-0}" 'BEGIN{if (k>0) print c/hz*1000/(k/10000); else print "-"}')"
}
h2() { # name url
  local c0 out rps mean cpu
  c0=$(cpu_ticks "$1")
  out=$($CLIENT_PIN h2load -D "$SECS" -c "$CONNS" -m 10 -t 1 "$2" 2>&1)
  cpu=$(( $(cpu_ticks "$1") - c0 ))
  rps=$(awk '/^finished in/ {for (i=1;i<=NF;i++) if ($i=="req/s,") print $(i-1)}' <<<"$out")
  [ -n "$rps" ] || bench_tool_failed "$1" h2load "$out"
  mean=$(awk '/^time for request:/ {print $6}' <<<"$out") # fields: min max mean sd
  record h2 "$1" "${rps:-0}" "${mean:-?}(mean)" - "$(awk -v c="$cpu" -v hz="$hz" -v r="${rps:-1}" -v s="$SECS" 'BEGIN{print c/hz*1000/(r*s/10000)}')"
}

echo
echo "$ROUNDS rounds of $DURATION each, servers interleaved; $(nproc) cores shared by the client and the server"
addr() { if [ "$1" = edge ]; then echo "$EDGE_TLS"; else echo "$NGINX"; fi; }
for r in $(seq 1 "$ROUNDS"); do
  echo "round $r"
  # Which server goes first alternates by round: an order effect (the
  # machine's state after the other's run) falls on both.
  if (( r % 2 )); then order="edge nginx"; else order="nginx edge"; fi
  for s in $order; do keepalive "$s" "https://$(addr "$s")$OBJECT"; done
  for s in $order; do handshakes "$s" "$(addr "$s")"; done
  for s in $order; do handshakes "$s" "$(addr "$s")" resumed -reuse; done
  for s in $order; do h2 "$s" "https://$(addr "$s")$OBJECT"; done
done

echo
echo "median over rounds (ratio edge/nginx; for CPU per 10k requests lower is better):"
awk '
  { k=$1; s=$2; v[k,s]=v[k,s] " " $3; p50[k,s]=p50[k,s] " " $4; p99[k,s]=p99[k,s] " " $5; cpu[k,s]=cpu[k,s] " " $6 }
  function med(s,   a, n, i, j, t) { n=split(s, a, " "); for (i=1;i<=n;i++) for (j=i+1;j<=n;j++) if (a[j]+0 < a[i]+0) { t=a[i]; a[i]=a[j]; a[j]=t }
    return (n%2) ? a[(n+1)/2] : (a[n/2]+a[n/2+1])/2 }
  END {
    split("https/1.1 handshake resumed h2", tests, " ")
    for (i=1;i<=4;i++) { k=tests[i]
      e=med(v[k,"edge"]); n=med(v[k,"nginx"]); ce=med(cpu[k,"edge"]); cn=med(cpu[k,"nginx"])
      printf "  %-10s edge %8.0f/s  nginx %8.0f/s  ratio %.2f", k, e, n, (n>0?e/n:0)
      if (k=="https/1.1") printf "   p50 %s/%s ms  p99 %s/%s ms (p99 ratio %.2f)", med(p50[k,"edge"]), med(p50[k,"nginx"]), med(p99[k,"edge"]), med(p99[k,"nginx"]), (med(p99[k,"nginx"])>0?med(p99[k,"edge"])/med(p99[k,"nginx"]):0)
      if (k=="h2") printf "   mean latency %s / %s", med(p50[k,"edge"]), med(p50[k,"nginx"])
      printf "   cpu/10k %.0f / %.0f ms\n", ce, cn
    }
  }' "$work/results"
