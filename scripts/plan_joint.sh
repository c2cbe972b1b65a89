#!/usr/bin/env bash
# Joint planning checked on the namespace test-bed (#21): which participant
# cuts where when N share one SERVER.
#   sudo bash scripts/plan_joint.sh [OUT_DIR]        (default results/heldout)
# Needs root, the test-bed up (bash scripts/netns_testbed.sh up) and
# scripts/plan_heldout.sh run into OUT_DIR first (its experiment files, devices
# files and the q 0.25 basis run MODEL-n1q25#1). For each model it plans N
# participants at a quarter core jointly from that one-participant run
# (`tracrctl plan B --joint --participants N`), then runs REPS rounds of two
# runs, in turn: every participant at the split the joint plan chose for it
# (participant_splits), and every participant at the best common split, in
# lockstep (all start their frames together: the validation compares the
# frames that ended while all were running, from each one's first frame). It
# validates the joint prediction on each joint run (`plan B --joint
# --validate-on R1,R2,R3`) and prints one markdown row per model: the
# assignment, the predicted and measured mean latency of both, and the
# joint plan's predicted and measured gain. Measured mean latency: the mean
# over participants of each one's median total.
# Environment: N (default 8), REPS (default 3), FRAMES (default 12),
# MODELS (default "alexnet resnet18_traced").
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-results/heldout}
n=${N:-8}
reps=${REPS:-3}
# Timed frames per participant: a participant whose class finishes first
# leaves the others a less shared SERVER for their last frames; more frames
# keep that tail short beside the run.
frames=${FRAMES:-12}
models=${MODELS:-alexnet resnet18_traced}
py=/usr/bin/python3
tracrctl=${TRACRCTL:-build/bin/tracrctl}
db="$out/heldout.db"
devs="$out/devices_n${n}_q25.yaml"
[ -f "$db" ] && [ -f "$devs" ] || {
  echo "plan_joint: run scripts/plan_heldout.sh $out first (needs $db and $devs; N=$n of 1, 4 or 8)" >&2; exit 1; }

sql() { $py -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); print('\n'.join('|'.join(str(x) for x in r) for r in c.execute(sys.argv[2])))" "$db" "$1"; }
ids() { sql "select group_concat(id) from (select id from runs where name glob '$1' and status = 'completed' order by id)"; }

rows=()
for m in $models; do
  exp="$out/$m.yaml"
  base=$(ids "$m-n1q25#1")
  [ -n "$base" ] || { echo "plan_joint: no run $m-n1q25#1 in $db" >&2; exit 1; }
  "$tracrctl" plan "$base" --joint --participants "$n" --splits measured --db "$db" > "$out/joint-$m.txt"
  plan=$(sql "select max(id) from plans")
  # participant_splits from the stored assignment: p1.. in order, most participants first.
  assign=$(sql "select split, participants from plan_assignments where plan_id = $plan order by participants desc, split")
  ps="{" i=1 text=""
  while IFS='|' read -r k c; do
    text+="${text:+, }$c at $k"
    for _ in $(seq 1 "$c"); do ps+="p$i: $k, "; i=$((i + 1)); done
  done <<< "$assign"
  ps="${ps%, }}"
  common=$(sed -n 's/^all [0-9]* at the best common split \([0-9]*\).*/\1/p' "$out/joint-$m.txt")
  pred_joint=$(sed -n 's/^mean latency \([0-9.]*\) ms.*/\1/p' "$out/joint-$m.txt")
  pred_common=$(sed -n 's/^all [0-9]* at the best common split [0-9]*: mean latency \([0-9.]*\) ms.*/\1/p' "$out/joint-$m.txt")
  echo "== $m: joint $text ($ps); common split $common" >&2
  for k in $(seq 1 "$reps"); do
    for kind in joint common; do
      set_ps=$([ "$kind" = joint ] && echo "participant_splits=$ps" || echo "split=$common")
      echo "== $m: $kind#$k ($(date +%T))" >&2
      "$tracrctl" run "$exp" --no-progress --set name="$m-n${n}$kind#$k" --set devices="$(realpath "$devs")" \
        --set "$set_ps" --set repetitions="$frames" --set lockstep=true >> "$out/runs.txt" 2>&1 || echo "   run $m $kind#$k failed" >&2
    done
  done
  "$tracrctl" plan "$base" --joint --validate-on "$(ids "$m-n${n}joint#*")" --splits measured --db "$db" \
    >> "$out/joint-$m.txt"
  mape=$(sed -n 's/^over .* held-out runs: joint latency MAPE median \(.*\)$/\1/p' "$out/joint-$m.txt")
  measured() {  # run ids -> median over runs of the mean over participants of each one's median total (ms)
    $py - "$db" "$1" <<'EOF'
import sqlite3, statistics, sys
c = sqlite3.connect(sys.argv[1])
per_run = []
for run in sys.argv[2].split(","):
    by = {}
    for p, t in c.execute("select participant, total_ns from frames where run_id = ? and warmup = 0 and ok = 1", (run,)):
        by.setdefault(p, []).append(t / 1e6)
    per_run.append(statistics.mean(statistics.median(v) for v in by.values()))
print(f"{statistics.median(per_run):.1f} [{min(per_run):.1f}, {max(per_run):.1f}]")
EOF
  }
  mj=$(measured "$(ids "$m-n${n}joint#*")")
  mc=$(measured "$(ids "$m-n${n}common#*")")
  rows+=("| $m | $n | $text | split $common | ${pred_joint} / ${pred_common} | ${mj} / ${mc} | ${mape:--} |")
done
echo "| model | N | joint assignment | best common | predicted mean latency, joint / common (ms) | measured, joint / common (ms), median [range] over $reps runs | joint prediction's MAPE |"
echo "|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
