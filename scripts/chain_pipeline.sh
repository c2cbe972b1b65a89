#!/usr/bin/env bash
# Chains pipelined (#43): config/experiments/chain.yaml's three local agents
# (phone -> edge -> cloud, AlexNet 64x64) at five placements, run with one
# frame in flight and with INFLIGHT (default 4), both in one database; then
# `tracrctl plan` on the first run predicts each placement's throughput as
# its slowest stage (head, a hop's transfer, a device's compute + own time).
# Prints, per placement, frames/s at inflight 1, at INFLIGHT, the ratio, the
# predicted bound and measured / predicted.
#   bash scripts/chain_pipeline.sh [OUT_DIR]     (needs a build: build/bin/tracrctl)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-$(mktemp -d)}
inflight=${INFLIGHT:-4}
reps=${REPETITIONS:-10}
ctl=$PWD/build/bin/tracrctl
[ -x "$ctl" ] || { echo "chain_pipeline: $ctl is not built (cmake --build build)" >&2; exit 1; }
mkdir -p "$out"
db=$out/pipeline.db
rm -f "$db" "$db-wal" "$db-shm"
for n in 1 "$inflight"; do
  sed -e "s|^split:.*|split: [[0, 0], [3, 13], [5, 20], [8, 16], [22, 22]]|" \
      -e "s|^repetitions:.*|repetitions: $reps|" \
      -e "s|^devices: ../devices_chain.yaml|devices: $PWD/config/devices_chain.yaml|" \
      -e "s|^name: chain|name: chain_inflight$n\ninflight: $n|" \
      -e "s|^output:.*|output: $db|" config/experiments/chain.yaml >"$out/inflight$n.yaml"
  "$ctl" run "$out/inflight$n.yaml" --no-progress >"$out/run_inflight$n.txt" 2>&1
done
"$ctl" plan 1 --db "$db" >"$out/plan.txt"
fps() { sqlite3 "$db" "select placement || ' ' || throughput_fps from summaries where run_id = $1 order by split, placement"; }
echo "placement  fps@1  fps@$inflight  ratio  predicted  measured/predicted"
join <(fps 1 | sort) <(fps 2 | sort) |
  join - <(awk '$0 ~ /^ +\*? *[0-9]+\|[0-9]+ / { p = ($1 == "*") ? $2 : $1; print p, $(NF - 2) }' "$out/plan.txt" | sort) |
  awk '{ printf "%-9s %6.1f %7.1f %6.2f %10.1f %8.2f\n", $1, $2, $3, $3 / $2, $4, $3 / $4 }'
echo "runs, plan and database in $out"
