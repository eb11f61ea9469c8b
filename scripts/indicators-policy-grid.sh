#!/usr/bin/env bash
# The grid behind docs/indicators.md's "A policy that never loses" table:
# fno, the paper's fna, fna-home and fna-learned at every point of the
# sweeps (U 16…8192, bpe 5/10/15, M 50/100/500) under each cost setting
# (3 caches at 1/2/3; 5 caches at 1,1,R,R,R for R = 10, 30, 100) under our
# simulator rules, and at 1/2/3 under the authors' (--faithful: their
# estimator path too), with the paper's fnr estimator (bits, the default).
#
# Traces: the shared ones and two synthetic kinds (scan, churn) were used to
# choose fna-learned's settings; the synthetic drift and loop traces were
# not (held out). Synthetic traces come from scripts/synthtrace (seeded).
#
# Writes docs/indicators-policy-grid.csv and prints, per trace, rules and
# costs, the worst policy/fno ratio and the smallest share of FNO's excess
# over opt removed (scripts/indicators-policy-summary.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
T=${TRACES:-../shared/traces/cache}
OUT=${OUT:-docs/indicators-policy-grid.csv}
EDGE=${EDGE:-./bin/edge}
SYN=${SYN:-$(mktemp -d)}
SCARAB_REQUESTS=${SCARAB_REQUESTS:-200000} # Scarab: its first 200 000 requests
REQUESTS=${REQUESTS:-100000}               # each synthetic trace (so the grid takes about an hour on 2 cores)
POLICIES=${POLICIES:-opt,fno,fna,fna-home,fna-learned} # a subset reruns only those (the summary wants all five)
for k in scan churn drift loop; do
  [ -s "$SYN/$k.bin" ] || go run ./scripts/synthtrace -kind "$k" -requests "$REQUESTS" -o "$SYN/$k.bin"
done
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
echo "trace,faithful,costs,sweep,value,policy,cost_per_request,cost_vs_opt,hit_ratio,fn_ratio,fp_ratio,caches_asked,adv_bytes_per_request,advertisements" >"$OUT"
for t in "$T/scarab-recs.trace.xz int64be $SCARAB_REQUESTS scarab" "$T/web07.trace.xz int32be 0 web07" "$T/adaptsize-request.trace.xz adaptsize 0 adaptsize" \
  "$SYN/scan.bin int64be 0 scan" "$SYN/churn.bin int64be 0 churn" "$SYN/drift.bin int64be 0 drift" "$SYN/loop.bin int64be 0 loop"; do
  set -- $t
  for faithful in false true; do
    for costs in "3 1,2,3" "5 1,1,10,10,10" "5 1,1,30,30,30" "5 1,1,100,100,100"; do
      # The authors' rules (their estimator path) at the paper's costs only:
      # the faithful-vs-ours comparison, in a third of the time.
      [ "$faithful" = true ] && [ "$costs" != "3 1,2,3" ] && continue
      read -r caches cl <<<"$costs"
      for sweep in update-interval=16,64,256,1024,4096,8192 bpe=5,10,15 miss-penalty=50,100,500; do
        "$EDGE" sim cache --trace "$1" --format "$2" --requests "$3" --faithful="$faithful" --caches "$caches" --costs "$cl" \
          --policies "$POLICIES" --sweep "$sweep" --csv "$tmp"
        tail -n +2 "$tmp" | sed "s/^/$4,$faithful,${cl//,/ },${sweep%%=*},/" >>"$OUT"
      done
    done
  done
done
scripts/indicators-policy-summary.sh "$OUT"
