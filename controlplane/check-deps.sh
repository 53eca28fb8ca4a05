#!/usr/bin/env bash
# Installs what `make check` needs beyond Rust and the pinned control plane, when missing: the
# linter `shellcheck` (`make lint` checks every shell script with it) and python3's PyYAML (the
# chart's static tests read rendered YAML with it, and make docs-check the member Roles). The
# linter from Debian's package; PyYAML with pip first (right for whichever python3 is first on
# PATH), Debian's python3-yaml when pip cannot.
# As root or with sudo. Idempotent: with both present it changes nothing and says so.
#
#   controlplane/check-deps.sh
set -euo pipefail
prefix=check-deps
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

have_yaml() { python3 -c 'import yaml' 2>/dev/null; }
versions() {
  echo "shellcheck $(shellcheck --version | sed -n 's/^version: //p'), PyYAML $(python3 -c 'import yaml; print(yaml.__version__)')"
}

if command -v shellcheck >/dev/null && have_yaml; then
  say "all present: $(versions)"
  exit 0
fi
command -v apt-get >/dev/null || die "missing shellcheck or PyYAML, and no apt-get: install them by hand"
sudo=()
[[ $(id -u) == 0 ]] || sudo=(sudo)

export DEBIAN_FRONTEND=noninteractive
updated=""
apt_install() {
  # An index older than a day (or none: a fresh machine) is refreshed first, once.
  if [[ -z $updated && -z $(find /var/lib/apt/lists -maxdepth 1 -name '*_Packages' -mmin -1440 -print -quit 2>/dev/null) ]]; then
    "${sudo[@]}" apt-get update -qq >&2 || die "apt-get update failed"
  fi
  updated=1
  say "installing $* (Debian)"
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends "$@" >&2 || die "apt-get install $* failed"
}

command -v shellcheck >/dev/null || apt_install shellcheck
if ! have_yaml; then
  python3 -m pip install --quiet pyyaml 2>/dev/null || apt_install python3-yaml
  have_yaml || die "PyYAML installed, but python3 ($(command -v python3)) cannot import yaml"
fi
say "installed: $(versions)"
