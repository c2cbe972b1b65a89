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
#   --chain        a chain instead (#43): namespaces P-phone, P-mid and P-cloud
#                  in a row, the middle with an interface on each side: veth
#                  P-1p / P-1e on A.B.C (edge .1, phone .2) and P-2e / P-2c on
#                  A.B.C+1 (cloud .1, edge .2); each hop shaped on its own pair
#                  (config/experiments/chain.yaml's `chain:` links; delays
#                  through the agents' relay, `link_delay: agent`, where the
#                  kernel has no netem). --devices writes phone, edge, cloud.
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
chain=0
while [ $# -gt 0 ]; do
  case "$1" in
    --chain) chain=1; shift ;;
    --prefix) prefix="${2:?--prefix needs a name}"; shift 2 ;;
    --subnet) subnet="${2:?--subnet needs A.B.C}"; shift 2 ;;
    --devices) devices="${2:?--devices needs a file}"; shift 2 ;;
    *) echo "netns_testbed: unknown option '$1' (expected --prefix P, --subnet A.B.C, --devices FILE or --chain)" >&2
       exit 2 ;;
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

if [ "$chain" = 1 ]; then
  phone="$prefix-phone" mid="$prefix-mid" cloud="$prefix-cloud"
  v1p="$prefix-1p" v1e="$prefix-1e" v2e="$prefix-2e" v2c="$prefix-2c"
  if [ $(( 10#${subnet##*.} )) -ge 255 ]; then
    echo "netns_testbed: --chain needs A.B.C with C below 255 (hop 2 is A.B.C+1)" >&2; exit 2
  fi
  subnet2="${subnet%.*}.$(( 10#${subnet##*.} + 1 ))"
  has() { ip netns list 2>/dev/null | awk '{print $1}' | grep -qx "$1"; }
  conf() { ip -n "$1" -br addr show dev "$3" 2>/dev/null | grep -q "UP.*$2/24"; }
  chain_up() {
    has "$phone" && has "$mid" && has "$cloud" && conf "$phone" "$subnet.2" "$v1p" && conf "$mid" "$subnet.1" "$v1e" &&
      conf "$mid" "$subnet2.2" "$v2e" && conf "$cloud" "$subnet2.1" "$v2c"
  }
  chain_remove() {
    for n in "$phone" "$mid" "$cloud"; do ip netns del "$n" 2>/dev/null || true; done
    ip link del "$v1p" 2>/dev/null || true
    ip link del "$v2e" 2>/dev/null || true
  }
  chain_devices() {
    [ -n "$devices" ] || return 0
    mkdir -p "$(dirname "$devices")"
    cat > "$devices" <<DEV
# Written by scripts/netns_testbed.sh up --chain --prefix $prefix --subnet $subnet:
# a chain of three agents on this machine, each in its namespace: phone -- edge -- cloud.
devices:
  - {device_type: PARTICIPANT, name: phone, transport: local, netns: $phone, cpu_quota: 0.25,
     connection_params: [{host: $subnet.2, default: true}]}
  - {device_type: SERVER, name: edge, transport: local, netns: $mid,
     connection_params: [{host: $subnet.1, port: 0, default: true}]}
  - {device_type: SERVER, name: cloud, transport: local, netns: $cloud,
     connection_params: [{host: $subnet2.1, port: 0, default: true}]}
DEV
    echo "netns_testbed: devices file $devices"
  }
  what="$phone ($subnet.2) -- $mid ($subnet.1, $subnet2.2) -- $cloud ($subnet2.1)"
  case "$cmd" in
    up)
      if [ "$(id -u)" -ne 0 ]; then echo "netns_testbed: up needs root (ip netns add)" >&2; exit 1; fi
      if chain_up; then echo "netns_testbed: already up: $what"; chain_devices; exit 0; fi
      chain_remove
      if ! { ip netns add "$phone" && ip netns add "$mid" && ip netns add "$cloud" &&
             ip link add "$v1p" type veth peer name "$v1e" && ip link add "$v2e" type veth peer name "$v2c" &&
             ip link set "$v1p" netns "$phone" && ip link set "$v1e" netns "$mid" &&
             ip link set "$v2e" netns "$mid" && ip link set "$v2c" netns "$cloud" &&
             ip -n "$phone" addr add "$subnet.2/24" dev "$v1p" && ip -n "$mid" addr add "$subnet.1/24" dev "$v1e" &&
             ip -n "$mid" addr add "$subnet2.2/24" dev "$v2e" && ip -n "$cloud" addr add "$subnet2.1/24" dev "$v2c" &&
             ip -n "$phone" link set lo up && ip -n "$mid" link set lo up && ip -n "$cloud" link set lo up &&
             ip -n "$phone" link set "$v1p" up && ip -n "$mid" link set "$v1e" up &&
             ip -n "$mid" link set "$v2e" up && ip -n "$cloud" link set "$v2c" up; }; then
        chain_remove
        echo "netns_testbed: FAILED to make the chain $what (see the ip error above); nothing left behind" >&2
        exit 1
      fi
      for _ in $(seq 1 20); do chain_up && break; sleep 0.1; done
      if ! chain_up; then chain_remove; echo "netns_testbed: FAILED: the chain's veths did not come up" >&2; exit 1; fi
      echo "netns_testbed: chain up: $what"
      chain_devices
      ;;
    down) chain_remove; echo "netns_testbed: chain $phone, $mid and $cloud removed" ;;
    status)
      if chain_up; then echo "netns_testbed: chain up: $what"; else
        echo "netns_testbed: chain not up ($phone, $mid, $cloud)"; exit 1; fi
      ;;
    *) echo "usage: bash scripts/netns_testbed.sh up|down|status --chain [--prefix P] [--subnet A.B.C] [--devices FILE]" >&2
       exit 2 ;;
  esac
  exit 0
fi

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
