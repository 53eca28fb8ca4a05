#!/usr/bin/env bash
# Builds the client-go benchmark peer into a cache outside the clone, keyed by its sources (as
# controlplane/build.sh does), and prints the binary's path. A second run returns at once.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
key=$(cat "$here/go.mod" "$here/go.sum" "$here/main.go" "$here/build.sh" | sha256sum | cut -c1-12)
cache_root=${LEADERGROUP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/leadergroup-operator}
bin="$cache_root/bench/client-go-v0.37.2-$key/leadergroup-bench-client-go"
if [[ ! -x $bin ]]; then
  echo "bench: building the client-go peer (modules from the Go module proxy)" >&2
  mkdir -p "$(dirname "$bin")"
  (cd "$here" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$bin.tmp" .)
  mv "$bin.tmp" "$bin"
fi
echo "$bin"
