#!/usr/bin/env bash
# The one command that runs every test: start every server natively on
# 127.0.0.1 (the eight standard ones plus the append-only Redis, the etcd
# cluster and the ZooKeeper ensemble of the failover tests), point the tests
# at them, and run the workspace tests. Extra arguments go to `cargo test`, e.g.
#   integration/test.sh -p fencing-etcd -- --nocapture
# The servers keep running afterwards; stop ours with `integration/services.sh down all`.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

integration/services.sh up all
eval "$(integration/services.sh env)"

cargo test --workspace --locked "$@"
