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
# DuckDB, the independent engine the SQL tests check weir's results
# against (tests/sql/reference.py), in a virtualenv of its own: Debian's
# Python refuses a system-wide pip install.
sql_venv=${WEIR_SQL_VENV:-$HOME/.cache/weir/sql-venv}
duckdb_requirement="duckdb==2.0.1"
if [ "$(cat "$sql_venv/.complete" 2>/dev/null)" != "$duckdb_requirement" ]; then
  echo "setup.sh: installing $duckdb_requirement into $sql_venv" >&2
  python3 -m venv "$sql_venv"
  "$sql_venv/bin/pip" install --quiet --disable-pip-version-check "$duckdb_requirement"
  echo "$duckdb_requirement" > "$sql_venv/.complete"
fi
