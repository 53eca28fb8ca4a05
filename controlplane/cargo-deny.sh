#!/usr/bin/env bash
# Prints the path of cargo-deny at its pinned version, building it from crates.io the first time
# (`cargo install --locked`, about 4 minutes on 2 cores) into the project's cache; then seconds.
# Its default features are off: the advisory database needs the network, which `make deny` (the
# licenses, bans and sources checks) never uses.
#
#   controlplane/cargo-deny.sh
set -euo pipefail
prefix=cargo-deny
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

version=0.20.2
cache_root=${LEADERGROUP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/leadergroup-operator}
root=$cache_root/tools/cargo-deny-$version
if [[ ! -x $root/bin/cargo-deny ]]; then
  say "building cargo-deny $version into $root (once)"
  build=$(mktemp -d)
  trap 'rm -rf "$build"' EXIT
  CARGO_TARGET_DIR=$build nice -n 10 cargo install cargo-deny --version "$version" --locked \
    --no-default-features --root "$root" --quiet >&2
fi
echo "$root/bin/cargo-deny"
