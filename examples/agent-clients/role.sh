#!/bin/sh
# Follows this pod's role through the leadergroup-agent's long poll and runs a worker only while
# the pod leads. POSIX sh and wget only (busybox has both; Debian's busybox 1.35 crashes on
# `wget -q` and `wget -T`, hence -O- with stderr dropped, and no timeout but the poll's own); no
# JSON tool: the agent's answer is one flat object, read with sed.
#
#   LEADERGROUP_AGENT=http://127.0.0.1:8686 examples/agent-clients/role.sh
agent=${LEADERGROUP_AGENT:-http://127.0.0.1:8686}
version= # the version of the last answer: the poll returns when the role's version differs
last=
worker=

field() { # field NAME JSON: a string or number field of the agent's flat JSON object
  printf '%s' "$2" | sed -n "s/.*\"$1\":\"\{0,1\}\([^\",}]*\).*/\1/p"
}

stop_worker() {
  [ -n "$worker" ] && kill "$worker" 2>/dev/null
  worker=
}
trap 'stop_worker; exit 0' TERM INT

while :; do
  # A refused connection or a failed request: the agent is gone, so the role is unknown.
  if answer=$(wget -O- "$agent/role?wait=$version&timeoutSeconds=60" 2>/dev/null); then
    role=$(field role "$answer")
    epoch=$(field epoch "$answer")
    version=$(field version "$answer")
  else
    role=unknown epoch='' version=''
    sleep 1
  fi
  [ "$role" = leader ] || epoch=
  [ "$role $epoch" = "$last" ] && continue
  last="$role $epoch"
  echo "role=$role epoch=$epoch"
  # Stop first: anything but leader means stop acting now, including unknown.
  stop_worker
  if [ "$role" = leader ]; then
    # The worker presents $epoch to every write it makes (see the book's Fencing writes).
    (while :; do sleep 5; done) &
    worker=$!
  fi
done
