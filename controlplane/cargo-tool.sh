#!/usr/bin/env bash
# Prints the path of a pinned cargo tool, building it from crates.io the first time
# (`cargo install --locked`, minutes on 2 cores) into the project's cache; then it returns at once.
#   deny       cargo-deny 0.20.2 (make deny), its default features off: the advisory database
#              needs the network, which `make deny` (licenses, bans and sources) never uses
#   cyclonedx  cargo-cyclonedx 0.5.9 (make dist: the CycloneDX SBOM of the Rust dependencies)
#
#   controlplane/cargo-tool.sh deny|cyclonedx
set -euo pipefail
prefix=cargo-tool
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

case ${1:-} in
  deny) crate=cargo-deny version=0.20.2 flags=(--no-default-features) ;;
  cyclonedx) crate=cargo-cyclonedx version=0.5.9 flags=() ;;
  *) usage; exit 2 ;;
esac
cache_root=${LEADERGROUP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/leadergroup-operator}
root=$cache_root/tools/$crate-$version
if [[ ! -x $root/bin/$crate ]]; then
  say "building $crate $version into $root (once)"
  build=$(mktemp -d)
  trap 'rm -rf "$build"' EXIT
  CARGO_TARGET_DIR=$build nice -n 10 cargo install "$crate" --version "$version" --locked \
    "${flags[@]}" --root "$root" --quiet >&2
fi
echo "$root/bin/$crate"
