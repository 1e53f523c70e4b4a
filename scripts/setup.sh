#!/usr/bin/env bash
# Installs what building and testing weir needs on a fresh Debian machine:
# the toolchain pieces librdkafka (cmake-build) and RocksDB (bindgen) build
# with, Java 17 and Maven for the local Kafka broker, and kcat for poking at
# topics by hand. Skips apt when everything is already there.
set -euo pipefail
packages=(build-essential cmake pkg-config clang libclang-dev libcurl4-openssl-dev libssl-dev
          libsasl2-dev libzstd-dev zlib1g-dev openjdk-17-jre-headless maven kcat curl python3 python3-venv)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup.sh: installing ${missing[*]}" >&2
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
command -v cargo >/dev/null || { echo "setup.sh: cargo not found; install Rust with rustup" >&2; exit 1; }
