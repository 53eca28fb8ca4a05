#!/usr/bin/env bash
# Prints the path of mdbook at its pinned version, building it from crates.io the first time
# (`cargo install --locked`, a few minutes on 2 cores) into the project's cache; then seconds.
# Without its default `serve` and `watch` features (a web server and a file watcher `make docs`
# never uses); with `search`, the book's search box.
#
#   doctools/mdbook.sh
set -euo pipefail
prefix=mdbook
# shellcheck source=../controlplane/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../controlplane/lib.sh"

version=0.5.4
cache_root=${LEADERGROUP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/leadergroup-operator}
root=$cache_root/tools/mdbook-$version
if [[ ! -x $root/bin/mdbook ]]; then
  say "building mdbook $version into $root (once)"
  build=$(mktemp -d)
  trap 'rm -rf "$build"' EXIT
  CARGO_TARGET_DIR=$build nice -n 10 cargo install mdbook --version "$version" --locked \
    --no-default-features --features search --root "$root" --quiet >&2
fi
echo "$root/bin/mdbook"
