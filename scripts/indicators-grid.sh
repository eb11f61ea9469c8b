#!/usr/bin/env bash
# The grid behind docs/indicators.md's "fna never loses to fno" table: every
# shared trace, every sweep (U 16…8192, bpe 5…15, M 50/100/500), each fnr
# estimator, our simulator rules and the authors' (--faithful). Writes one
# CSV (docs/indicators-grid.csv) and prints, per trace × estimator × rules,
# the worst fna/fno and fna-home/fno ratios and where they occur, and the
# share of FNO's excess over opt that each policy removes.
set -euo pipefail
cd "$(dirname "$0")/.."
T=${TRACES:-../shared/traces/cache}
OUT=${OUT:-docs/indicators-grid.csv}
ESTIMATORS=${ESTIMATORS:-bits count exact}
EDGE=${EDGE:-./bin/edge}
# Scarab has 1.2 M requests; the grid (20 points × estimators × rules) uses
# its first 400 000 so that it finishes in half an hour on 2 cores. The
# paper-setting table (indicators-tables.sh) uses every request.
SCARAB_REQUESTS=${SCARAB_REQUESTS:-400000}
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
echo "trace,estimator,faithful,clients,sweep,value,policy,cost_per_request,cost_vs_opt,hit_ratio,fn_ratio,fp_ratio,caches_asked,adv_bytes_per_request,advertisements" >"$OUT"
for t in "scarab-recs.trace.xz int64be $SCARAB_REQUESTS" "web07.trace.xz int32be 0" "adaptsize-request.trace.xz adaptsize 0"; do
  set -- $t
  for est in $ESTIMATORS; do
    for faithful in false true; do
      for sweep in update-interval=16,64,256,1024,4096,8192 bpe=5..15 miss-penalty=50,100,500; do
        "$EDGE" sim cache --trace "$T/$1" --format "$2" --requests "$3" --fnr-estimator "$est" --faithful="$faithful" \
          --policies opt,fno,fna,fna-home --sweep "$sweep" --csv "$tmp"
        tail -n +2 "$tmp" | sed "s/^/${1%%.*},$est,$faithful,1,${sweep%%=*},/" >>"$OUT"
      done
    done
  done
done
scripts/indicators-grid-summary.sh "$OUT"
