# Helpers the project's shell scripts share; sourced, never run. Messages carry the script's name
# (its `prefix`), the flag loops share their checks, and cluster.sh and realcluster.sh share their
# process bookkeeping.
#
#   prefix=cluster                                        # messages read `cluster: ...`
#   # shellcheck source=lib.sh
#   source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"        # ../controlplane/lib.sh from elsewhere
#
# build.sh and node-build.sh keep their own `say`: their cache keys hash their own text, so an
# edit there would rebuild the whole pinned control plane on every machine.
# shellcheck shell=bash
# The variables these helpers read (prefix, say_fd, dir) are set by the sourcing script, where a
# check of this file on its own cannot see them:
# shellcheck disable=SC2154

# ---- messages ----
# say MESSAGE: `prefix: MESSAGE` on stderr, or on the descriptor in say_fd (the demo narrates on
# stdout). die MESSAGE: `prefix: error: MESSAGE` on stderr, then exit 1.
say() { echo "${prefix:?set prefix before sourcing lib.sh}: $*" >&"${say_fd:-2}"; }
die() {
  echo "${prefix:?set prefix before sourcing lib.sh}: error: $*" >&2
  exit 1
}

# usage: the calling forms in the script's header comment (its `#   path/name.sh ...` lines), on
# stderr. Read from the header so that usage and the comment never disagree.
usage() {
  awk 'NR > 1 && !/^#/ { exit } /^#   [^ ]+\.sh( |$)/ { sub(/^# */, ""); print }' "$0" >&2
}

# ---- flag loops ----
# In a script's `while (($#)); do case $1 in ... esac; done`:
#   --dir) need_value "$@"; dir=$2; shift 2 ;;
#   -h | --help) usage; exit 0 ;;
#   *) bad_arg "$1" ;;
# need_value FLAG REST...: dies (with the usage) unless FLAG is followed by a non-empty value.
need_value() {
  (($# >= 2)) && [[ -n $2 ]] && return 0
  usage
  die "$1 needs a value"
}
bad_arg() {
  usage
  die "unknown argument $1"
}

# ---- processes (cluster.sh, realcluster.sh): a pid file per process in $dir ----
# running PID: the process exists and is not a zombie (an orphan's exit may be reaped late by
# pid 1, and kill -0 succeeds on a zombie).
running() { kill -0 "$1" 2>/dev/null && [[ $(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) != Z ]]; }

# alive NAME: the process in $dir/NAME.pid runs and is ours (its command line names $dir, so a
# recycled pid of an unrelated process is never taken for it, nor killed).
alive() {
  local pid
  pid=$(cat "$dir/$1.pid" 2>/dev/null) || return 1
  [[ -n $pid ]] && running "$pid" && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -F -- "$dir/" >/dev/null
}

# spawn NAME ARGS...: detached (own session, stdin closed, output to $dir/NAME.log); the pid file
# is written by the process itself before exec, so it is right whether or not setsid forks.
spawn() {
  local name=$1 i
  shift
  # The pid file of an earlier run of NAME (a node stopped and started again) would pass the wait
  # below at once, before the new process wrote its own: `alive` would then find the old pid
  # dead, and the caller start NAME a second time, the first copy running on untracked.
  rm -f "$dir/$name.pid"
  # shellcheck disable=SC2016 # the inner shell expands $$, $1 and $@: its own pid and arguments
  setsid bash -c 'echo $$ >"$1"; shift; exec "$@"' spawn "$dir/$name.pid" "$@" </dev/null >"$dir/$name.log" 2>&1 9>&- &
  for ((i = 0; i < 50; i++)); do
    [[ -s $dir/$name.pid ]] && return
    sleep 0.02
  done
  die "$name did not start"
}

# lock: serialises concurrent runs on one $dir. Children must not inherit fd 9 (spawn closes it),
# or a long-lived process such as etcd would hold the lock for its whole life.
lock() {
  exec 9>"$dir/.lock"
  flock 9
}

# only_lock_left: $dir holds nothing but the lock file (a folder `wipe` may remove though it
# lacks the script's marker).
only_lock_left() { [[ -z $(find "$dir" -mindepth 1 -maxdepth 1 ! -name .lock -print -quit) ]]; }
