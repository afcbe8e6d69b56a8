#!/usr/bin/env bash
# The Python package's tests: build the `fencing` wheel with maturin from
# crates/fencing-py, install it into a fresh venv (the wheel, not an
# in-place import), then run its pytest suite against the servers of
# services.sh and mypy --strict on the stubs. Called by integration/test.sh;
# extra arguments go to pytest, e.g.
#   integration/python.sh -k paused -x
#
# The wheel is built in the dev profile into the workspace's target dir:
# its Rust is the same code the Rust tests ran, and a release build would
# add a second optimised compile of every SDK to CI.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

STATE=${FENCING_STATE_DIR:-$ROOT/integration/.state}
TOOLS=$STATE/tools/python-build
MATURIN_VERSION=1.16.0
AUDITWHEEL_VERSION=6.8.2

if [[ ! -x $TOOLS/bin/maturin ]] || [[ $("$TOOLS/bin/maturin" --version) != "maturin $MATURIN_VERSION" ]] ||
  [[ ! -x $TOOLS/bin/auditwheel ]] || [[ $("$TOOLS/bin/auditwheel" --version) != *" $AUDITWHEEL_VERSION "* ]]; then
  echo "python.sh: installing maturin $MATURIN_VERSION and auditwheel $AUDITWHEEL_VERSION into $TOOLS" >&2
  rm -rf "$TOOLS"
  python3 -m venv "$TOOLS"
  "$TOOLS/bin/pip" install -q "maturin==$MATURIN_VERSION" "auditwheel==$AUDITWHEEL_VERSION"
fi

integration/services.sh up all
# Apart, so that a failing `env` stops the script (an `eval "$(…)"` would not).
endpoints=$(integration/services.sh env)
eval "$endpoints"

target=$(cargo metadata --format-version 1 --no-deps --locked | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
wheels=$target/wheels
rm -rf "$wheels"
# The `fence` command the wheel ships (fencing/bin/fence, run by the
# `fence` console script): the CLI the Rust tests built (integration/test.sh
# runs them first; FENCING_FENCE_BIN names another), its symbols stripped.
fence_bin=${FENCING_FENCE_BIN:-$target/debug/fence}
if [[ ! -x $fence_bin ]]; then
  cargo build --locked -p fencing-cli --bin fence >&2
fi
echo "python.sh: the wheel's fence is $fence_bin, built $(date -r "$fence_bin" '+%F %T')" >&2
mkdir -p crates/fencing-py/python/fencing/bin
strip -o crates/fencing-py/python/fencing/bin/fence "$fence_bin"
"$TOOLS/bin/maturin" build --profile dev --locked --manifest-path crates/fencing-py/Cargo.toml \
  --interpreter python3 --out "$wheels" >&2
"$TOOLS/bin/maturin" sdist --manifest-path crates/fencing-py/Cargo.toml --out "$wheels" >&2
wheel=$(ls "$wheels"/fencing-*.whl)
sdist=$(ls "$wheels"/fencing-*.tar.gz)
echo "python.sh: built $(basename "$wheel") ($(du -h "$wheel" | cut -f1)) and $(basename "$sdist")" >&2
# The platform tag: every ELF file in it (the module and `fence`) within
# the manylinux policy the tag names.
tag=$(basename "$wheel" .whl | rev | cut -d- -f1 | rev)
"$TOOLS/bin/auditwheel" show "$wheel" | tee "$wheels/auditwheel.txt" >&2
grep -q "consistent with.*\"$tag\"" <(tr '\n' ' ' < "$wheels/auditwheel.txt") ||
  { echo "python.sh: auditwheel does not find the wheel consistent with its tag $tag" >&2; exit 1; }
# The sdist: the module's crates and its pyproject (it builds the module
# alone; `fence` comes with wheels).
tar -tzf "$sdist" > "$wheels/sdist.txt"
for member in pyproject.toml crates/fencing-py/Cargo.toml crates/fencing-tokens/Cargo.toml; do
  grep -qx "fencing-[^/]*/$member" "$wheels/sdist.txt" ||
    { echo "python.sh: the sdist has no $member" >&2; exit 1; }
done
if grep -q "fencing/bin/fence" "$wheels/sdist.txt"; then
  echo "python.sh: the sdist carries a fence binary (it must build from source)" >&2
  exit 1
fi

venv=$target/python-venv
rm -rf "$venv"
python3 -m venv "$venv"
# The test extra pins pytest and mypy (crates/fencing-py/pyproject.toml).
"$venv/bin/pip" install -q "fencing[test] @ file://$wheel"

cd crates/fencing-py
"$venv/bin/python" -m mypy --strict python/fencing tests/typed_usage.py
# The stubs against the installed module: every name, parameter and default.
(cd "$venv" && bin/python -m mypy.stubtest fencing._native)
# Run from the tests directory so that `import fencing` is the installed
# wheel, never python/fencing of this checkout.
cd tests
# Four at a time (pytest-xdist): most of them wait on a server.
# FENCING_PYTEST_WORKERS=0 runs them one by one.
"$venv/bin/python" -m pytest -q -p no:cacheprovider -n "${FENCING_PYTEST_WORKERS:-4}" "$@"
