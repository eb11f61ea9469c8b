# Shared parts of the whole-system benchmarks (bench-compare.sh,
# bench-tls.sh, bench-miss.sh, ab-tls-handshakes.sh): installing what is
# missing, a work directory cleaned up on exit, waiting for a server, nginx
# with proxy_cache in front of the demo origin, a test certificate, the CPU
# a process used, stopping on a load tool's failure, and wrk's latency
# units. Source it; it sets $work and $pids.

bench_build_edge() { # the current code's bin/edge, every run: go build is a no-op when it is fresh,
  # and a binary older than the tree (a review: the scripts built only a missing one) measures
  # old code, and in bench-miss is the load generator too.
  make --no-print-directory build >/dev/null
}

# bench_install CMD:PACKAGE... installs the Debian packages of missing commands.
bench_install() {
  local need=() pair
  for pair in "$@"; do
    command -v "${pair%%:*}" >/dev/null || [ -x "/usr/sbin/${pair%%:*}" ] || need+=("${pair#*:}")
  done
  if [ ${#need[@]} -gt 0 ]; then
    echo "installing ${need[*]} from Debian packages"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  fi
  export PATH=$PATH:/usr/sbin
}

# PIN=1 runs the servers on CPU 1 and the load generator on CPU 0
# (taskset), so that each has a core of its own and req/s measures the
# server's work rather than how the kernel splits two cores between it
# and the client. nginx then runs one worker (one core), and Go sizes
# GOMAXPROCS to its affinity (1). Unpinned (the default), every process
# shares both cores.
# Only the scripts that pin every server and client they start (they set
# BENCH_PIN_SUPPORTED=1 before sourcing this file) take it: elsewhere nginx
# alone would be pinned to one core while edge ran on both.
SERVER_PIN="" CLIENT_PIN=""
if [ "${PIN:-0}" = 1 ]; then
  if [ "${BENCH_PIN_SUPPORTED:-0}" != 1 ]; then
    echo "PIN=1 is for bench-compare.sh and bench-tls.sh only: $(basename "$0") does not pin what it starts" >&2
    exit 2
  fi
  if [ "$(nproc)" -lt 2 ]; then
    echo "PIN=1 needs two CPUs (servers on CPU 1, clients on CPU 0); this machine has $(nproc)" >&2
    exit 2
  fi
  SERVER_PIN="taskset -c 1" CLIENT_PIN="taskset -c 0"
  NGINX_WORKERS=${NGINX_WORKERS:-1}
fi

work=$(mktemp -d)
pids=()
bench_cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  [ -f "$work/nginx.pid" ] && kill "$(cat "$work/nginx.pid")" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap bench_cleanup EXIT
fail_logs() { for f in "$work"/*.log; do echo "== $f"; tail -5 "$f"; done; }

# bench_cert DIR writes an ECDSA P-256 certificate for bench.test and
# 127.0.0.1, valid two days, to DIR/cert.pem and DIR/key.pem.
bench_cert() {
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=bench.test \
    -addext "subjectAltName=DNS:bench.test,IP:127.0.0.1" -keyout "$1/key.pem" -out "$1/cert.pem" 2>/dev/null
}

# proc_ticks PID... sums user + system clock ticks of the processes.
proc_ticks() {
  local t=0 p
  for p in "$@"; do
    [ -r "/proc/$p/stat" ] || continue # gone (a worker nginx replaced)
    # Fields after the command name (which may hold spaces): utime is the
    # 12th, stime the 13th.
    t=$((t + $(sed 's/.*) //' "/proc/$p/stat" 2>/dev/null | awk '{print $12 + $13}' || echo 0)))
  done
  echo "$t"
}

# bench_tool_failed SERVER TOOL OUTPUT stops the run on a load tool that
# gave no usable result (a review: a failed run was recorded as 0, or as
# the rate of something else, and taken into the medians).
bench_tool_failed() {
  echo "$(basename "$0" .sh): $2 against $1 gave no result:" >&2
  tail -5 <<<"$3" >&2
  exit 1
}

# wait_http URL [CURL_FLAGS] waits up to 10 s for a 2xx answer.
wait_http() {
  for _ in $(seq 1 100); do
    curl -fsS ${2:-} -o /dev/null "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "not answering: $1" >&2; fail_logs >&2; return 1
}

# start_nginx ORIGIN LISTEN_BLOCK starts nginx with proxy_cache in front of
# ORIGIN; LISTEN_BLOCK holds the server's listen (and TLS) directives.
# NGINX_CACHE_LOCK (on) is proxy_cache_lock: on collapses concurrent misses
# as edge does, but its waiters poll every 500 ms; off is nginx's default.
start_nginx() {
  mkdir -p "$work/nginx-cache"
  local user=""
  [ "$(id -u)" = 0 ] && user="user root;" # workers must write the cache directory
  cat >"$work/nginx.conf" <<CONF
$user
worker_processes ${NGINX_WORKERS:-auto};
pid $work/nginx.pid;
error_log $work/nginx-error.log warn;
daemon on;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 10000000; # nginx closes a connection after 1000 requests by default; edge does not
  proxy_cache_path $work/nginx-cache levels=1:2 keys_zone=edge:${NGINX_KEYS_ZONE:-32m} max_size=${NGINX_CACHE_MAX:-256m} inactive=1d use_temp_path=off;
  upstream origin { server $1; keepalive 64; }
  server {
$2
    location / {
      proxy_pass http://origin;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_cache edge;
      proxy_cache_lock ${NGINX_CACHE_LOCK:-on};
      add_header Cache-Status \$upstream_cache_status;
    }
  }
}
CONF
  $SERVER_PIN nginx -c "$work/nginx.conf" -e "$work/nginx-error.log"
}

# to_ms converts wrk's latency (512.00us, 1.20ms, 1.01s) to milliseconds.
to_ms() {
  awk -v v="$1" 'BEGIN{ if (v ~ /us$/) { sub(/us$/,"",v); print v/1000 } else if (v ~ /ms$/) { sub(/ms$/,"",v); print v+0 } else if (v ~ /s$/) { sub(/s$/,"",v); print v*1000 } else print v }'
}
