#!/usr/bin/env bash
# Two SSH "devices" on this machine, for trying tracr's SSH path (deploy by
# content hash, data staging, devices check/setup) before pointing it at real
# boards: an OpenSSH server listening on 127.0.0.1:2222 and 127.0.0.2:2222
# (both loopback), a key pair made for it in results/ssh_testbed/, and a
# devices file naming a SERVER at 127.0.0.1 and a PARTICIPANT at 127.0.0.2,
# each with its own work_dir, so each gets its own copy of the agent and data.
#   bash scripts/ssh_testbed.sh up      # prints the path of the devices file it wrote
#   tracrctl devices check --devices results/ssh_testbed/devices.yaml --trust-new-hosts
#   bash scripts/ssh_testbed.sh down
# Run it as the user tracrctl runs as (root, or any user: sshd then only lets
# that user in). Traffic stays on 127.0.0.0/8. Options (after up/down):
# --port N and --dir DIR choose another port and directory (also
# TRACR_TESTBED_PORT and TRACR_TESTBED_DIR). Safe to run twice: a second `up`
# finds its sshd running and checks it. `up` fails loudly (exit 1) unless both
# addresses answer with this test-bed's own host key within 5 s: a port
# taken by another server is named, never reported as success.
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${TRACR_TESTBED_DIR:-$PWD/results/ssh_testbed}"
port="${TRACR_TESTBED_PORT:-2222}"
cmd="${1:-}"
[ $# -gt 0 ] && shift
while [ $# -gt 0 ]; do
  case "$1" in
    --port) port="${2:?--port needs a number}"; shift 2 ;;
    --dir) dir="${2:?--dir needs a directory}"; shift 2 ;;
    *) echo "ssh_testbed: unknown option '$1' (expected --port N or --dir DIR)" >&2; exit 2 ;;
  esac
done
case "$port" in
  ''|*[!0-9]*) echo "ssh_testbed: --port: expected a port number 1-65535, got '$port'" >&2; exit 2 ;;
esac

# Whether ADDR:$port answers with this test-bed's host key (not some other server's).
answers_with_our_key() {
  local got want
  want="$(awk '{print $2}' "$dir/host_ed25519.pub")"
  got="$(ssh-keyscan -T 2 -p "$port" -t ed25519 "$1" 2>/dev/null | awk '{print $3}' | head -n1)"
  [ -n "$got" ] && [ "$got" = "$want" ]
}

case "$cmd" in
  up)
    mkdir -p "$dir"
    dir="$(cd "$dir" && pwd)"
    chmod 700 "$dir"
    [ -f "$dir/host_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -f "$dir/host_ed25519" -C tracr-testbed-host
    [ -f "$dir/testbed_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -f "$dir/testbed_ed25519" -C tracr-testbed
    chmod 600 "$dir/testbed_ed25519"
    cp "$dir/testbed_ed25519.pub" "$dir/authorized_keys"
    # A running test-bed keeps its configuration: it is checked, never
    # rewritten under it.
    if [ -f "$dir/sshd.pid" ] && kill -0 "$(cat "$dir/sshd.pid")" 2>/dev/null; then
      running_port="$(awk -F: '/^ListenAddress /{print $NF; exit}' "$dir/sshd_config" 2>/dev/null)"
      if [ -n "$running_port" ] && [ "$running_port" != "$port" ]; then
        echo "ssh_testbed: sshd already running on port $running_port (pid $(cat "$dir/sshd.pid")), not $port: run 'bash scripts/ssh_testbed.sh down' first to move it" >&2
        exit 1
      fi
      echo "ssh_testbed: sshd already running (pid $(cat "$dir/sshd.pid"))"
    else
      rm -f "$dir/sshd.pid"
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
      mkdir -p /run/sshd 2>/dev/null || true
      : > "$dir/sshd.log"
      /usr/sbin/sshd -f "$dir/sshd_config" -E "$dir/sshd.log" ||
        { echo "ssh_testbed: sshd did not start: $(tail -n 3 "$dir/sshd.log" | tr '\n' ' ')(log $dir/sshd.log)" >&2; exit 1; }
    fi
    # Both addresses must answer with our host key: sshd logs a port it could
    # not bind and may still start, and another server may hold the port.
    for addr in 127.0.0.1 127.0.0.2; do
      ok=0
      for _ in $(seq 1 25); do
        if answers_with_our_key "$addr"; then ok=1; break; fi
        sleep 0.2
      done
      if [ "$ok" != 1 ]; then
        if grep -q "Cannot bind\|Address already in use" "$dir/sshd.log" 2>/dev/null; then
          why="port $port is taken on $addr ($(grep -m1 "Cannot bind\|Address already in use" "$dir/sshd.log"))"
        elif ssh-keyscan -T 2 -p "$port" "$addr" >/dev/null 2>&1; then
          why="$addr:$port answers with another server's host key: something else listens there"
        else
          why="nothing answers on $addr:$port"
        fi
        [ -f "$dir/sshd.pid" ] && kill "$(cat "$dir/sshd.pid")" 2>/dev/null && rm -f "$dir/sshd.pid"
        echo "ssh_testbed: FAILED: $why. Choose another port: bash scripts/ssh_testbed.sh up --port N (sshd log: $dir/sshd.log)" >&2
        exit 1
      fi
    done
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
    echo "ssh_testbed: sshd on 127.0.0.1:$port and 127.0.0.2:$port; devices file written to $dir/devices.yaml"
    ;;
  down)
    if [ -f "$dir/sshd.pid" ]; then kill "$(cat "$dir/sshd.pid")" 2>/dev/null || true; rm -f "$dir/sshd.pid"; fi
    echo "ssh_testbed: sshd stopped (keys kept; the devices' work_dirs are ~/.cache/tracr-testbed)"
    ;;
  *)
    echo "usage: bash scripts/ssh_testbed.sh up|down [--port N] [--dir DIR]" >&2
    exit 2
    ;;
esac
