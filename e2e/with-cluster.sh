#!/usr/bin/env bash
# shellcheck disable=SC2317  # finish and stop_child run from traps
# Runs a command against a fresh local cluster and always stops it after:
#   e2e/with-cluster.sh NAME -- CMD [ARGS...]
# The command sees KUBECONFIG (and the other variables of the cluster's env
# file). When the start or the command fails, the tail of each component's
# log is printed. With RP_KUBECONFIG set, the command runs against that
# already running cluster instead, which is neither started nor stopped.
# The cluster is of Kubernetes K8S_VERSION (e2e/versions.env's default unless
# set); the command sees the version asked for as RP_K8S_VERSION, which
# tests/it/cluster.rs compares with the API server's /version.
set -euo pipefail
# shellcheck source=e2e/lib.sh
. "$(dirname "$0")/lib.sh"

if [ $# -lt 3 ] || [ "$2" != "--" ]; then die "usage: $0 NAME -- CMD [ARGS...]"; fi
NAME=$1
shift 2
export K8S_VERSION RP_K8S_VERSION="$K8S_VERSION"

if [ -n "${RP_KUBECONFIG:-}" ]; then
  log "using the running cluster of RP_KUBECONFIG=$RP_KUBECONFIG (Kubernetes $K8S_VERSION asked for)"
  export KUBECONFIG="$RP_KUBECONFIG"
  exec "$@"
fi

DIR="$(cluster_dir "$NAME")"
finish() {
  local rc=$?
  trap - EXIT INT TERM
  if [ "$rc" -ne 0 ]; then
    log "failed (exit $rc): component logs of cluster '$NAME' follow"
    tail_logs "$DIR"
  fi
  "$E2E_DIR/cluster-down.sh" "$NAME" || rc=1
  exit "$rc"
}
trap finish EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

"$E2E_DIR/cluster-up.sh" "$NAME"
# shellcheck source=/dev/null
. "$DIR/env"

# The command runs in its own process group, waited for in the background so
# that INT/TERM reach the traps at once; they stop the whole group (cargo and
# the test binaries) before the cluster goes down.
setsid "$@" &
child=$!
stop_child() {
  kill -TERM -- "-$child" 2>/dev/null || true
  wait "$child" 2>/dev/null || true
  exit "$1"
}
trap 'stop_child 130' INT
trap 'stop_child 143' TERM
rc=0
wait "$child" || rc=$?
exit "$rc"
