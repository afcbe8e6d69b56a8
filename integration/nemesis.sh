#!/usr/bin/env bash
# The nemesis outside `cargo test`: starts the servers (and installs iptables
# and libfaketime), then runs partitions on the etcd cluster and the ZooKeeper
# ensemble × PostgreSQL and S3, partitions of one server as issuer and store
# (bucket-s3, dynamodb-dynamodb), and the skewed-clock runs on every issuer.
#   integration/nemesis.sh                      CI mode, one run per pair (what the test runs)
#   integration/nemesis.sh --long 100000        long mode: runs per pair until 100,000 fenced calls
#   integration/nemesis.sh --only etcd-postgres,clocks-redis,bucket-s3 --seed 7
#   integration/nemesis.sh --write /tmp/table.md   also write the summary table
# Needs root (network namespaces). A failing run's timeline (SVG and events)
# lands in target/nemesis/; FENCING_NEMESIS_KEEP=1 keeps every run's.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

integration/services.sh up all
eval "$(integration/services.sh env)"
cargo build --locked -q -p fencing-integration --bin nemesis-client
cargo run --locked -q -p fencing-integration --bin nemesis -- "$@"
