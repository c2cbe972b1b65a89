#!/usr/bin/python3
"""One markdown row for a held-out case of plan_links.sh / plan_heldout.sh (#21).

    plan_case.py DB MODEL CASE FLOOR WHERE

WHERE is an SQL condition on the `plans` table that selects the case's stored
plans (one per held-out run, all made from the same basis). The row gives:
the latency MAPE's median [lowest, highest] over the held-out runs; how often
the chosen split was the measured best of a run, and within 5 % of it (the
worst miss: the chosen split's measured latency over that run's best); the
chosen split against the best of the held-out runs' medians (each split's
measured latency, median over the runs, so one run's noise does not decide
which split is best); and FLOOR, the held-out runs' MAPE against one another.
"""
import sqlite3
import statistics
import sys

if len(sys.argv) != 6:
    sys.exit("usage: plan_case.py DB MODEL CASE FLOOR WHERE (see the top of this file)")
db, model, case, floor, where = sys.argv[1:6]
try:  # read-only: a wrong path is an error, not a new empty database
    c = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    plans = c.execute(f"select id, mape_pct, miss_pct, chosen from plans "
                      f"where mape_pct is not null and ({where}) order by id").fetchall()
except sqlite3.Error as e:
    sys.exit(f"plan_case.py: {db}: cannot read its plans where {where}: {e}")
if not plans:
    print(f"| {model} | {case} | no plan stored | | | | |")
    sys.exit()
mape = [p[1] for p in plans]
miss = [p[2] for p in plans if p[2] is not None]  # None: the chosen split was not measured
best = sum(1 for x in miss if x <= 0.0)
within5 = sum(1 for x in miss if x <= 5.0)
worst = f" (worst +{max(miss):.1f} %)" if miss else " (chosen split not measured)"

# Each split's measured latency over the held-out runs: the median of the
# runs' medians, for the splits every run measured.
per_split = {}
for pid, *_ in plans:
    for split, ms in c.execute("select split, measured_ms from plan_rows where plan_id = ? "
                               "and measured_ms is not null", (pid,)):
        per_split.setdefault(split, []).append(ms)
medians = {s: statistics.median(v) for s, v in per_split.items() if len(v) == len(plans)}
chosen = {p[3] for p in plans}
if medians and chosen <= medians.keys():
    low = min(medians.values())
    gap = max(medians[s] / low - 1.0 for s in chosen) * 100.0
    pooled = "the best" if gap <= 0.0 else f"+{gap:.1f} %"
else:
    pooled = "not measured in every run"
print(f"| {model} | {case} | {statistics.median(mape):.1f} % [{min(mape):.1f}, {max(mape):.1f}] | "
      f"{best} of {len(plans)} | {within5} of {len(plans)}{worst} | {pooled} | {floor} |")
