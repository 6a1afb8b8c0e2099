#!/usr/bin/env bash
# Installs the Debian packages entgraph builds with, and only those missing.
# Uses sudo when not root. Usage: tools/install_deps.sh [extra-package...]
set -euo pipefail
packages=(cmake ninja-build g++ make libxsimd-dev nlohmann-json3-dev doctest-dev libbenchmark-dev "$@")
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "entgraph: installing missing packages: ${missing[*]}"
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
