#!/usr/bin/env bash
# Summarises docs/indicators-grid.csv (see indicators-grid.sh): per trace,
# estimator and rules, the worst fna/fno and fna-home/fno over every sweep
# point, and the smallest share of FNO's excess cost over opt removed,
# (fno − policy)/(fno − opt).
set -euo pipefail
printf "%-40s %9s %-22s %9s %-22s %8s %8s\n" "trace estimator rules" "fna/fno" "worst at" "home/fno" "worst at" "min fna" "min home"
awk -F, 'NR > 1 {
  g = $1 " " $2 " faithful=" $3 " clients=" $4; p = $5 "=" $6
  c[g, p, $7] = $8; pts[g, p] = 1; groups[g] = 1
}
END {
  for (g in groups) {
    wf = 0; wh = 0; rf = 9; rh = 9
    for (k in pts) {
      split(k, a, SUBSEP); if (a[1] != g) continue
      fno = c[g, a[2], "fno"]; opt = c[g, a[2], "opt"]
      f = c[g, a[2], "fna"] / fno; h = c[g, a[2], "fna-home"] / fno
      if (f > wf) { wf = f; wfp = a[2] }
      if (h > wh) { wh = h; whp = a[2] }
      if (fno - opt > 0) {
        x = (fno - c[g, a[2], "fna"]) / (fno - opt); if (x < rf) rf = x
        y = (fno - c[g, a[2], "fna-home"]) / (fno - opt); if (y < rh) rh = y
      }
    }
    printf "%-40s %9.4f %-22s %9.4f %-22s %8.2f %8.2f\n", g, wf, wfp, wh, whp, rf, rh
  }
}' "${1:-docs/indicators-grid.csv}" | sort
