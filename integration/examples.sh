#!/usr/bin/env bash
# Runs every `examples/` program of the workspace against the servers
# `integration/services.sh up` started (their FENCING_* endpoints exported),
# and fails if any one fails. CI runs it after the tests; run it by hand the
# same way:
#   integration/services.sh up && integration/examples.sh
# Examples are found with `cargo metadata`, so a new one is run without
# editing this file. One that needs arguments gets them from ARGS below;
# EXTRA lists further runs of an example (other databases).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
eval "$(integration/services.sh env)"

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# The guides' examples (docs/choosing.md, migrating.md, testing-your-service.md)
# take URLs. moto starts empty: make their bucket (moto takes an unsigned
# CreateBucket; an existing one answers 200 too).
curl -fsS -o /dev/null -X PUT "$FENCING_S3_ENDPOINT/fencing-guides"
etcd="etcd://${FENCING_ETCD_ENDPOINTS#http://}"
redis_aof=$FENCING_REDIS_AOF_URL # the Redis issuer refuses a server without appendonly
s3="s3://fencing-guides?endpoint=$FENCING_S3_ENDPOINT&emulator=true"
dynamodb="dynamodb://fencing-guides?endpoint=$FENCING_DYNAMODB_ENDPOINT&emulator=true&create_table=true"

# "package example" -> arguments.
declare -A ARGS=(
  ["fencing-audit audit"]="crates/fencing-audit/tests/fixtures"
  ["fencing-sql issuer"]="$FENCING_PG_URL"
  ["fencing-sql store"]="$FENCING_PG_URL"
  ["fencing-tokens choose"]="$etcd $s3"
  ["fencing-tokens migrate"]="$redis_aof $etcd $FENCING_PG_URL sqlite://$scratch/migrated.sqlite"
  ["fencing-tokens test_your_service"]="$etcd $s3"
)
# Further runs: "package example|arguments".
EXTRA=(
  "fencing-sql store|$FENCING_MYSQL_URL"
  "fencing-sql store|sqlite://$scratch/store.sqlite"
  "fencing-sql issuer|sqlite://$scratch/issuer.sqlite"
  "fencing-zookeeper zk_lock|--cversion"
  "fencing-http orders|$FENCING_PG_URL"
  "fencing-tokens choose|$redis_aof $FENCING_PG_URL"
  "fencing-tokens choose|$dynamodb $dynamodb"
  "fencing-tokens migrate|$redis_aof $FENCING_PG_URL $dynamodb $s3"
)

mapfile -t EXAMPLES < <(cargo metadata --no-deps --format-version 1 --locked | python3 -c '
import json, sys
for p in json.load(sys.stdin)["packages"]:
    for t in p["targets"]:
        if "example" in t["kind"]:
            print(p["name"], t["name"], ",".join(t.get("required-features", [])))
' | sort)

runs=()
for line in "${EXAMPLES[@]}"; do
  read -r pkg ex features <<<"$line"
  runs+=("$pkg $ex|${features}|${ARGS["$pkg $ex"]:-}")
done
for e in "${EXTRA[@]}"; do
  runs+=("${e%%|*}||${e#*|}")
done

# One build of every example with the workspace's features (what `cargo test
# --workspace` already compiled), then each binary run as it is: a
# `cargo run -p PKG --example EX` each would rebuild the crates under that
# package's own feature set, minutes per example.
echo "--- cargo build --workspace --examples --bins"
cargo build --locked -q --workspace --examples --bins
bin_dir=$(cargo metadata --format-version 1 --no-deps --locked | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')/debug/examples

failed=()
for run in "${runs[@]}"; do
  IFS='|' read -r target _features args <<<"$run"
  read -r pkg ex <<<"$target"
  echo "--- $pkg: examples/$ex $args"
  # shellcheck disable=SC2086 # args split on purpose
  if ! timeout 300 "$bin_dir/$ex" $args; then
    failed+=("$pkg/$ex $args")
  fi
done

if ((${#failed[@]})); then
  echo "examples.sh: ${#failed[@]} of ${#runs[@]} example runs failed:" >&2
  printf '  %s\n' "${failed[@]}" >&2
  exit 1
fi
echo "examples.sh: all ${#runs[@]} example runs passed"
