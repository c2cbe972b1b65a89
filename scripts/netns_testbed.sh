#!/usr/bin/env bash
# A two-namespace test-bed on this machine (needs root): the SERVER's agent in
# namespace tracr-srv (10.250.0.1), the PARTICIPANT's in tracr-edge
# (10.250.0.2), joined by a veth pair that link profiles shape with tc.
# Used by config/devices_netns.yaml and config/experiments/plan_links.yaml.
#   bash scripts/netns_testbed.sh up | down | status [options]
# Options:
#   --prefix P     namespaces P-srv and P-edge, veth P-vs / P-ve (default tracr;
#                  at most 12 characters: interface names have 15)
#   --subnet A.B.C the /24 between them: server A.B.C.1, edge A.B.C.2 (default 10.250.0)
#   --devices FILE also write a devices file naming these namespaces and addresses
# Safe to run twice: `up` on a test-bed that is already up checks it and says
# so; a half-made one (an interrupted `up`) is removed and made again. `up`
# fails loudly (exit 1) unless both namespaces hold their address with the
# link up.
set -euo pipefail
cmd="${1:-}"
[ $# -gt 0 ] && shift
prefix=tracr
subnet=10.250.0
devices=""
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) prefix="${2:?--prefix needs a name}"; shift 2 ;;
    --subnet) subnet="${2:?--subnet needs A.B.C}"; shift 2 ;;
    --devices) devices="${2:?--devices needs a file}"; shift 2 ;;
    *) echo "netns_testbed: unknown option '$1' (expected --prefix P, --subnet A.B.C or --devices FILE)" >&2; exit 2 ;;
  esac
done
if ! [[ "$prefix" =~ ^[A-Za-z0-9_-]{1,12}$ ]]; then
  echo "netns_testbed: --prefix: expected 1-12 letters, digits, '-' or '_', got '$prefix'" >&2; exit 2
fi
if ! [[ "$subnet" =~ ^[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}$ ]]; then
  echo "netns_testbed: --subnet: expected three octets like 10.250.0, got '$subnet'" >&2; exit 2
fi
srv="$prefix-srv" edge="$prefix-edge" vs="$prefix-vs" ve="$prefix-ve"
srv_ip="$subnet.1" edge_ip="$subnet.2"

has_ns() { ip netns list 2>/dev/null | awk '{print $1}' | grep -qx "$1"; }
# Whether namespace $1 holds address $2 on interface $3 with the link up.
configured() { ip -n "$1" -br addr show dev "$3" 2>/dev/null | grep -q "UP.*$2/24"; }
is_up() { has_ns "$srv" && has_ns "$edge" && configured "$srv" "$srv_ip" "$vs" && configured "$edge" "$edge_ip" "$ve"; }
remove() {
  ip netns del "$srv" 2>/dev/null || true
  ip netns del "$edge" 2>/dev/null || true
  ip link del "$vs" 2>/dev/null || true  # a veth left in the root namespace by an interrupted up
}
write_devices() {
  [ -n "$devices" ] || return 0
  mkdir -p "$(dirname "$devices")"
  cat > "$devices" <<DEV
# Written by scripts/netns_testbed.sh --prefix $prefix --subnet $subnet:
# both agents on this machine, each in its namespace, joined by a veth pair.
devices:
  - device_type: SERVER
    name: server
    transport: local
    netns: $srv
    connection_params:
      - {host: $srv_ip, port: 0, default: true}
  - device_type: PARTICIPANT
    name: edge
    transport: local
    netns: $edge
    cpu_quota: 0.25
    connection_params:
      - {host: $edge_ip, default: true}
DEV
  echo "netns_testbed: devices file $devices"
}

case "$cmd" in
  up)
    if [ "$(id -u)" -ne 0 ]; then echo "netns_testbed: up needs root (ip netns add)" >&2; exit 1; fi
    if is_up; then
      echo "netns_testbed: already up: $srv ($srv_ip) and $edge ($edge_ip)"
      write_devices
      exit 0
    fi
    remove
    if ! { ip netns add "$srv" && ip netns add "$edge" &&
           ip link add "$vs" type veth peer name "$ve" &&
           ip link set "$vs" netns "$srv" && ip link set "$ve" netns "$edge" &&
           ip -n "$srv" addr add "$srv_ip/24" dev "$vs" && ip -n "$edge" addr add "$edge_ip/24" dev "$ve" &&
           ip -n "$srv" link set lo up && ip -n "$edge" link set lo up &&
           ip -n "$srv" link set "$vs" up && ip -n "$edge" link set "$ve" up; }; then
      remove
      echo "netns_testbed: FAILED to make $srv and $edge (see the ip error above); nothing left behind" >&2
      exit 1
    fi
    for _ in $(seq 1 20); do is_up && break; sleep 0.1; done
    if ! is_up; then
      remove
      echo "netns_testbed: FAILED: the veth between $srv and $edge did not come up" >&2
      exit 1
    fi
    echo "netns_testbed: namespaces $srv ($srv_ip) and $edge ($edge_ip) are up"
    write_devices
    ;;
  down)
    remove
    echo "netns_testbed: namespaces $srv and $edge removed"
    ;;
  status)
    if is_up; then echo "netns_testbed: up: $srv ($srv_ip) and $edge ($edge_ip)"; else
      echo "netns_testbed: not up ($srv, $edge)"; exit 1; fi
    ;;
  *)
    echo "usage: bash scripts/netns_testbed.sh up|down|status [--prefix P] [--subnet A.B.C] [--devices FILE]" >&2
    exit 2
    ;;
esac
