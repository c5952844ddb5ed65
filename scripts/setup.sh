#!/usr/bin/env bash
# Installs the Debian packages collbench builds and tests with (only those missing). Safe to re-run.
set -euo pipefail
packages=(
  build-essential cmake ninja-build pkg-config git
  libsimgrid-dev libfmt-dev nlohmann-json3-dev libspdlog-dev libcli11-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libgloo-dev libopenmpi-dev openmpi-bin libeigen3-dev libhwy-dev
  clang-format clang-tidy iproute2 chromium
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi
