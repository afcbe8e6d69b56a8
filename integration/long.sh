#!/usr/bin/env bash
# The long mode of the history checker on every issuer × store pair: 16 clients,
# over 10,000 fenced operations per pair, random pauses past the TTL. Prints one
# line per pair (operations, accepted, refused, violations). Slow: issuers that
# poll for a free lease (SQL, Redis) take minutes per pair. Extra arguments go to
# the test binary, e.g. `integration/long.sh memory` for one issuer's row.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

integration/services.sh up all
eval "$(integration/services.sh env)"
FENCING_MATRIX_LONG=1 cargo test --locked -p fencing-integration --test matrix -- --nocapture "$@"
