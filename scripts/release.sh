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
#
# The final link, and only it (`cargo rustc` passes these flags to the
# binary's own compilation; every dependency is built as `cargo build`
# builds it), uses LLD 15 or later when there is one (Debian: lld-16):
#   --icf=all                identical functions (the many monomorphised
#                            copies generic code leaves) kept once: 1.5 MB;
#   -z pack-relative-relocs  the position-independent binary's relative
#                            relocations packed (DT_RELR): 2.3 MB less,
#                            and the binary needs glibc 2.36 or later
#                            (Debian 12, Ubuntu 22.10).
# Without LLD, GNU ld (binutils 2.38 or later) packs the relocations and
# nothing is folded. WEIR_RELEASE_PLAIN_LINK=1 links as cargo does.
set -euo pipefail
cd "$(dirname "$0")/.."

target=${CARGO_TARGET_DIR:-target}
link=()
if [ -z "${WEIR_RELEASE_PLAIN_LINK:-}" ]; then
  lld=$(command -v ld.lld-16 || command -v ld.lld-17 || command -v ld.lld-18 || command -v ld.lld-15 || true)
  if [ -n "$lld" ] && command -v clang >/dev/null; then
    link=(-C linker=clang -C "link-arg=--ld-path=$lld" -C link-arg=-Wl,--icf=all
          -C link-arg=-Wl,-z,pack-relative-relocs)
  else
    echo "release.sh: no LLD 15+ (apt-get install lld-16): linking with GNU ld, no code folding" >&2
    link=(-C link-arg=-Wl,-z,pack-relative-relocs)
  fi
fi
started=$(date +%s)
cargo rustc --release --locked -p weir --bin weir "$@" -- "${link[@]}"
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
