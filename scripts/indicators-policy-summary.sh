#!/usr/bin/env bash
# Summarises docs/indicators-policy-grid.csv (indicators-policy-grid.sh): per
# trace, rules and costs, each policy's worst ratio to fno over the sweep
# points (and where), and the smallest share of FNO's excess cost over opt it
# removes, (fno − policy)/(fno − opt), over points where fno − opt > 1 % of
# opt (below that the share is noise). SUMMARY_POLICIES (space-separated)
# picks the policies to summarise; by default fna, fna-home, fna-learned and
# fna-rate.
set -euo pipefail
awk -F, 'NR > 1 {
  g = $1 " faithful=" $2 " costs=" $3; p = $4 "=" $5
  c[g, p, $6] = $7; pts[g, p] = 1; groups[g] = 1
}
END {
  n = split(ENVIRON["SUMMARY_POLICIES"] != "" ? ENVIRON["SUMMARY_POLICIES"] : "fna fna-home fna-learned fna-rate", pol, " ")
  printf "%-48s", "trace rules costs"
  for (i = 1; i <= n; i++) printf " %12s %-20s %7s", pol[i] "/fno", "worst at", "min rm"
  printf "\n"
  for (g in groups) {
    printf "%-48s", g
    for (i = 1; i <= n; i++) {
      w = 0; wp = ""; r = 9
      for (k in pts) {
        split(k, a, SUBSEP); if (a[1] != g) continue
        fno = c[g, a[2], "fno"]; opt = c[g, a[2], "opt"]; v = c[g, a[2], pol[i]]
        if (v / fno > w) { w = v / fno; wp = a[2] }
        if (fno - opt > 0.01 * opt) { x = (fno - v) / (fno - opt); if (x < r) r = x }
      }
      printf " %12.4f %-20s %7.2f", w, wp, (r == 9 ? 0 : r)
    }
    printf "\n"
  }
}' "${1:-docs/indicators-policy-grid.csv}" | sort
