#!/usr/bin/env bash
# Builds Helm 3 from the module pinned in helm3/go.mod into a cache outside the clone keyed by
# that pin, and prints the bin folder holding `helm` (v3). A second run with the same pin finds the
# cache and returns at once. The control plane's helm (controlplane/build.sh) is Helm 4; the
# chart test (tests/it/chart.rs) installs, upgrades and uninstalls the chart with both, this one
# named by LEADERGROUP_HELM3 (the Makefile's `it` target sets it).
# LEADERGROUP_NO_BUILD=1: never build; exit 3 when the binary is missing.
#
#   charts/tests/helm3.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
module=$here/helm3

version=$(awk '$1 == "require" && $2 == "helm.sh/helm/v3" { print $3 }' "$module/go.mod")
[[ -n $version ]] || { echo "helm3: no helm.sh/helm/v3 pin in $module/go.mod" >&2; exit 2; }
key=$(cat "$module/go.mod" "$module/go.sum" "$0" | sha256sum | cut -c1-12)
cache_root=${LEADERGROUP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/leadergroup-operator}
bin=$cache_root/tools/helm-$version-$key/bin

if [[ ! -x $bin/helm ]]; then
  if [[ -n ${LEADERGROUP_NO_BUILD:-} ]]; then
    echo "helm3: not built yet ($bin/helm missing): run charts/tests/helm3.sh" >&2
    exit 3
  fi
  echo "helm3: building helm $version (first build: modules are downloaded, then compiled)" >&2
  start=$SECONDS
  mkdir -p "$bin"
  tmp=$(mktemp -d "$bin/.build.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  (cd "$module" && CGO_ENABLED=0 nice -n 10 go build -trimpath \
    -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$version" \
    -o "$tmp/helm" helm.sh/helm/v3/cmd/helm)
  mv "$tmp/helm" "$bin/helm"
  echo "helm3: built helm $version in $((SECONDS - start)) s" >&2
fi
echo "$bin"
