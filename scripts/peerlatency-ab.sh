#!/usr/bin/env bash
# A/B of the peer hop: N alternating pairs of `peerlatency -pages PAGES`
# with two edge binaries, printing each run's peer − local p50 difference
# and the median of each binary's runs. This machine's noise (±0.2 ms
# between runs of one binary) needs pairs, not one run each.
#
#   scripts/peerlatency-ab.sh N OLD_BIN NEW_BIN [PAGES]
set -euo pipefail
cd "$(dirname "$0")/.."
n=$1 a=$2 b=$3 pages=${4:-300}
tool=$(mktemp -d)/peerlatency
trap 'rm -rf "$(dirname "$tool")"' EXIT
go build -o "$tool" ./scripts/peerlatency
for i in $(seq 1 "$n"); do
  for bin in "$a" "$b"; do
    d=$("$tool" -edge "$bin" -pages "$pages" 2>&1 | awk '/peer p50 − local p50/ {print $7}')
    echo "pair $i $bin ${d:-failed}"
  done
done | tee /dev/stderr | awk '
  $4 != "failed" { v[$3] = v[$3] " " $4; k[$3] = 1 }
  END {
    for (bin in k) {
      m = split(v[bin], x, " ")
      for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (x[j] + 0 < x[i] + 0) { t = x[i]; x[i] = x[j]; x[j] = t }
      printf "%s: %d runs, median peer − local %.3f ms\n", bin, m, (m % 2) ? x[(m + 1) / 2] : (x[m / 2] + x[m / 2 + 1]) / 2
    }
  }'
