#!/usr/bin/env bash
# Start and stop, natively on 127.0.0.1, the real servers and emulators that the
# fencing integration tests talk to. docker-compose.yml offers the same servers
# on the same ports for machines with Docker. See integration/README.md.
# The program is fencing-servers' `services` (integration/servers/src/run/), every
# server declared once in integration/servers/src/specs/; `services.sh help` says more.
#
#   services.sh up [NAMES...] | down [NAMES...] | status | env | deps [NAMES...]
#   services.sh leader CLUSTER | restart-member CLUSTER PORT | restart NAME | clean | compose
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
exec cargo run -q --locked --manifest-path "$HERE/../Cargo.toml" -p fencing-servers --bin services -- "$@"
