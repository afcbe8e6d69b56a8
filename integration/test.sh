#!/usr/bin/env bash
# The one command that runs every test: start every server natively on
# 127.0.0.1 (`services.sh up all`: the eight standard ones plus the on-demand
# etcd cluster, ZooKeeper ensemble, append-only Redis, replicated Redis pair
# and s3rver), point the tests at them, and run the workspace tests, then
# (without arguments) the Python package's (integration/python.sh). Extra
# arguments go to `cargo test`, e.g.
#   integration/test.sh -p fencing-etcd -- --nocapture
# The servers keep running afterwards; `integration/services.sh down` stops
# every one this checkout started (and nothing else).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

if ! cargo nextest --version >/dev/null 2>&1; then
  echo "test.sh: cargo-nextest is missing: cargo install cargo-nextest --locked" >&2
  exit 1
fi

integration/services.sh up all
eval "$(integration/services.sh env)"

cargo nextest run --workspace --locked "$@"

# A run narrowed by arguments is about the Rust tests it names.
if (($# == 0)); then
  cargo test --workspace --locked --doc
  # The Python package on the same servers.
  integration/python.sh
fi
