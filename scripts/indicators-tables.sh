#!/usr/bin/env bash
# Reproduces the tables of docs/indicators.md: the paper's setting (3 caches
# of 10 000, bpe 14, U 1000, costs 1,2,3) on every shared trace at M = 50,
# 100, 500, with the paper's fnr estimator and with ours.
set -euo pipefail
cd "$(dirname "$0")/.."
T=${TRACES:-../shared/traces/cache}
for t in "scarab-recs.trace.xz int64be" "web07.trace.xz int32be" "adaptsize-request.trace.xz adaptsize"; do
  set -- $t
  for M in 50 100 500; do
    for est in bits count; do
      echo "== $1 M=$M fnr-estimator=$est"
      ./bin/edge sim cache --trace "$T/$1" --format "$2" --miss-penalty "$M" --fnr-estimator "$est" \
        --policies opt,fno,fna,fna-hist,fna-home | tail -n +3
    done
  done
done
