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
# over participants of each one's median total; measured frames/s in all:
# the sum over participants of each one's timed frames over its own span.
# Environment: N (default 8), REPS (default 3), FRAMES (default 12),
# MODELS (default "alexnet resnet18_traced"), Q (each participant's CPU quota
# in hundredths of a core, default 25), PIN (default false).
# PIN=true keeps the emulated devices off each other's CPUs, as separate
# devices are (the model's assumption): the SERVER pinned to CPU 1, every
# participant to CPU 0 (devices file `cpus`), so N x Q must fit in one core
# (N = 4 at Q = 25, N = 8 at Q = 12). It writes its own devices files and makes
# its own one-participant basis run MODEL-n1qQpin#1 (when the database has none).
# Without it the participants' CPU quota and the SERVER share the host's CPUs:
# with 8 at a quarter core on this 2-vCPU VM the SERVER's tails ran 2.1x their
# profiles and the joint prediction was 41 % off.
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
q=${Q:-25}
pin=${PIN:-false}
db="$out/heldout.db"
tag="q$q$([ "$pin" = true ] && echo pin || true)"
devs="$out/devices_n${n}_$tag.yaml"
pinned_devices() {  # N -> devices file: the SERVER on CPU 1, N participants on CPU 0 at quota Q
  local f="$out/devices_n$1_$tag.yaml"
  {
    printf 'devices:\n  - device_type: SERVER\n    name: server\n    transport: local\n    netns: tracr-srv\n'
    printf '    cpus: [1]\n    connection_params:\n      - host: 10.250.0.1\n        port: 0\n        default: true\n'
    for i in $(seq 1 "$1"); do
      printf '  - device_type: PARTICIPANT\n    name: p%s\n    transport: local\n    netns: tracr-edge\n' "$i"
      printf '    cpu_quota: %s\n    cpus: [0]\n' "$(awk -v q="$q" 'BEGIN { printf "%g", q / 100 }')"
      printf '    connection_params:\n      - host: 10.250.0.2\n        default: true\n'
    done
  } > "$f"
}
if [ "$pin" = true ]; then
  awk -v n="$n" -v q="$q" 'BEGIN { exit !(n * q <= 100) }' || {
    echo "plan_joint: PIN=true puts all $n participants on CPU 0: N x Q must be at most 100 (Q=$q)" >&2; exit 2; }
  pinned_devices 1
  pinned_devices "$n"
fi
[ -f "$db" ] && [ -f "$devs" ] || {
  echo "plan_joint: run scripts/plan_heldout.sh $out first (needs $db and $devs; N=$n of 1, 4 or 8)" >&2; exit 1; }

sql() { $py -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); print('\n'.join('|'.join(str(x) for x in r) for r in c.execute(sys.argv[2])))" "$db" "$1"; }
ids() { sql "select coalesce(group_concat(id), '') from (select id from runs where name glob '$1' and status = 'completed' order by id)"; }

rows=()
for m in $models; do
  exp="$out/$m.yaml"
  base=$(ids "$m-n1$tag#1")
  if [ -z "$base" ] && [ "$pin" = true ]; then
    echo "== $m: basis n1$tag#1 ($(date +%T))" >&2
    "$tracrctl" run "$exp" --no-progress --set name="$m-n1$tag#1" --set devices="$(realpath "$out/devices_n1_$tag.yaml")" \
      >> "$out/runs.txt" 2>&1 || echo "   run $m n1$tag#1 failed" >&2
    base=$(ids "$m-n1$tag#1")
  fi
  [ -n "$base" ] || { echo "plan_joint: no run $m-n1$tag#1 in $db" >&2; exit 1; }
  "$tracrctl" plan "$base" --joint --participants "$n" --splits measured --db "$db" > "$out/joint-$m-n$n$tag.txt"
  plan=$(sql "select max(id) from plans")
  # participant_splits from the stored assignment: p1.. in order, most participants first.
  assign=$(sql "select split, participants from plan_assignments where plan_id = $plan order by participants desc, split")
  ps="{" i=1 text=""
  while IFS='|' read -r k c; do
    text+="${text:+, }$c at $k"
    for _ in $(seq 1 "$c"); do ps+="p$i: $k, "; i=$((i + 1)); done
  done <<< "$assign"
  ps="${ps%, }}"
  common=$(sed -n 's/^all [0-9]* at the best common split \([0-9]*\).*/\1/p' "$out/joint-$m-n$n$tag.txt")
  pred_joint=$(sed -n 's/^mean latency \([0-9.]*\) ms.*/\1/p' "$out/joint-$m-n$n$tag.txt")
  pred_common=$(sed -n 's/^all [0-9]* at the best common split [0-9]*: mean latency \([0-9.]*\) ms.*/\1/p' "$out/joint-$m-n$n$tag.txt")
  fps_joint=$(sed -n 's/^mean latency [0-9.]* ms, \([0-9.]*\) frames\/s in all.*/\1/p' "$out/joint-$m-n$n$tag.txt")
  fps_common=$(sed -n 's/^all [0-9]* at the best common split [0-9]*: mean latency [0-9.]* ms, \([0-9.]*\) frames\/s.*/\1/p' "$out/joint-$m-n$n$tag.txt")
  echo "== $m: joint $text ($ps); common split $common" >&2
  for k in $(seq 1 "$reps"); do
    for kind in joint common; do
      set_ps=$([ "$kind" = joint ] && echo "participant_splits=$ps" || echo "split=$common")
      echo "== $m: $kind#$k ($(date +%T))" >&2
      "$tracrctl" run "$exp" --no-progress --set name="$m-n${n}$tag$kind#$k" --set devices="$(realpath "$devs")" \
        --set "$set_ps" --set repetitions="$frames" --set lockstep=true >> "$out/runs.txt" 2>&1 || echo "   run $m $kind#$k failed" >&2
    done
  done
  "$tracrctl" plan "$base" --joint --validate-on "$(ids "$m-n${n}${tag}joint#*")" --splits measured --db "$db" \
    >> "$out/joint-$m-n$n$tag.txt"
  mape=$(sed -n 's/^over .* held-out runs: joint latency MAPE median \(.*\)$/\1/p' "$out/joint-$m-n$n$tag.txt")
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
  throughput() {  # run ids -> median over runs of the frames/s of all participants together
    # Each participant's timed frames over its own span (first start to last
    # end, its clock), summed over participants: what --joint predicts.
    $py - "$db" "$1" <<'EOF'
import sqlite3, statistics, sys
c = sqlite3.connect(sys.argv[1])
per_run = []
for run in sys.argv[2].split(","):
    q = ("select count(*) / ((max(end_ns) - min(start_ns)) / 1e9) from frames "
         "where run_id = ? and warmup = 0 and ok = 1 group by participant")
    per_run.append(sum(r[0] for r in c.execute(q, (run,))))
print(f"{statistics.median(per_run):.1f} [{min(per_run):.1f}, {max(per_run):.1f}]")
EOF
  }
  mj=$(measured "$(ids "$m-n${n}${tag}joint#*")")
  mc=$(measured "$(ids "$m-n${n}${tag}common#*")")
  tj=$(throughput "$(ids "$m-n${n}${tag}joint#*")")
  tc=$(throughput "$(ids "$m-n${n}${tag}common#*")")
  rows+=("| $m | $n | $text | split $common | ${pred_joint} / ${pred_common} | ${mj} / ${mc} | ${fps_joint} / ${fps_common} | ${tj} / ${tc} | ${mape:--} |")
done
echo "| model | N | joint assignment | best common | predicted mean latency, joint / common (ms) | measured, joint / common (ms), median [range] over $reps runs | predicted frames/s in all, joint / common | measured frames/s in all, joint / common | joint prediction's MAPE |"
echo "|---|---|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
