#!/usr/bin/env bash
# Installs PostgreSQL's server binaries from Debian's packages when they are missing (the tests of
# the SQL fence start private servers with them: testenv/src/postgres.rs). Idempotent. The
# package's own cluster service is kept from starting: a policy-rc.d refuses it during the
# install (nothing on this machine should listen on 5432 because of the tests), and the tests
# never use it.
set -euo pipefail

have() { compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null && compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null; }

if have; then
  echo "postgres-deps: $(ls -d /usr/lib/postgresql/*/bin | tail -n1) present"
  exit 0
fi
command -v apt-get >/dev/null || { echo "postgres-deps: no apt-get; install PostgreSQL's server (initdb, postgres) and set LEADERGROUP_POSTGRES_BIN" >&2; exit 1; }

sudo=()
[[ $(id -u) == 0 ]] || sudo=(sudo)
policy=/usr/sbin/policy-rc.d
added_policy=""
if [[ ! -e $policy ]]; then
  # 101: "action not allowed": invoke-rc.d starts no service while this file exists.
  printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee "$policy" >/dev/null
  "${sudo[@]}" chmod 755 "$policy"
  added_policy=1
fi
cleanup() { [[ -z $added_policy ]] || "${sudo[@]}" rm -f "$policy"; }
trap cleanup EXIT

export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq postgresql >/dev/null
have || { echo "postgres-deps: postgresql installed, but no /usr/lib/postgresql/*/bin/initdb" >&2; exit 1; }
echo "postgres-deps: installed $(ls -d /usr/lib/postgresql/*/bin | tail -n1)"
