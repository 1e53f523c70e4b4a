#!/usr/bin/env bash
# The virtualenv of the format tests' independent producer and reader
# (tests/formats/produce.py, consume.py): installs tests/formats/requirements.txt
# into a cached virtualenv when it is missing or the requirements changed, and
# prints the virtualenv's python on stdout. Idempotent; quiet when up to date.
#
#   tests/formats/venv.sh            install if needed, print the interpreter's path
#   tests/formats/venv.sh env        install if needed, print: export WEIR_FORMATS_PYTHON=...
#
# Environment:
#   WEIR_FORMATS_VENV   the virtualenv                 (default ~/.cache/weir/formats-venv)
#   PYTHON              interpreter for the virtualenv (default python3)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
venv=${WEIR_FORMATS_VENV:-$HOME/.cache/weir/formats-venv}
python=${PYTHON:-python3}
requirements="$here/requirements.txt"

log() { printf 'formats/venv.sh: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

# The marker names the requirements by their content: any change reinstalls.
want="requirements.txt sha1 $(sha1sum "$requirements" | cut -d' ' -f1)"

install() {
  if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.complete" 2>/dev/null)" = "$want" ]; then
    return 0
  fi
  command -v "$python" >/dev/null || die "$python not found: install Python 3 (Debian: apt-get install python3 python3-venv)"
  mkdir -p "$(dirname "$venv")"
  exec 9>"$venv.lock"
  flock 9
  if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.complete" 2>/dev/null)" = "$want" ]; then exec 9>&-; return 0; fi
  if [ ! -x "$venv/bin/pip" ]; then
    log "creating virtualenv $venv"
    "$python" -m venv "$venv" >&2 || die "could not create a virtualenv at $venv (Debian: apt-get install python3-venv)"
  fi
  rm -f "$venv/.complete"
  log "installing $requirements into $venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$requirements" >&2 \
    || die "pip install -r $requirements failed (is PyPI reachable?)"
  "$venv/bin/python" -c 'import confluent_kafka.schema_registry.avro, confluent_kafka.schema_registry.protobuf, confluent_kafka.schema_registry.json_schema, grpc_tools.protoc' \
    || die "the virtualenv $venv cannot import the serializers after install"
  printf '%s\n' "$want" > "$venv/.complete"
  exec 9>&-
}

install
case "${1:-}" in
  "") echo "$venv/bin/python" ;;
  env) echo "export WEIR_FORMATS_PYTHON=$venv/bin/python" ;;
  *) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
