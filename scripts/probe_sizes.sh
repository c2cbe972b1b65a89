#!/usr/bin/env bash
# The link probe's message size against the link and the participant's CPU
# (#21): `tracrctl link probe` on the netns test-bed, REPS rounds (default 2)
# of every size in SIZES (default "auto 32768 262144 1048576") on every link
# in LINKS (default "unshaped 3g wifi gigabit"; unshaped: the bare veth), with
# the PARTICIPANT at each CPU quota in QUOTAS (default "0.25 0.12"). Prints
# one markdown row per quota, link and size: the message sizes the probe
# used, the rates up and down (median of the rounds [lowest, highest]) and
# its bulk spans (first message to last reply each way, less the smallest
# RTT; auto's sizing passes, a fifth of probe.duration_ms each way plus their
# drain, are not in them). RUN=false prints the table from OUT_DIR/probes.db.
#   sudo bash scripts/probe_sizes.sh [OUT_DIR]          (default results/probe_sizes)
# Needs root and the test-bed up (bash scripts/netns_testbed.sh up).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-results/probe_sizes}
reps=${REPS:-2}
sizes=${SIZES:-auto 32768 262144 1048576}
links=${LINKS:-unshaped 3g wifi gigabit}
quotas=${QUOTAS:-0.25 0.12}
do_runs=${RUN:-true}
py=/usr/bin/python3
tracrctl=${TRACRCTL:-build/bin/tracrctl}
mkdir -p "$out"
db="$out/probes.db"
ip netns list | awk '{print $1}' | grep -qx tracr-srv || {
  echo "probe_sizes: the test-bed is not up (bash scripts/netns_testbed.sh up)" >&2; exit 1; }

for q in $quotas; do
  [ "$do_runs" = true ] || break
  sed "s/cpu_quota: 0.25/cpu_quota: $q/" config/devices_netns.yaml > "$out/devices-$q.yaml"
  printf 'name: probe\nmodel: alexnet\ninput_size: [3, 224, 224]\nprobe:\n  duration_ms: 1500\n' > "$out/exp-$q.yaml"
  printf 'devices: %s\noutput: probes.db\n' "$(realpath "$out/devices-$q.yaml")" >> "$out/exp-$q.yaml"
  for k in $(seq 1 "$reps"); do
    for l in $links; do
      set_link=()
      [ "$l" = unshaped ] || set_link=(--set "link=$l")
      for s in $sizes; do
        echo "== q$q $l $s #$k ($(date +%T))" >&2
        "$tracrctl" link probe "$out/exp-$q.yaml" --no-progress "${set_link[@]}" --set "name=q$q-$l-$s" \
          --set "probe.chunk_bytes=$s" >> "$out/probes.txt" 2>&1 || echo "   probe q$q $l $s failed (see $out/probes.txt)" >&2
      done
    done
  done
done

$py - "$db" <<'PY'
import sqlite3, statistics, sys
c = sqlite3.connect(sys.argv[1])
rows = c.execute("""select r.name, p.chunk_bytes, p.down_chunk_bytes, p.up_mbps, p.down_mbps,
                    (p.up_ns + p.down_ns) / 1e9 from probes p join runs r on r.id = p.run_id order by p.id""").fetchall()
groups = {}
for name, up_b, down_b, up, down, secs in rows:
    # tracrctl link probe names the run "NAME (link probe)", with "@LINK" after it when linked
    groups.setdefault(name.split("@")[0].removesuffix(" (link probe)"), []).append((up_b, down_b, up, down, secs))
def spread(v, d=None):
    v = [x for x in v if x is not None]
    if not v:
        return "-"
    d = d if d is not None else 3 if statistics.median(v) < 10 else 1  # 3g's 1.05 Mbit/s needs the digits
    return f"{statistics.median(v):.{d}f} [{min(v):.{d}f}, {max(v):.{d}f}]"
def kib(v):
    lo, hi = min(v) // 1024, max(v) // 1024
    return f"{lo}" if lo == hi else f"{lo}-{hi}"
print("| participant quota | link | probe.chunk_bytes | messages up / down, KiB | up Mbit/s | down Mbit/s | bulk spans up + down, s |")
print("|---|---|---|---|---|---|---|")
for name, g in groups.items():
    q, rest = name.split("-", 1)
    link, size = rest.rsplit("-", 1)
    print(f"| {q[1:]} | {link} | {size} | {kib([x[0] for x in g])} / {kib([x[1] for x in g])} | "
          f"{spread([x[2] for x in g])} | {spread([x[3] for x in g])} | {spread([x[4] for x in g], 1)} |")
PY
