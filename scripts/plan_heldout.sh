#!/usr/bin/env bash
# The planner validated held out on the namespace test-bed (#21): planned
# from one run, measured on others made under conditions the plan never saw.
#   sudo bash scripts/plan_heldout.sh [OUT_DIR]        (default results/heldout)
# Needs root and the test-bed up (bash scripts/netns_testbed.sh up). For each
# model (AlexNet built in, and ResNet-18 traced by scripts/export_model.py,
# random weights) it runs, into OUT_DIR/heldout.db, with the participants in
# tracr-edge and the SERVER in tracr-srv (unshaped veth: the axes here are
# the device and the sharing; links are in plan_links.yaml's table):
#   n1q25  one participant at a quarter of a core
#   n4q25  four participants at a quarter core each, sharing the SERVER
#   n8q25  eight
#   n1q50  one participant at half a core
#   prof25, prof50  a short run per quota: the device's profiles
# REPS rounds of all six, each condition once per round (runs named
# NAME#ROUND), so that the machine's drift over the measurement falls on every
# condition alike: a calibration made hours before its held-out runs measured
# another machine (#21: ResNet-18's half-core head took 94-119 ms in the
# held-out runs and 145-172 ms in calibration runs made five hours later).
# then plans from n1q25's first run and validates each on the runs of another
# condition (`tracrctl plan B --validate-on R1,R2,...`): the other n1q25
# repetitions (same condition, for reference), n4q25, n8q25 (the shared-SERVER
# model), and n1q50 (`--participant-from prof50`: another device's profiles,
# and the reverse from n1q50 to n1q25). Prints (and keeps in
# OUT_DIR/table.md) one markdown row per case (scripts/plan_case.py): the
# latency MAPE's median and range over the held-out runs, how often the
# chosen split was the measured best, the worst miss (chosen's measured
# latency over the best's), the chosen split against the best of the
# held-out runs' medians, and the held-out runs' MAPE against one another
# (each against the others' median per split: the floor of any prediction of
# them). Every run and plan stays in heldout.db.
# The participants sweep in lockstep (each split starts for all of them
# together), so that each split is measured with all N on it: LOCKSTEP=false
# lets each sweep at its own pace, as before #21's lockstep setting.
# Environment: REPS (default 3), MODELS (default "alexnet resnet18_traced"),
# LOCKSTEP (default true), QA and QB (the two quotas in hundredths of a core,
# default 25 and 50), PIN (default false). PIN=true keeps the emulated
# devices off each other's CPUs, as separate devices are (the model's
# assumption): the SERVER pinned to CPU 1, every participant to CPU 0
# (devices file `cpus`), so 8 x QA must fit in one core (e.g. QA=12 QB=25);
# run and file names then end in "pin". RUN=false makes no run: it plans again
# from the runs already in OUT_DIR/heldout.db (after a change to the planner;
# copy the directory first to keep the old plans apart), as plan_links.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-results/heldout}
reps=${REPS:-3}
models=${MODELS:-alexnet resnet18_traced}
lockstep=${LOCKSTEP:-true}
qa=${QA:-25}
qb=${QB:-50}
pin=${PIN:-false}
do_runs=${RUN:-true}
sfx=$([ "$pin" = true ] && echo pin || true)
[ "$pin" != true ] || [ $((8 * qa)) -le 100 ] || {
  echo "plan_heldout: PIN=true puts 8 participants on CPU 0: 8 x QA must be at most 100 (QA=$qa)" >&2; exit 2; }
py=/usr/bin/python3
tracrctl=${TRACRCTL:-build/bin/tracrctl}
mkdir -p "$out"
db="$out/heldout.db"
[ "$do_runs" != true ] || ip netns list | awk '{print $1}' | grep -qx tracr-srv || {
  echo "plan_heldout: the test-bed is not up (bash scripts/netns_testbed.sh up)" >&2; exit 1; }

devices() {  # N participants at quota Q (hundredths) -> file name
  local n=$1 q=$2 f="$out/devices_n$1_q$2$sfx.yaml" srv_cpus="" p_cpus=""
  [ "$pin" = true ] && srv_cpus='    cpus: [1]\n' && p_cpus='    cpus: [0]\n'
  {
    printf 'devices:\n  - device_type: SERVER\n    name: server\n    transport: local\n    netns: tracr-srv\n'
    printf "$srv_cpus"
    printf '    connection_params:\n      - host: 10.250.0.1\n        port: 0\n        default: true\n'
    for i in $(seq 1 "$n"); do
      printf '  - device_type: PARTICIPANT\n    name: p%s\n    transport: local\n    netns: tracr-edge\n' "$i"
      printf '    cpu_quota: %s\n' "$(awk -v q="$q" 'BEGIN { printf "%g", q / 100 }')"
      printf "$p_cpus"
      printf '    connection_params:\n      - host: 10.250.0.2\n        default: true\n'
    done
  } > "$f"
  echo "$f"
}

experiment() {  # model -> experiment file
  local m=$1 f="$out/$1.yaml"
  case "$m" in
    alexnet) printf 'model: alexnet\nsplit: [0, 3, 6, 13, 16, 20, 22]\nwarmup: 1\nrepetitions: 3\n' > "$f" ;;
    resnet18_traced)
      [ -f "$out/r18.pt" ] || $py scripts/export_model.py resnet18 "$out/r18.pt" > /dev/null
      printf 'model: torchscript:r18.pt\nsplit: [0, 4, 12, 28, 44, 60, 69]\nwarmup: 2\nrepetitions: 5\n' > "$f" ;;
    *) echo "plan_heldout: unknown model '$m'" >&2; exit 2 ;;
  esac
  printf 'name: %s\ninput_size: [3, 224, 224]\ndataset:\n  type: synthetic\n  max_samples: 1\ncompression: none\n' "$m" >> "$f"
  # The probe's messages at their default size (auto, sized by the probe;
  # 256 KiB before schema 17): at 0.12 of a core, 32 KiB messages made the
  # probe measure its own per-message work (213 Mbit/s on the unshaped veth,
  # 736 with 256 KiB), and the plans of results/heldout3 added 29 ms of
  # upload at split 0 that frames never saw.
  printf 'record:\n  layers: true\nprobe:\n  duration_ms: 1500\noutput: heldout.db\n' >> "$f"
  echo "$f"
}

ids() {  # run name pattern -> comma list of completed run ids, oldest first
  $py - "$db" "$1" <<'EOF'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
print(",".join(str(r[0]) for r in c.execute(
    "select id from runs where name glob ? and status = 'completed' order by id", (sys.argv[2],))))
EOF
}

row() {  # model, case, first plan id, floor: one markdown row over the plans stored since
  $py scripts/plan_case.py "$db" "$1" "$2" "$4" "id >= $3"
}

next_plan() {
  $py -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); print((c.execute('select max(id) from plans').fetchone()[0] or 0) + 1)" "$db" 2>/dev/null || echo 1
}

plan() {  # model, case label, plan args...
  local model=$1 label=$2; shift 2
  local first; first=$(next_plan)
  echo "   tracrctl plan $* --splits measured --db $db" >&2
  local text
  if ! text=$("$tracrctl" plan "$@" --splits measured --db "$db" 2>&1); then
    printf '%s\n' "$text" >> "$out/plans.txt"
    echo "| $model | $label | plan failed (see $out/plans.txt) | | | | |"; return
  fi
  printf '%s\n' "$text" >> "$out/plans.txt"
  # The held-out runs against one another: the floor of any prediction.
  local floor
  floor=$(printf '%s\n' "$text" | sed -n 's/^the held-out runs among themselves.*MAPE median \([0-9.]* %\) (lowest \([0-9.]*\) %, highest \([0-9.]*\) %.*/\1 [\2, \3]/p')
  row "$model" "$label" "$first" "${floor:--}"
}

table=()
for m in $models; do
  exp=$(experiment "$m")
  run() {  # name, devices, [extra --set]
    echo "== $m: $1 ($(date +%T))" >&2
    "$tracrctl" run "$exp" --no-progress --set name="$m-$1" --set devices="$(realpath "$2")" \
      --set lockstep="$lockstep" "${@:3}" \
      >> "$out/runs.txt" 2>&1 || echo "   run $m-$1 failed (see $out/runs.txt)" >&2
  }
  a="q$qa$sfx" b="q$qb$sfx" la="q $(awk -v q="$qa" 'BEGIN { printf "%g", q / 100 }')" \
    lb="q $(awk -v q="$qb" 'BEGIN { printf "%g", q / 100 }')"
  for k in $(seq 1 "$reps"); do
    [ "$do_runs" = true ] || break
    run "n1$a#$k" "$(devices 1 "$qa")"
    run "n4$a#$k" "$(devices 4 "$qa")"
    run "n8$a#$k" "$(devices 8 "$qa")"
    # Calibration runs of each quota's PARTICIPANT, short, one per round:
    # the plan takes each layer's median over them (--participant-from A,B,C).
    run "prof$qa$sfx#$k" "$(devices 1 "$qa")" --set repetitions=1
    run "prof$qb$sfx#$k" "$(devices 1 "$qb")" --set repetitions=1
    run "n1$b#$k" "$(devices 1 "$qb")"
  done
  base=$(ids "$m-n1$a#1")
  baseb=$(ids "$m-n1$b#1")
  rest=$(ids "$m-n1$a#*" | cut -d, -f2-)
  table+=("$(plan "$m" "1 participant, $la: other repetitions" "$base" --validate-on "$rest")")
  table+=("$(plan "$m" "1 -> 4 participants sharing the SERVER" "$base" --validate-on "$(ids "$m-n4$a#*")")")
  table+=("$(plan "$m" "1 -> 8 participants sharing the SERVER" "$base" --validate-on "$(ids "$m-n8$a#*")")")
  table+=("$(plan "$m" "$la -> $lb (participant calibrated $reps times)" "$base" \
    --participant-from "$(ids "$m-prof$qb$sfx#*")" --validate-on "$(ids "$m-n1$b#*")")")
  table+=("$(plan "$m" "$lb -> $la (participant calibrated $reps times)" "$baseb" \
    --participant-from "$(ids "$m-prof$qa$sfx#*")" --validate-on "$(ids "$m-n1$a#*")")")
done
{  # also kept in OUT_DIR/table.md, to compare rounds
  echo "| model | planned from -> held out | latency MAPE, median [lowest, highest] | chosen = measured best | chosen within 5 % of best | chosen against the best of the runs' medians | held-out runs among themselves (MAPE) |"
  echo "|---|---|---|---|---|---|---|"
  printf '%s\n' "${table[@]}"
} | tee "$out/table.md"
