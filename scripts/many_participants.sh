#!/usr/bin/env bash
# Many local participants on one SERVER (#46), two figures:
#  1. a run of N participants (fmnist_cnn, synthetic inputs, splits 0 and 4)
#     completes: wall time, frames stored, the controller's own CPU time
#     (utime + stime of tracrctl itself, /proc/PID/stat, agents excluded)
#     and its peak resident memory (VmHWM), sampled every 0.2 s;
#  2. the same N under on_participant_loss: fail, one participant SIGKILLed
#     once frames flow: seconds from the kill to the controller's exit (every
#     other agent stopped at once, the same grace for all).
# Usage: bash scripts/many_participants.sh [N] [TRACRCTL]   (default 64, build/bin/tracrctl)
# Measured by this script with the shell's clock (date +%s.%N); no timing
# is asserted. Figures: docs/BENCHMARKS.md "Many participants".
set -euo pipefail
N=${1:-64}
here=$(cd "$(dirname "$0")/.." && pwd)
TRACRCTL=${2:-$here/build/bin/tracrctl}
dir=$(mktemp -d /tmp/tracr-many.XXXXXX)
trap 'rm -rf "$dir"' EXIT
{
  echo "devices:"
  echo "  - {device_type: SERVER, name: server, transport: local}"
  for i in $(seq 1 "$N"); do echo "  - {device_type: PARTICIPANT, name: p$i, transport: local}"; done
} > "$dir/devices.yaml"
experiment() {  # $1: name, $2: repetitions, $3: on_participant_loss
  cat > "$dir/$1.yaml" <<YAML
name: $1
model: fmnist_cnn
dataset: {type: synthetic, max_samples: 2}
split: [0, 4]
warmup: 0
repetitions: $2
batch_size: 1
compression: none
probe: {enabled: false}
record: {layers: false}
on_participant_loss: $3
heartbeat_timeout_ms: 60000
devices: $dir/devices.yaml
output: $dir/many.db
YAML
}
# Samples tracrctl's own CPU (clock ticks) and peak RSS until it exits.
watch_controller() {  # $1: pid; prints "cpu_s peak_mib"
  local pid=$1 ticks=0 hwm=0 hz
  hz=$(getconf CLK_TCK)
  while [ -d "/proc/$pid" ]; do
    if read -r -a st < "/proc/$pid/stat" 2>/dev/null; then ticks=$(( ${st[13]} + ${st[14]} )); fi
    h=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status" 2>/dev/null || true)
    [ -n "$h" ] && hwm=$h
    sleep 0.2
  done
  awk -v t="$ticks" -v hz="$hz" -v k="$hwm" 'BEGIN { printf "%.2f %.1f\n", t / hz, k / 1024 }'
}

experiment many 5 continue
t0=$(date +%s.%N)
"$TRACRCTL" run "$dir/many.yaml" --no-progress > "$dir/run1.log" 2>&1 &
pid=$!
read -r cpu peak < <(watch_controller $pid)
wait $pid && rc=0 || rc=$?
t1=$(date +%s.%N)
frames=$(sqlite3 "$dir/many.db" "select count(*) from frames where run_id = 1")
echo "N=$N participants: exit $rc, $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b - a}') s wall, $frames frames stored" \
     "(expected $((N * 2 * 5 * 2))), controller CPU ${cpu} s, controller peak RSS ${peak} MiB"
[ "$rc" = 0 ] || { tail -20 "$dir/run1.log"; exit 1; }

experiment stop 200 fail
"$TRACRCTL" run "$dir/stop.yaml" --no-progress > "$dir/run2.log" 2>&1 &
pid=$!
until [ "$(sqlite3 "$dir/many.db" "select count(*) from frames where run_id = 2" 2>/dev/null || echo 0)" -ge "$N" ]; do
  kill -0 $pid 2>/dev/null || { tail -20 "$dir/run2.log"; exit 1; }
  sleep 0.5
done
victim=$(sqlite3 "$dir/many.db" "select message from events where run_id = 2 and kind = 'agent_started' and message like 'PARTICIPANT%' limit 1" | sed 's/.*pid \([0-9]*\).*/\1/')
k0=$(date +%s.%N)
kill -9 "$victim"
wait $pid && rc=0 || rc=$?
k1=$(date +%s.%N)
left=0
for p in $(sqlite3 "$dir/many.db" "select message from events where run_id = 2 and kind = 'agent_started'" | sed 's/.*pid \([0-9]*\).*/\1/'); do
  kill -0 "$p" 2>/dev/null && left=$((left + 1))
done
echo "N=$N, on_participant_loss: fail, one participant SIGKILLed: controller exit $rc" \
     "$(awk -v a="$k0" -v b="$k1" 'BEGIN{printf "%.2f", b - a}') s after the kill;" \
     "$(sqlite3 "$dir/many.db" "select count(*) from frames where run_id = 2") frames kept; agents left running: $left"
