#!/usr/bin/env bash
# Builds one of Prometheus's commands from the Go module pinned in charts/tests/COMMAND/go.mod, into
# a cache outside the clone keyed by that pin, and prints the binary's path. A second run with the
# same pin finds the cache and returns at once.
#   promtool    `promtool test rules` unit-tests the chart's alerts (make check).
#   prometheus  the server of the end-to-end alert test (make e2e), with only the Kubernetes
#               service discovery compiled in (Prometheus's remove_all_sd build tags): it scrapes
#               the operator's pods on the local cluster, and the cloud SDKs would double the build.
# LEADERGROUP_NO_BUILD=1: never build; exit 3 when the binary is missing.
#
#   charts/tests/prometheus-build.sh promtool|prometheus
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
command=${1:?usage: prometheus-build.sh promtool|prometheus}
case $command in
  promtool) tags="" ;;
  prometheus) tags="remove_all_sd,enable_kubernetes_sd" ;;
  *) echo "prometheus-build.sh: unknown command '$command' (promtool or prometheus)" >&2; exit 2 ;;
esac
module=$here/$command

version=$(awk '$1 == "github.com/prometheus/prometheus" { print $2 }' "$module/go.mod")
[[ -n $version ]] || { echo "$command: no github.com/prometheus/prometheus pin in $module/go.mod" >&2; exit 2; }
key=$(cat "$module/go.mod" "$module/go.sum" "$0" | sha256sum | cut -c1-12)
cache_root=${LEADERGROUP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/leadergroup-operator}
bin=$cache_root/tools/$command-$version-$key/bin

if [[ ! -x $bin/$command ]]; then
  if [[ -n ${LEADERGROUP_NO_BUILD:-} ]]; then
    echo "$command: not built yet ($bin/$command missing): run charts/tests/prometheus-build.sh $command" >&2
    exit 3
  fi
  echo "$command: building $version (first build takes minutes: modules are downloaded, then compiled)" >&2
  start=$SECONDS
  mkdir -p "$bin"
  (cd "$module" && CGO_ENABLED=0 nice -n 10 go build -tags "$tags" -trimpath -ldflags "-s -w" \
    -o "$bin/$command.tmp" "github.com/prometheus/prometheus/cmd/$command")
  mv "$bin/$command.tmp" "$bin/$command"
  echo "$command: built in $((SECONDS - start)) s" >&2
fi
echo "$bin/$command"
