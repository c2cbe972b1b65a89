#!/usr/bin/env bash
# A two-namespace test-bed on this machine (needs root): the SERVER's agent in
# namespace tracr-srv (10.250.0.1), the PARTICIPANT's in tracr-edge
# (10.250.0.2), joined by a veth pair that link profiles shape with tc.
# Used by config/devices_netns.yaml and config/experiments/plan_links.yaml.
#   bash scripts/netns_testbed.sh up | down
set -euo pipefail
case "${1:-}" in
  up)
    ip netns add tracr-srv
    ip netns add tracr-edge
    ip link add tracr-vs type veth peer name tracr-ve
    ip link set tracr-vs netns tracr-srv
    ip link set tracr-ve netns tracr-edge
    ip -n tracr-srv addr add 10.250.0.1/24 dev tracr-vs
    ip -n tracr-edge addr add 10.250.0.2/24 dev tracr-ve
    for ns in tracr-srv tracr-edge; do ip -n "$ns" link set lo up; done
    ip -n tracr-srv link set tracr-vs up
    ip -n tracr-edge link set tracr-ve up
    echo "namespaces tracr-srv (10.250.0.1) and tracr-edge (10.250.0.2) are up"
    ;;
  down)
    ip netns del tracr-srv 2>/dev/null || true
    ip netns del tracr-edge 2>/dev/null || true
    echo "namespaces removed"
    ;;
  *)
    echo "usage: bash scripts/netns_testbed.sh up|down" >&2
    exit 2
    ;;
esac
