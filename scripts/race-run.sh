#!/usr/bin/env bash
# make test's race run. The packages named before "--" (cluster) run beside
# the rest instead of in one of go test's -p slots: their tests wait on real
# peer timeouts and heartbeats, so cluster alone took 231 s of wall time for
# 60 s of CPU (a quarter of a core), holding a slot two CPU-bound packages
# could use. Their output is printed after the rest's; the exit status is
# the worse of the two runs.
# usage: race-run.sh SLOW_PKG... -- PKG...   (GO, TEST_TIMEOUT from the Makefile)
set -uo pipefail
slow=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do slow+=("$1"); shift; done
shift
go=${GO:-go}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$go" test -race -timeout "${TEST_TIMEOUT:-12m}" "${slow[@]}" >"$log" 2>&1 &
beside=$!
"$go" test -race -timeout "${TEST_TIMEOUT:-12m}" "$@"
rc=$?
wait "$beside"
rc_beside=$?
cat "$log"
[ "$rc" -ne 0 ] && exit "$rc"
exit "$rc_beside"
