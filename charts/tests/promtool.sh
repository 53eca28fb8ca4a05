#!/usr/bin/env bash
# Builds promtool (`promtool test rules` unit-tests the chart's alerts) from the Prometheus Go
# module pinned in promtool/go.mod, into a cache outside the clone keyed by that pin, and prints
# the binary's path. A second run with the same pin finds the cache and returns at once.
# LEADERGROUP_NO_BUILD=1: never build; exit 3 when the binary is missing.
#
#   charts/tests/promtool.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
module=$here/promtool

version=$(awk '$1 == "github.com/prometheus/prometheus" { print $2 }' "$module/go.mod")
[[ -n $version ]] || { echo "promtool: no github.com/prometheus/prometheus pin in $module/go.mod" >&2; exit 2; }
key=$(cat "$module/go.mod" "$module/go.sum" "$0" | sha256sum | cut -c1-12)
cache_root=${LEADERGROUP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/leadergroup-operator}
bin=$cache_root/tools/promtool-$version-$key/bin

if [[ ! -x $bin/promtool ]]; then
  if [[ -n ${LEADERGROUP_NO_BUILD:-} ]]; then
    echo "promtool: not built yet ($bin/promtool missing): run charts/tests/promtool.sh" >&2
    exit 3
  fi
  echo "promtool: building $version (first build takes minutes: modules are downloaded, then compiled)" >&2
  start=$SECONDS
  mkdir -p "$bin"
  (cd "$module" && CGO_ENABLED=0 nice -n 10 go build -trimpath -ldflags "-s -w" \
    -o "$bin/promtool.tmp" github.com/prometheus/prometheus/cmd/promtool)
  mv "$bin/promtool.tmp" "$bin/promtool"
  echo "promtool: built in $((SECONDS - start)) s" >&2
fi
echo "$bin/promtool"
