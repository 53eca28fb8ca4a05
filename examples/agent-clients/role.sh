#!/bin/sh
# Follows this pod's role through the leadergroup-agent's long poll and runs a worker only while
# the pod leads and the agent's answer still holds (`validUntil`, Unix milliseconds on this
# node's clock: a paused agent answers nothing, so the last answer must stop by itself). POSIX sh
# and wget only (busybox has both; Debian's busybox 1.35 crashes on `wget -q` and `wget -T`,
# hence -O- with stderr dropped, and the poll timed here); no JSON tool: the agent's answer is
# one flat object, read with sed.
#
#   LEADERGROUP_AGENT=http://127.0.0.1:8686 examples/agent-clients/role.sh
agent=${LEADERGROUP_AGENT:-http://127.0.0.1:8686}
version= # the version of the last answer: the poll returns when the role's version differs
last=
worker=
until_ms= # while leader: the instant (Unix ms) from which the last answer no longer holds
answer_file=$(mktemp)

field() { # field NAME JSON: a string or number field of the agent's flat JSON object
  printf '%s' "$2" | sed -n "s/.*\"$1\":\"\{0,1\}\([^\",}]*\).*/\1/p"
}

now_ms() { # this node's clock in Unix milliseconds; where date lacks %N (busybox), the next
  # whole second: a validity then ends up to a second early, never late
  ns=$(date +%s%N)
  case $ns in
    *[!0-9]*) echo $((($(date +%s) + 1) * 1000)) ;;
    *) echo $((ns / 1000000)) ;;
  esac
}

stop_worker() {
  [ -n "$worker" ] && kill "$worker" 2>/dev/null
  worker=
}
poller=
trap 'stop_worker; [ -n "$poller" ] && kill "$poller" 2>/dev/null; rm -f "$answer_file"; exit 0' TERM INT

# poll: the agent's answer in $answer; fails when the agent does not answer, or when the last
# leader's answer stops holding first.
poll() {
  wget -O- "$agent/role?wait=$version&timeoutSeconds=60" >"$answer_file" 2>/dev/null &
  poller=$!
  while kill -0 "$poller" 2>/dev/null; do
    if [ -n "$until_ms" ] && [ "$(now_ms)" -ge "$until_ms" ]; then
      kill "$poller" 2>/dev/null
      wait "$poller" 2>/dev/null
      return 2
    fi
    sleep 0.1
  done
  wait "$poller" || return 1
  answer=$(cat "$answer_file")
}

while :; do
  poll
  case $? in
    0)
      role=$(field role "$answer")
      epoch=$(field epoch "$answer")
      valid_until=$(field validUntil "$answer")
      version=$(field version "$answer")
      ;;
    2) role=unknown epoch='' valid_until='' version='' ;; # the leader's answer stopped holding
    *) # A refused connection or a failed request: the agent is gone, so the role is unknown.
      role=unknown epoch='' valid_until='' version=''
      sleep 1
      ;;
  esac
  until_ms=
  if [ "$role" = leader ]; then
    case $valid_until in
      '' | *[!0-9]*) role=unknown ;;
      *) until_ms=$valid_until ;;
    esac
    # Answered, but no longer holds.
    [ -n "$until_ms" ] && [ "$(now_ms)" -ge "$until_ms" ] && role=unknown until_ms=
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
