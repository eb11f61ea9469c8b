#!/usr/bin/env bash
# The paper-setting tables of docs/indicators.md: 3 caches of 10 000, bpe 14,
# U 1000, costs 1,2,3, M = 50/100/500, on every shared trace (all requests),
# with the paper's fnr estimator (bits) and ours (exact), our simulator rules
# and the authors' (--faithful), one client and four (--clients 4). Writes
# docs/indicators-paper.csv and prints a markdown table: cost relative to
# opt, and the share of FNO's excess over opt each policy removes.
set -euo pipefail
cd "$(dirname "$0")/.."
T=${TRACES:-../shared/traces/cache}
EDGE=${EDGE:-./bin/edge}
OUT=${OUT:-docs/indicators-paper.csv}
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
echo "trace,estimator,faithful,clients,sweep,value,policy,cost_per_request,cost_vs_opt,hit_ratio,fn_ratio,fp_ratio,caches_asked,adv_bytes_per_request,advertisements" >"$OUT"
for t in "scarab-recs.trace.xz int64be" "web07.trace.xz int32be" "adaptsize-request.trace.xz adaptsize"; do
  set -- $t
  for est in bits exact; do
    for faithful in false true; do
      for clients in 1 4; do
        "$EDGE" sim cache --trace "$T/$1" --format "$2" --fnr-estimator "$est" --faithful="$faithful" --clients "$clients" \
          --policies opt,fno,fna,fna-hist,fna-home --sweep miss-penalty=50,100,500 --csv "$tmp"
        tail -n +2 "$tmp" | sed "s/^/${1%%.*},$est,$faithful,$clients,miss-penalty,/" >>"$OUT"
      done
    done
  done
done
echo "| trace | fnr est. | rules | clients | M | fno | fna | fna-hist | fna-home | fna/fno | removed by fna | removed by fna-home |"
echo "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
awk -F, 'NR > 1 { k = $1 "|" $2 "|" $3 "|" $4 "|" $6; c[k, $7] = $9; keys[k] = 1 }
END {
  for (k in keys) {
    split(k, a, "|")
    fno = c[k, "fno"]; fna = c[k, "fna"]; home = c[k, "fna-home"]
    printf "| %s | %s | %s | %s | %s | %.3f | %.3f | %.3f | %.3f | %.3f | %.2f | %.2f |\n", a[1], a[2], (a[3] == "true" ? "authors" : "ours"), a[4], a[5],
      fno, fna, c[k, "fna-hist"], home, fna / fno, (fno - fna) / (fno - 1), (fno - home) / (fno - 1)
  }
}' "$OUT" | sort -t'|' -k2,2 -k3,3 -k4,4 -k5,5n -k6,6n
