#!/usr/bin/env bash
# Builds promtool and the Prometheus server from the Go module pinned in charts/tests/prometheus/go.mod,
# both in one `go build`, into a cache outside the clone keyed by that pin, and prints the path of
# the one asked for. A second run with the same pin finds the cache and returns at once.
#   promtool    `promtool check rules` and `test rules` on the chart's alerts (make check).
#   prometheus  the server of the end-to-end alert test (make e2e): it scrapes the operator's pods
#               on the local cluster.
# Both with only the Kubernetes service discovery compiled in (Prometheus's remove_all_sd build
# tags): neither use needs another, and promtool built without the tags compiles the cloud SDKs
# (AWS, Azure, OCI, GCE, Hetzner...) too: 1,126 packages instead of 884, most of its build time.
# One `go build` of both: one module graph loaded, and the two links side by side.
# LEADERGROUP_NO_BUILD=1: never build; exit 3 when the binary is missing.
#
#   charts/tests/prometheus-build.sh promtool|prometheus
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
command=${1:?usage: prometheus-build.sh promtool|prometheus}
case $command in
  promtool | prometheus) ;;
  *) echo "prometheus-build.sh: unknown command '$command' (promtool or prometheus)" >&2; exit 2 ;;
esac
module=$here/prometheus
tags=remove_all_sd,enable_kubernetes_sd

version=$(awk '$1 == "github.com/prometheus/prometheus" { print $2 }' "$module/go.mod")
[[ -n $version ]] || { echo "$command: no github.com/prometheus/prometheus pin in $module/go.mod" >&2; exit 2; }
key=$(cat "$module/go.mod" "$module/go.sum" "$0" | sha256sum | cut -c1-12)
cache_root=${LEADERGROUP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/leadergroup-operator}
bin=$cache_root/tools/prometheus-$version-$key/bin

if [[ ! -x $bin/promtool || ! -x $bin/prometheus ]]; then
  if [[ -n ${LEADERGROUP_NO_BUILD:-} ]]; then
    echo "$command: not built yet ($bin/$command missing): run charts/tests/prometheus-build.sh $command" >&2
    exit 3
  fi
  echo "prometheus-build: building promtool and prometheus $version (first build takes minutes: modules are downloaded, then compiled)" >&2
  start=$SECONDS
  mkdir -p "$bin"
  tmp=$(mktemp -d "$bin/.build.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  # -o a folder: each command's binary under its own name.
  (cd "$module" && CGO_ENABLED=0 nice -n 10 go build -tags "$tags" -trimpath -ldflags "-s -w" -o "$tmp/" \
    github.com/prometheus/prometheus/cmd/promtool github.com/prometheus/prometheus/cmd/prometheus)
  mv "$tmp/promtool" "$tmp/prometheus" "$bin/"
  echo "prometheus-build: built promtool and prometheus in $((SECONDS - start)) s" >&2
fi
echo "$bin/$command"
