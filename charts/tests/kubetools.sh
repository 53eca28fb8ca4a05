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

if [[ ! -x $bin/kubeconform || ! -x $bin/kube-score ]]; then
  if [[ -n ${LEADERGROUP_NO_BUILD:-} ]]; then
    echo "kubetools: not built yet ($bin lacks kubeconform or kube-score): run charts/tests/kubetools.sh" >&2
    exit 3
  fi
  echo "kubetools: building kubeconform and kube-score (first build: modules are downloaded, then compiled)" >&2
  start=$SECONDS
  mkdir -p "$bin"
  tmp=$(mktemp -d "$bin/.build.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  # One `go build` of both (-o a folder: each under its own name): one module graph loaded, the
  # two links side by side.
  (cd "$module" && CGO_ENABLED=0 nice -n 10 go build -trimpath -ldflags "-s -w" -o "$tmp/" \
    github.com/yannh/kubeconform/cmd/kubeconform github.com/zegl/kube-score/cmd/kube-score)
  mv "$tmp/kubeconform" "$tmp/kube-score" "$bin/"
  echo "kubetools: built kubeconform and kube-score in $((SECONDS - start)) s" >&2
fi
echo "$bin"
