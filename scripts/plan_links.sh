#!/usr/bin/env bash
# The planner held out across links (#21): planned from a run on one link,
# measured on runs on another, in rounds.
#   sudo bash scripts/plan_links.sh [OUT_DIR]          (default results/links)
# Needs root and the test-bed up (bash scripts/netns_testbed.sh up). For each
# model (AlexNet built in, and ResNet-18 traced by scripts/export_model.py,
# random weights) it runs, into OUT_DIR/links.db, with the participant at a
# quarter core in tracr-edge and the SERVER in tracr-srv
# (config/devices_netns.yaml), REPS rounds of one run per link (LINKS, tc
# shaped; runs named MODEL-LINK#ROUND@LINK, so the machine's drift falls on
# every link alike). Every run validates its own plan at its end (in-sample); then
# from each link's first run it plans every other link and validates on that
# link's REPS runs (`tracrctl plan B --validate-on R1,R2,R3`, planned for the
# held-out runs' link as their probe measured it). Prints (and keeps in
# OUT_DIR/table.md) one markdown row per case (scripts/plan_case.py): latency
# MAPE median [lowest, highest], how often the chosen split was the measured
# best, within 5 % of it (the worst miss), the chosen split against the best
# of the held-out runs' medians, and the held-out runs' MAPE against one
# another (the floor of any prediction).
# Environment: REPS (default 3), MODELS (default "alexnet resnet18_traced"),
# LINKS (default "3g wifi gigabit"), RUN (default true; false: plan and
# print from the runs already in OUT_DIR/links.db), PIN (default false;
# true: the SERVER on CPU 1 and the participant on CPU 0, devices file
# `cpus`, as plan_heldout.sh PIN=true: unpinned, the SERVER's matrix
# products ran at two speeds from run to run, e.g. results/links2 AlexNet
# split 16's tail 58 ms in every wifi run, 74-82 ms in the others).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-results/links}
reps=${REPS:-3}
models=${MODELS:-alexnet resnet18_traced}
links=${LINKS:-3g wifi gigabit}
do_runs=${RUN:-true}
pin=${PIN:-false}
py=/usr/bin/python3
tracrctl=${TRACRCTL:-build/bin/tracrctl}
mkdir -p "$out"
db="$out/links.db"
[ "$do_runs" != true ] || ip netns list | awk '{print $1}' | grep -qx tracr-srv || {
  echo "plan_links: the test-bed is not up (bash scripts/netns_testbed.sh up)" >&2; exit 1; }

devices() {  # -> the devices file: config/devices_netns.yaml, pinned with PIN=true
  local f="$out/devices_netns_pin.yaml"
  [ "$pin" = true ] || { realpath config/devices_netns.yaml; return; }
  awk '/^    name: server$/ { print; print "    cpus: [1]"; next }
       /^    name: edge$/ { print; print "    cpus: [0]"; next } { print }' \
    config/devices_netns.yaml > "$f"
  grep -c '^    cpus: ' "$f" | grep -qx 2 || { echo "plan_links: could not pin $f" >&2; exit 2; }
  realpath "$f"
}

devfile=$(devices)

experiment() {  # model -> experiment file
  local m=$1 f="$out/$1.yaml"
  case "$m" in
    alexnet) printf 'model: alexnet\nsplit: [0, 3, 6, 13, 16, 20, 22]\nwarmup: 1\nrepetitions: 3\n' > "$f" ;;
    resnet18_traced)
      [ -f "$out/r18.pt" ] || $py scripts/export_model.py resnet18 "$out/r18.pt" > /dev/null
      printf 'model: torchscript:r18.pt\nsplit: [0, 4, 12, 28, 44, 60, 69]\nwarmup: 2\nrepetitions: 5\n' > "$f" ;;
    *) echo "plan_links: unknown model '$m'" >&2; exit 2 ;;
  esac
  printf 'name: %s\ninput_size: [3, 224, 224]\ndataset:\n  type: synthetic\n  max_samples: 1\ncompression: none\n' "$m" >> "$f"
  printf 'record:\n  layers: true\nprobe:\n  duration_ms: 1500\noutput: links.db\n' >> "$f"
  printf 'devices: %s\n' "$devfile" >> "$f"
  echo "$f"
}

ids() {  # run name pattern -> comma list of completed run ids, oldest first
  $py -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); print(','.join(str(r[0]) for r in c.execute(\"select id from runs where name glob ? and status = 'completed' order by id\", (sys.argv[2],))))" "$db" "$1"
}

next_plan() {
  $py -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); print((c.execute('select max(id) from plans').fetchone()[0] or 0) + 1)" "$db" 2>/dev/null || echo 1
}

summary() {  # model, case, floor, SQL condition on plans -> one markdown row
  $py scripts/plan_case.py "$db" "$1" "$2" "$3" "$4"
}

table=()
for m in $models; do
  exp=$(experiment "$m")
  for k in $(seq 1 "$reps"); do
    [ "$do_runs" = true ] || break
    for l in $links; do
      echo "== $m: $l#$k ($(date +%T))" >&2
      "$tracrctl" run "$exp" --no-progress --set name="$m-$l#$k" --set link="$l" \
        >> "$out/runs.txt" 2>&1 || echo "   run $m-$l#$k failed (see $out/runs.txt)" >&2
    done
  done
  for l in $links; do
    # In-sample: each run's own validation, stored at its end.
    own=$(ids "$m-$l#*")
    table+=("$(summary "$m" "$l, in-sample (each run's own)" "-" \
      "validation_run = basis_run and basis_run in ($own) and id in (select max(id) from plans group by basis_run)")")
  done
  for from in $links; do
    base=$(ids "$m-$from#1@$from")  # a run's name ends in @LINK
    for to in $links; do
      [ "$from" = "$to" ] && continue
      first=$(next_plan)
      echo "   tracrctl plan $base --validate-on $(ids "$m-$to#*") --splits measured --db $db" >&2
      text=$("$tracrctl" plan "$base" --validate-on "$(ids "$m-$to#*")" --splits measured --db "$db" 2>&1) || {
        printf '%s\n' "$text" >> "$out/plans.txt"; table+=("| $m | $from -> $to | plan failed (see $out/plans.txt) | | | | |"); continue; }
      printf '%s\n' "$text" >> "$out/plans.txt"
      floor=$(printf '%s\n' "$text" | sed -n 's/^the held-out runs among themselves.*MAPE median \([0-9.]* %\) (lowest \([0-9.]*\) %, highest \([0-9.]*\) %.*/\1 [\2, \3]/p')
      table+=("$(summary "$m" "$from -> $to" "${floor:--}" "id >= $first")")
    done
  done
done
{  # also kept in OUT_DIR/table.md, to compare rounds
  echo "| model | planned from -> held out | latency MAPE, median [lowest, highest] | chosen = measured best | chosen within 5 % of best | chosen against the best of the runs' medians | held-out runs among themselves (MAPE) |"
  echo "|---|---|---|---|---|---|---|"
  printf '%s\n' "${table[@]}"
} | tee "$out/table.md"
