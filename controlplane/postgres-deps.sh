#!/usr/bin/env bash
# Installs PostgreSQL's server binaries from Debian's packages when they are missing (the tests of
# the SQL fence start private servers with them: testenv/src/postgres.rs). Idempotent. The
# package's own cluster service is kept from starting: a policy-rc.d refuses it during the
# install (nothing on this machine should listen on 5432 because of the tests), and the tests
# never use it.
set -euo pipefail
# Progress on stdout, errors on stderr.
prefix=postgres-deps say_fd=1
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

have() { compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null && compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null; }
# The last bin folder in glob order (only called once have() found one).
bin_dir() { compgen -G '/usr/lib/postgresql/*/bin' | tail -n1; }

if have; then
  say "$(bin_dir) present"
  exit 0
fi
command -v apt-get >/dev/null || die "no apt-get; install PostgreSQL's server (initdb, postgres) and set LEADERGROUP_POSTGRES_BIN"

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
have || die "postgresql installed, but no /usr/lib/postgresql/*/bin/initdb"
say "installed $(bin_dir)"
