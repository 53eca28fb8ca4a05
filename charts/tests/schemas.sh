#!/usr/bin/env bash
# Prints a folder of kubeconform's JSON schemas for the Kubernetes version of a control plane's
# bin folder (build.sh's or build-oldest.sh's), generating it the first time: a private control
# plane (cluster.sh) is started for the seconds it takes to read its OpenAPI document
# (/openapi/v2), which json_schemas.py turns into one standalone strict schema per kind; then it is
# stopped. Cached outside the clone, keyed by the kube-apiserver's version and this script and the
# converter. The schemas are the API server's own: nothing is fetched from the network.
# LEADERGROUP_NO_BUILD=1: never generate; exit 3 when the folder is missing.
#
#   charts/tests/schemas.sh BIN_DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=${1:?usage: charts/tests/schemas.sh BIN_DIR}

version=$("$bin/kube-apiserver" --version | cut -d' ' -f2)
key=$(cat "$0" "$here/json_schemas.py" | sha256sum | cut -c1-12)
cache_root=${LEADERGROUP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/leadergroup-operator}
out=$cache_root/schemas/$version-$key

if [[ ! -f $out/.complete ]]; then
  if [[ -n ${LEADERGROUP_NO_BUILD:-} ]]; then
    echo "schemas: the schemas of $version are not generated yet: run charts/tests/schemas.sh $bin" >&2
    exit 3
  fi
  echo "schemas: generating the JSON schemas of $version from its kube-apiserver's OpenAPI (once)" >&2
  cluster=$(mktemp -d)
  trap '"$root/controlplane/cluster.sh" down --dir "$cluster" >&2; rm -rf "$cluster"' EXIT
  "$root/controlplane/cluster.sh" up --dir "$cluster" --bin-dir "$bin" --watch-pid $$ >&2
  "$bin/kubectl" --kubeconfig "$cluster/kubeconfig" get --raw /openapi/v2 >"$cluster/openapi-v2.json"
  rm -rf "$out"
  mkdir -p "$out"
  python3 "$here/json_schemas.py" openapi "$cluster/openapi-v2.json" "$out"
  touch "$out/.complete"
fi
echo "$out"
