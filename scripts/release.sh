#!/usr/bin/env bash
# The shippable binary: builds `weir` in release and splits its debug
# information out, so that what ships is small and a profile can still be
# symbolized.
#
#   scripts/release.sh            -> target/dist/weir (stripped)
#                                    target/dist/weir.debug (its debug info)
#
# target/release/weir itself is left as cargo built it, so that a second
# run (or bench/profile.sh) starts from the whole binary again.
#
# The stripped binary names its debug file (.gnu_debuglink), so `perf
# report` and `gdb` find weir.debug beside it (or in /usr/lib/debug). The
# release profile keeps line tables (`debug = 1` in Cargo.toml) for this
# file; cold crates are optimised for size there. Needs binutils
# (objcopy), which build-essential brings (scripts/setup.sh installs it).
set -euo pipefail
cd "$(dirname "$0")/.."

target=${CARGO_TARGET_DIR:-target}
started=$(date +%s)
cargo build --release --locked --bin weir "$@"
built=$(date +%s)

built_bin="$target/release/weir"
mkdir -p "$target/dist"
bin="$target/dist/weir"
debug="$bin.debug"
unstripped=$(stat -c %s "$built_bin")
objcopy --only-keep-debug "$built_bin" "$debug"
# Debug sections and the static symbol table go; the dynamic symbols a
# loader needs stay. The debug link names weir.debug by file name, so the
# two files travel together (or weir.debug goes to /usr/lib/debug).
objcopy --strip-debug --strip-unneeded "$built_bin" "$bin.tmp"
objcopy --add-gnu-debuglink="$debug" "$bin.tmp"
mv "$bin.tmp" "$bin"

mb() { awk -v b="$1" 'BEGIN { printf "%.1f MB", b / 1000000 }'; }
echo "release.sh: built in $((built - started)) s"
echo "release.sh: $bin $(mb "$(stat -c %s "$bin")") (was $(mb "$unstripped") with debug info)"
echo "release.sh: $debug $(mb "$(stat -c %s "$debug")")"
