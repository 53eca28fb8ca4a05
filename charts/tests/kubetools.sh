#!/usr/bin/env bash
# Builds the chart's offline validators, kubeconform and kube-score, from the Go modules pinned in
# kubetools/go.mod into a cache outside the clone keyed by those pins, and prints the bin folder
# (holding both). A second run with the same pins finds the cache and returns at once.
# LEADERGROUP_NO_BUILD=1: never build; exit 3 when a binary is missing.
#
#   charts/tests/kubetools.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
module=$here/kubetools

key=$(cat "$module/go.mod" "$module/go.sum" "$0" | sha256sum | cut -c1-12)
cache_root=${LEADERGROUP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/leadergroup-operator}
bin=$cache_root/tools/kubetools-$key/bin

build() { # build NAME PACKAGE
  local name=$1 pkg=$2
  [[ ! -x $bin/$name ]] || return 0
  if [[ -n ${LEADERGROUP_NO_BUILD:-} ]]; then
    echo "kubetools: $name not built yet ($bin/$name missing): run charts/tests/kubetools.sh" >&2
    exit 3
  fi
  echo "kubetools: building $name from $pkg (first build: modules are downloaded, then compiled)" >&2
  local start=$SECONDS
  mkdir -p "$bin"
  (cd "$module" && CGO_ENABLED=0 nice -n 10 go build -trimpath -ldflags "-s -w" -o "$bin/$name.tmp" "$pkg")
  mv "$bin/$name.tmp" "$bin/$name"
  echo "kubetools: built $name in $((SECONDS - start)) s" >&2
}
build kubeconform github.com/yannh/kubeconform/cmd/kubeconform
build kube-score github.com/zegl/kube-score/cmd/kube-score
echo "$bin"
