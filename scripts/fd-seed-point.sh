#!/usr/bin/env bash
# ml-seed, the seed's LSTM, has no knob: it is compared at its own operating
# point. For each trace set and metric (the seed's, lost heartbeats
# counted, and Chen's), replay ml-seed (retrain_every=100;
# retraining after every heartbeat costs 84 ms per heartbeat) and sweep
# every other detector to the P_A it reached. Needs the pooled traces that
# fd-tables.sh leaves in DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
EDGE=${EDGE:-./bin/edge}
DIR=${DIR:?set DIR to fd-tables.sh\'s trace directory}
for set in tuning heldout sleep; do
  "$EDGE" fd replay --trace "$DIR/$set.csv" --detector ml-seed --param retrain_every=100 --json >"$DIR/$set-mlseed.json"
  for m in seed chen; do
    if [ "$m" = seed ]; then
      read -r pa td < <(jq -r '.overall | "\(.pa) \(.td_ms)"' "$DIR/$set-mlseed.json")
    else
      read -r pa td < <(jq -r '.overall | "\(.pa_time) \(.td_chen_ms)"' "$DIR/$set-mlseed.json")
    fi
    row="| $set | $m | $(printf '%.5f' "$pa") | $(printf '%.1f' "$td")"
    for d in chen bertier phi twowindows ml ml+loss; do
      args=()
      # ml by Chen's metric: fd sweep's default (time objective, combined
      # knob), which leaves the loss model out: ml+loss is ml there. By the
      # seed's metric the sweep's default is ml+loss, so plain ml says
      # loss_model=0.
      case $d in
        ml+loss) args=(--param loss_model=2) ;;
        ml) args=(--param loss_model=0) ;;
      esac
      v=$("$EDGE" fd sweep --trace "$DIR/$set.csv" --metric "$m" --target-pa "$pa" --detector "${d%+loss}" ${args[@]+"${args[@]}"} --json |
        jq -r 'if .found then "\(.td_ms*10|round/10)" else "(\(.td_ms*10|round/10), not reached)" end')
      row="$row | $v"
    done
    echo "$row |"
  done
done
