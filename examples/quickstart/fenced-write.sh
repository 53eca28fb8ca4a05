#!/bin/sh
# Writes KEY=VALUE into ConfigMap NAME of NAMESPACE as the leader holding fencing token EPOCH: the
# fence of the client crate's fence::replace_fenced, with kubectl (docs/fencing.md). Refused, exit
# 3, when EPOCH is lower than the highest token the ConfigMap has accepted (its annotation
# leadergroup.io/fence-epoch); the write carries EPOCH as the new highest, and is conditional on
# the version read, so that a write landing in between fails it rather than being overwritten.
# VALUE must not contain double quotes or backslashes.
#
#   examples/quickstart/fenced-write.sh NAMESPACE NAME EPOCH KEY=VALUE
set -eu
[ $# -eq 4 ] || { echo "usage: $0 NAMESPACE NAME EPOCH KEY=VALUE" >&2; exit 2; }
ns=$1 name=$2 epoch=$3 key=${4%%=*} value=${4#*=}
case $epoch in '' | *[!0-9]*) echo "EPOCH must be a number, not '$epoch'" >&2; exit 2 ;; esac
read -r version highest <<READ
$(kubectl get configmap -n "$ns" "$name" \
  -o jsonpath='{.metadata.resourceVersion} {.metadata.annotations.leadergroup\.io/fence-epoch}')
READ
if [ -n "${highest:-}" ] && [ "$epoch" -lt "$highest" ]; then
  echo "refused: token $epoch is lower than $highest, the highest $name has accepted" >&2
  exit 3
fi
kubectl patch configmap -n "$ns" "$name" --type merge -p "{
  \"metadata\": {\"resourceVersion\": \"$version\",
                 \"annotations\": {\"leadergroup.io/fence-epoch\": \"$epoch\"}},
  \"data\": {\"$key\": \"$value\"}}"
