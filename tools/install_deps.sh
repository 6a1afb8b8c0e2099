#!/usr/bin/env bash
# Installs what entgraph builds and tests with, and only what is missing:
# Debian packages (with sudo when not root), then the npm packages of the
# test tools pinned by package-lock.json (playwright-core, typescript).
# Usage: tools/install_deps.sh [extra-package...]
set -euo pipefail
cd "$(dirname "$0")/.."
# emscripten: the WebAssembly package; chromium: the demo page's browser tests;
# python3-numpy: the Python tests (c_api.python, tools.gpu_peers).
packages=(cmake ninja-build g++ make libxsimd-dev nlohmann-json3-dev doctest-dev libbenchmark-dev emscripten chromium
  python3-numpy "$@")
# node and npm may come from elsewhere (e.g. NodeSource's nodejs bundles npm).
command -v node >/dev/null || packages+=(nodejs)
command -v npm >/dev/null || packages+=(npm)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "entgraph: installing missing packages: ${missing[*]}"
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
if ! node -e 'require.resolve("playwright-core"); require.resolve("typescript")' 2>/dev/null; then
  echo "entgraph: installing the npm test tools (package-lock.json)"
  npm ci --no-audit --no-fund
fi
