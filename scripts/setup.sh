#!/usr/bin/env bash
# Installs every Debian package tracr needs. Idempotent: when all packages are
# present it only checks (dpkg-query) and returns in well under a second.
set -euo pipefail

PKGS=(
  build-essential cmake pkg-config ccache git
  libtorch-dev libssh-dev libzmq3-dev cppzmq-dev libmsgpack-cxx-dev libssl-dev
  libyaml-cpp-dev libsqlite3-dev sqlite3 libfmt-dev libgtest-dev libgmock-dev libcli11-dev
  libbenchmark-dev libblosc-dev libfp16-dev libjpeg-dev libpng-dev zlib1g-dev
  openssh-server openssh-client iproute2 procps iperf3 util-linux
  chromium librsvg2-bin poppler-utils python3-pandas python3-matplotlib python3-seaborn
  clang libclang-rt-14-dev clang-format clang-tidy universal-ctags
  dataset-fashion-mnist python3 python3-torchvision python3-pil python3-blosc python3-numpy
  libopenblas0-openmp
)

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "tracr setup: installing ${#missing[@]} Debian package(s): ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null; then SUDO="sudo"; else
    echo "tracr setup: need root (or sudo) to install: ${missing[*]}" >&2; exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "tracr setup: packages installed"
