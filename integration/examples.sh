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

# "package example" -> arguments.
declare -A ARGS=(
  ["fencing-audit audit"]="crates/fencing-audit/tests/fixtures"
  ["fencing-sql issuer"]="$FENCING_PG_URL"
  ["fencing-sql store"]="$FENCING_PG_URL"
)
# Further runs: "package example|arguments".
EXTRA=(
  "fencing-sql store|$FENCING_MYSQL_URL"
  "fencing-sql store|sqlite://$scratch/store.sqlite"
  "fencing-sql issuer|sqlite://$scratch/issuer.sqlite"
  "fencing-zookeeper zk_lock|--cversion"
  "fencing-http orders|$FENCING_PG_URL"
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
