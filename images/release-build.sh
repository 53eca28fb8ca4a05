#!/usr/bin/env bash
# The release build of the binaries the images and the release ship, as the two cargo commands
# that every caller runs alike (.ci/run, make e2e, images/build.sh, images/dist.sh, and so the
# install page's `images/build.sh operator agent`): the first call compiles, every later one finds
# the same units fresh and compiles nothing.
#   shipped  cargo build --release --locked -p leadergroup-operator -p leadergroup-agent
#            target/release/leadergroup-operator, kubectl-leadergroup, leadergroup-agent
#   ledger   cargo build --release --locked -p leadergroup-operator --example ledger
#            target/release/examples/ledger
# Why these package sets: cargo unifies a dependency's features across the packages one command
# selects. The agent built alone (-p leadergroup-agent) asks fewer features of serde, kube and
# k8s-openapi than beside the operator, and so compiled its own copies of 33 crates (k8s-openapi,
# kube-client and serde among them); `--bin leadergroup-operator` without -p selects every default
# member (testenv, bench, model...) and differs from the Dockerfile's `-p leadergroup-operator`
# (35 crates). The example needs the root package's dev-dependencies (the client's `postgres`
# feature, testenv, chaos): built in the same command, the shipped operator and agent would be
# compiled with those features too, and `images/build.sh operator agent` would compile the test
# crates; so it has a command of its own, which reuses all but the 7 crates whose features differ.
# Nothing else may differ between two calls either: cargo rebuilds ring, and all that links it,
# when a variable ring's build script reads (CARGO_MANIFEST_DIR, CARGO_PKG_NAME...) changes, as it
# does under `cargo test` (tests/e2e/page.rs runs a page's commands without them).
#
#   images/release-build.sh [shipped|ledger]...   (default: both)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
prefix=release-build
# shellcheck source=../controlplane/lib.sh
source "$repo/controlplane/lib.sh"

sets=()
while (($#)); do
  case $1 in
    shipped | ledger) sets+=("$1"); shift ;;
    -h | --help) usage; exit 0 ;;
    *) bad_arg "$1 (shipped or ledger)" ;;
  esac
done
((${#sets[@]})) || sets=(shipped ledger)

cd "$repo"
for set in "${sets[@]}"; do
  case $set in
    shipped) nice -n 10 cargo build --release --locked -p leadergroup-operator -p leadergroup-agent ;;
    ledger) nice -n 10 cargo build --release --locked -p leadergroup-operator --example ledger ;;
  esac
done
