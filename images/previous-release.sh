#!/usr/bin/env bash
# Builds the previous release, what the upgrade test (tests/e2e/upgrade.rs) installs before it
# upgrades to the working tree: the chart package and the operator and agent images (OCI archives)
# of the commit tagged PREVIOUS_RELEASE, each built by that commit's own scripts from its own
# sources (a `git archive` of the commit), once, into a cache outside the clone keyed by the
# commit; prints that folder (chart .tgz, operator.tar, agent.tar). The commit is pinned here as
# well as tagged: a clone without tags still finds it, and a tag moved elsewhere is refused.
# The release build takes the working tree's compiled dependencies where they match (hardlinked
# from target/release), so the first build compiles mostly the project's own crates.
# LEADERGROUP_NO_BUILD=1: never build; exit 3 when the cache lacks it.
#
#   images/previous-release.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
prefix=previous-release
# shellcheck source=../controlplane/lib.sh
source "$repo/controlplane/lib.sh"

PREVIOUS_RELEASE=v0.1.0
PREVIOUS_COMMIT=5686267988f7120b7bf022446fee49eb0749b514

if tagged=$(git -C "$repo" rev-parse -q --verify "refs/tags/$PREVIOUS_RELEASE^{commit}"); then
  [[ $tagged == "$PREVIOUS_COMMIT" ]] || die "tag $PREVIOUS_RELEASE is $tagged, not the release's commit $PREVIOUS_COMMIT"
fi
cache_root=${LEADERGROUP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/leadergroup-operator}
out=$cache_root/releases/$PREVIOUS_RELEASE-${PREVIOUS_COMMIT:0:12}

if [[ ! -f $out/.complete ]]; then
  [[ -z ${LEADERGROUP_NO_BUILD:-} ]] || { say "$PREVIOUS_RELEASE is not built yet: run images/previous-release.sh"; exit 3; }
  git -C "$repo" cat-file -e "$PREVIOUS_COMMIT^{commit}" 2>/dev/null ||
    die "commit $PREVIOUS_COMMIT ($PREVIOUS_RELEASE) is not in this clone (git fetch it, or clone with history)"
  say "building $PREVIOUS_RELEASE (${PREVIOUS_COMMIT:0:12}) into $out (once: a release build of its operator and agent)"
  start=$SECONDS
  rm -rf "$out"
  mkdir -p "$out"
  # The sources and their build, kept until the release is complete: an interrupted first build
  # goes on where it stopped.
  src=$cache_root/releases/.build-$PREVIOUS_RELEASE-${PREVIOUS_COMMIT:0:12}
  if [[ ! -f $src/.extracted ]]; then
    rm -rf "$src"
    mkdir -p "$src"
    git -C "$repo" archive "$PREVIOUS_COMMIT" | tar -x -C "$src"
    touch "$src/.extracted"
  fi
  if [[ -d $repo/target/release/deps && ! -d $src/target/release/deps ]]; then
    mkdir -p "$src/target/release"
    cp -al "$repo/target/release/deps" "$src/target/release/"
    cp -a "$repo/target/release/build" "$repo/target/release/.fingerprint" "$src/target/release/" 2>/dev/null || true
  fi
  (cd "$src" && export CARGO_INCREMENTAL=0 &&
    nice -n 10 cargo build --release --locked --bin leadergroup-operator >&2 &&
    nice -n 10 cargo build --release --locked -p leadergroup-agent --bin leadergroup-agent >&2)
  "$src/images/build.sh" operator agent >&2
  cp "$src/target/images/operator.tar" "$src/target/images/agent.tar" "$out/"
  "$("$repo/controlplane/build.sh")/helm" package "$src/charts/leadergroup-operator" --destination "$out" >&2
  rm -rf "$src"
  touch "$out/.complete"
  say "built $PREVIOUS_RELEASE in $((SECONDS - start)) s"
fi
echo "$out"
