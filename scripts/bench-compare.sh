#!/usr/bin/env bash
# Compares edge with nginx proxy_cache and Varnish on a cached 4 KiB object,
# in the same run, with the same wrk settings, and prints req/s, p50/p99 and
# the ratios. Installs nginx, Varnish and wrk from Debian packages if missing.
# Everything listens on 127.0.0.1 and is stopped on exit.
#
# Knobs (environment): DURATION (10s), CONNS (64), THREADS (1), ROUNDS (2),
# OBJECT (/size/4096).
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-10s}
CONNS=${CONNS:-64}
THREADS=${THREADS:-1}
ROUNDS=${ROUNDS:-2}
OBJECT=${OBJECT:-/size/4096}
ORIGIN=127.0.0.1:18090
EDGE=127.0.0.1:18080
EDGE_ADMIN=127.0.0.1:19180
NGINX=127.0.0.1:18081
VARNISH=127.0.0.1:18082

# shellcheck source=scripts/bench-lib.sh
. scripts/bench-lib.sh
bench_install nginx:nginx varnishd:varnish wrk:wrk

./bin/edge origin --listen "$ORIGIN" --latency 0s --jitter 0s 2>"$work/origin.log" &
pids+=($!)
./bin/edge serve --origin "http://$ORIGIN" --listen "$EDGE" --admin-listen "$EDGE_ADMIN" \
  --cache-size 256MiB --log-level warn 2>"$work/edge.log" &
pids+=($!)

start_nginx "$ORIGIN" "    listen $NGINX;"

cat >"$work/default.vcl" <<VCL
vcl 4.1;
backend default { .host = "${ORIGIN%:*}"; .port = "${ORIGIN#*:}"; }
VCL
varnishd -F -j none -n "$work/varnish" -a "$VARNISH" -f "$work/default.vcl" -s malloc,256m \
  -p thread_pools=2 >"$work/varnish.log" 2>&1 &
pids+=($!)

wait_http "http://$EDGE$OBJECT"
wait_http "http://$NGINX$OBJECT"
wait_http "http://$VARNISH$OBJECT"
for u in "http://$EDGE$OBJECT" "http://$NGINX$OBJECT" "http://$VARNISH$OBJECT"; do
  curl -fsS -o /dev/null "$u"; curl -fsS -o /dev/null "$u"
done
echo "hit check:"
echo "  edge:    $(curl -sI "http://$EDGE$OBJECT" | grep -i '^cache-status' | tr -d '\r')"
echo "  nginx:   $(curl -sI "http://$NGINX$OBJECT" | grep -i '^cache-status' | tr -d '\r')"
echo "  varnish: $(curl -sI "http://$VARNISH$OBJECT" | grep -iE '^(x-varnish|age)' | tr '\r\n' '  ')"

# run NAME URL -> appends "NAME rps p50_ms p99_ms" to $work/results
run() {
  local out
  out=$(wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" --latency "$2")
  local rps p50 p99 errs
  rps=$(awk '/^Requests\/sec/ {print $2}' <<<"$out")
  p50=$(to_ms "$(awk '$1=="50%" {print $2}' <<<"$out")")
  p99=$(to_ms "$(awk '$1=="99%" {print $2}' <<<"$out")")
  errs=$(awk '/Non-2xx|Socket errors/ {print}' <<<"$out" | tr '\n' ' ')
  echo "$1 $rps $p50 $p99" >>"$work/results"
  printf '  %-8s %10.0f req/s   p50 %7.3f ms   p99 %7.3f ms %s\n' "$1" "$rps" "$p50" "$p99" "$errs"
}

echo
echo "wrk -t$THREADS -c$CONNS -d$DURATION on $OBJECT (cached), $ROUNDS rounds, servers interleaved; $(nproc) cores shared by wrk and the server"
for r in $(seq 1 "$ROUNDS"); do
  echo "round $r"
  run edge "http://$EDGE$OBJECT"
  run nginx "http://$NGINX$OBJECT"
  run varnish "http://$VARNISH$OBJECT"
done

echo
echo "median over rounds:"
awk '
  { rps[$1]=rps[$1] " " $2; p50[$1]=p50[$1] " " $3; p99[$1]=p99[$1] " " $4 }
  function med(s,   a, n, i, j, t) { n=split(s, a, " "); for (i=1;i<=n;i++) for (j=i+1;j<=n;j++) if (a[j]+0 < a[i]+0) { t=a[i]; a[i]=a[j]; a[j]=t }
    return (n%2) ? a[(n+1)/2] : (a[n/2]+a[n/2+1])/2 }
  END {
    for (s in rps) { R[s]=med(rps[s]); P50[s]=med(p50[s]); P99[s]=med(p99[s]) }
    printf "  %-8s %10s %10s %10s\n", "server", "req/s", "p50 ms", "p99 ms"
    split("edge nginx varnish", order, " ")
    for (i=1;i<=3;i++) { s=order[i]; printf "  %-8s %10.0f %10.3f %10.3f\n", s, R[s], P50[s], P99[s] }
    printf "\n  edge/nginx   req/s ratio %.2f   p99 ratio %.2f\n", R["edge"]/R["nginx"], P99["edge"]/P99["nginx"]
    printf "  edge/varnish req/s ratio %.2f   p99 ratio %.2f\n", R["edge"]/R["varnish"], P99["edge"]/P99["varnish"]
  }' "$work/results"
