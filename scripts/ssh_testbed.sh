#!/usr/bin/env bash
# Two SSH "devices" on this machine, for trying tracr's SSH path (deploy by
# content hash, data staging, devices check/setup) before pointing it at real
# boards: an OpenSSH server listening on 127.0.0.1:2222 and 127.0.0.2:2222
# (both loopback), a key pair made for it in results/ssh_testbed/, and a
# devices file naming a SERVER at 127.0.0.1 and a PARTICIPANT at 127.0.0.2,
# each with its own work_dir, so each gets its own copy of the agent and data.
#   bash scripts/ssh_testbed.sh up      # prints the devices file it wrote
#   tracrctl devices check --devices results/ssh_testbed/devices.yaml --trust-new-hosts
#   bash scripts/ssh_testbed.sh down
# Run it as the user tracrctl runs as (root, or any user: sshd then only lets
# that user in). Traffic stays on 127.0.0.0/8. TRACR_TESTBED_DIR and
# TRACR_TESTBED_PORT choose another directory and port (the tests do).
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${TRACR_TESTBED_DIR:-$PWD/results/ssh_testbed}"
port="${TRACR_TESTBED_PORT:-2222}"
case "${1:-}" in
  up)
    mkdir -p "$dir"
    dir="$(cd "$dir" && pwd)"
    chmod 700 "$dir"
    [ -f "$dir/host_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -f "$dir/host_ed25519" -C tracr-testbed-host
    [ -f "$dir/testbed_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -f "$dir/testbed_ed25519" -C tracr-testbed
    chmod 600 "$dir/testbed_ed25519"
    cp "$dir/testbed_ed25519.pub" "$dir/authorized_keys"
    cat > "$dir/sshd_config" <<CONF
ListenAddress 127.0.0.1:$port
ListenAddress 127.0.0.2:$port
HostKey $dir/host_ed25519
AuthorizedKeysFile $dir/authorized_keys
PidFile $dir/sshd.pid
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
StrictModes no
UsePAM no
Subsystem sftp internal-sftp
CONF
    if [ -f "$dir/sshd.pid" ] && kill -0 "$(cat "$dir/sshd.pid")" 2>/dev/null; then
      echo "ssh_testbed: sshd already running (pid $(cat "$dir/sshd.pid"))"
    else
      mkdir -p /run/sshd 2>/dev/null || true
      /usr/sbin/sshd -f "$dir/sshd_config" -E "$dir/sshd.log" ||
        { echo "ssh_testbed: sshd did not start; see $dir/sshd.log" >&2; exit 1; }
    fi
    user="$(id -un)"
    cat > "$dir/devices.yaml" <<DEV
# Written by scripts/ssh_testbed.sh: two SSH devices on loopback.
devices:
  - device_type: SERVER
    name: server
    work_dir: ~/.cache/tracr-testbed/server
    connection_params:
      - {host: 127.0.0.1, ssh_port: $port, user: $user, pkey_fp: $dir/testbed_ed25519, default: true}
  - device_type: PARTICIPANT
    name: edge
    work_dir: ~/.cache/tracr-testbed/edge
    connection_params:
      - {host: 127.0.0.2, ssh_port: $port, user: $user, pkey_fp: $dir/testbed_ed25519, default: true}
DEV
    echo "ssh_testbed: sshd on 127.0.0.1:$port and 127.0.0.2:$port; devices file $dir/devices.yaml"
    ;;
  down)
    if [ -f "$dir/sshd.pid" ]; then kill "$(cat "$dir/sshd.pid")" 2>/dev/null || true; rm -f "$dir/sshd.pid"; fi
    echo "ssh_testbed: sshd stopped (keys kept; the devices' work_dirs are ~/.cache/tracr-testbed)"
    ;;
  *)
    echo "usage: bash scripts/ssh_testbed.sh up|down" >&2
    exit 2
    ;;
esac
