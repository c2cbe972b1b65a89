#!/usr/bin/env bash
# SERVER batching against none, in the same script (#46): N local
# participants (default 8) share one SERVER at one split of a traced
# ResNet-18, in lockstep, INFLIGHT frames in flight each (default 1); the same experiment runs
# with server.batch {max: N, max_wait_ms: W} and without, alternating, ROUNDS
# times each (default 2). Per run: frames/s (each participant's timed frames
# over the span from its first timed frame's start to its last one's end, on
# its own clock, summed over participants: they run at the same time), p50
# and p95 of total_ns over every timed frame, and the mean batch the SERVER
# ran (frames.server_batch) and the SERVER's tail time per frame (tail_ns over
# server_batch: the batch's time shared by its frames; the SERVER's own
# capacity). The ratio is batched over unbatched, of the medians over rounds.
# On one host the participants' heads and the SERVER's tails share the CPUs;
# PIN=true keeps them apart as separate devices are: the SERVER on CPU 1, the
# participants on CPU 0, one LibTorch thread each. Participants may also be
# given a CPU quota each (QUOTA, cores; default none).
# Usage: bash scripts/server_batch.sh [N] [SPLIT] [ROUNDS]
#   env: W (max_wait_ms, default 50), INFLIGHT (frames in flight per participant, default 1), PIN (true|false), QUOTA (e.g. 0.1), TRACRCTL, MODEL
# Measured by the participants' monotonic clocks (frames table); no timing is
# asserted. Figures: docs/BENCHMARKS.md "SERVER batching".
set -euo pipefail
N=${1:-8}
SPLIT=${2:-30}
ROUNDS=${3:-2}
W=${W:-50}
INFLIGHT=${INFLIGHT:-1}
here=$(cd "$(dirname "$0")/.." && pwd)
TRACRCTL=${TRACRCTL:-$here/build/bin/tracrctl}
MODEL=${MODEL:-$here/results/resnet18.pt}
if [ ! -f "$MODEL" ]; then
  mkdir -p "$(dirname "$MODEL")"
  /usr/bin/python3 "$here/scripts/export_model.py" resnet18 "$MODEL" > /dev/null
fi
dir=$(mktemp -d /tmp/tracr-batch.XXXXXX)
trap 'rm -rf "$dir"' EXIT
quota="" spin="" ppin=""
[ -n "${QUOTA:-}" ] && quota=", cpu_quota: $QUOTA"
if [ "${PIN:-false}" = true ]; then spin=", cpus: [1], threads: 1"; ppin=", cpus: [0], threads: 1"; fi
{
  echo "devices:"
  echo "  - {device_type: SERVER, name: server, transport: local$spin}"
  for i in $(seq 1 "$N"); do echo "  - {device_type: PARTICIPANT, name: p$i, transport: local$quota$ppin}"; done
} > "$dir/devices.yaml"
experiment() {  # $1: name, $2: the server.batch line or ''
  cat > "$dir/$1.yaml" <<YAML
name: $1
model: torchscript:$MODEL
input_size: [3, 224, 224]
dataset: {type: synthetic, max_samples: 10}
split: [$SPLIT]
warmup: 2
repetitions: 2
batch_size: 1
inflight: $INFLIGHT
compression: none
lockstep: true
probe: {enabled: false}
record: {layers: false}
heartbeat_timeout_ms: 60000
devices: $dir/devices.yaml
output: $dir/batch.db
$2
YAML
}
experiment alone ""
experiment batched "server: {batch: {max: $N, max_wait_ms: $W}}"
figures() {  # $1: run id -> "frames/s p50_ms p95_ms mean_batch tail_ms_per_frame frames"
  sqlite3 -separator ' ' "$dir/batch.db" "
    with t as (select * from frames where run_id = $1 and warmup = 0 and ok = 1),
         per as (select participant, count(*) n, max(end_ns) - min(start_ns) span from t group by participant),
         ranked as (select total_ns, row_number() over (order by total_ns) r, count(*) over () c from t)
    select printf('%.2f', (select sum(n * 1e9 / span) from per)),
           printf('%.1f', (select total_ns / 1e6 from ranked where r = max(1, cast(round(0.50 * c) as int)))),
           printf('%.1f', (select total_ns / 1e6 from ranked where r = max(1, cast(round(0.95 * c) as int)))),
           printf('%.2f', (select avg(server_batch) from t)),
           printf('%.2f', (select avg(tail_ns * 1.0 / server_batch) / 1e6 from t)),
           (select count(*) from t)"
}
declare -a fa fb
echo "N=$N participants${QUOTA:+ (cpu_quota $QUOTA each)}${spin:+ (SERVER on CPU 1, participants on CPU 0)}, traced ResNet-18 at split $SPLIT, lockstep, inflight $INFLIGHT; batched: max $N, max_wait_ms $W"
echo "run  kind     frames/s  p50_ms  p95_ms  mean_batch  tail_ms/frame  timed_frames"
id=0
for r in $(seq 1 "$ROUNDS"); do
  for kind in alone batched; do
    "$TRACRCTL" run "$dir/$kind.yaml" --no-progress > "$dir/$kind.$r.log" 2>&1 || { tail -20 "$dir/$kind.$r.log"; exit 1; }
    id=$((id + 1))
    read -r fps p50 p95 mb tpf n < <(figures $id)
    printf '%-4s %-8s %8s  %6s  %6s  %10s  %13s  %12s\n' "$id" "$kind" "$fps" "$p50" "$p95" "$mb" "$tpf" "$n"
    if [ "$kind" = alone ]; then fa+=("$fps"); else fb+=("$fps"); fi
  done
done
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
ma=$(median "${fa[@]}")
mb=$(median "${fb[@]}")
echo "frames/s, median over $ROUNDS rounds: alone $ma, batched $mb: ratio $(awk -v a="$ma" -v b="$mb" 'BEGIN{printf "%.2f", b / a}')x"
