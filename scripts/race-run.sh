#!/usr/bin/env bash
# make test's race run. The packages named before "--" (cluster) run beside
# the rest instead of in one of go test's -p slots: their tests wait on real
# peer timeouts and heartbeats, so cluster alone took 231 s of wall time for
# 60 s of CPU (a quarter of a core), holding a slot two CPU-bound packages
# could use. Their output is printed after the rest's; the exit status is
# the worse of the two runs. Packages are import paths (go list's).
# usage: race-run.sh [BESIDE_PKG...] -- PKG...   (GO, TEST_TIMEOUT from the Makefile)
set -uo pipefail
beside_pkgs=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do beside_pkgs+=("$1"); shift; done
[ $# -gt 0 ] && shift
go=${GO:-go}
timeout=${TEST_TIMEOUT:-12m}
log=$(mktemp)
beside=
# The beside run in its own process group, ended with the script.
trap '[ -n "$beside" ] && kill -TERM -- -"$beside" 2>/dev/null; rm -f "$log"' EXIT
if [ ${#beside_pkgs[@]} -gt 0 ]; then
  set -m
  "$go" test -race -timeout "$timeout" "${beside_pkgs[@]}" >"$log" 2>&1 &
  beside=$!
  set +m
fi
# -parallel 4: the tests marked parallel are the ones that mostly wait
# (certificate polls, handshake timeouts); at the default (GOMAXPROCS, 2)
# node's three such tests ran two at a time.
# -p 3 (RACE_P): three packages at once, not GOMAXPROCS's two. Many of the
# long tests wait (timeouts, stalled clients): with two packages at once the
# two cores were 65 % busy over the run (vmstat, idle clean run, 2026-12-07:
# 519 s of wall time for 674 s of CPU, twice 20 s with both packages
# waiting); with three, 90-99 % busy and 400 s for the same CPU.
"$go" test -race -p "${RACE_P:-3}" -parallel 4 -timeout "$timeout" "$@"
rc=$?
rc_beside=0
if [ -n "$beside" ]; then
  wait "$beside"
  rc_beside=$?
  beside=
  cat "$log"
fi
[ "$rc" -ne 0 ] && exit "$rc"
exit "$rc_beside"
