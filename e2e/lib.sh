# shellcheck shell=bash disable=SC2034  # variables are used by the sourcing scripts
# Shared helpers for the e2e scripts. Source it; it sets no shell options.
E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=e2e/versions.env
. "$E2E_DIR/versions.env"
RP_CACHE="${RP_CACHE:-$HOME/.cache/releaseplan}"
K8S_BIN="$RP_CACHE/k8s-v$K8S_VERSION/bin"
ETCD_BIN="$RP_CACHE/etcd-v$ETCD_VERSION/bin"
KWOK_BIN="$RP_CACHE/kwok-v$KWOK_VERSION/bin"
HELM_BIN="$RP_CACHE/helm-v$HELM_VERSION/bin"
RP_TOOLS_PATH="$K8S_BIN:$ETCD_BIN:$KWOK_BIN:$HELM_BIN"
log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }
REPO_ROOT="$(cd "$E2E_DIR/.." && pwd)"
RUN_ROOT="${RP_RUN_DIR:-$REPO_ROOT/.e2e-run}"

# cluster_dir NAME: the run dir of a cluster; refuses names that are not plain.
cluster_dir() {
  [[ "${1:-}" =~ ^[a-z0-9][a-z0-9-]*$ ]] || die "cluster name must match [a-z0-9][a-z0-9-]*, got '${1:-}'"
  printf '%s/%s\n' "$RUN_ROOT" "$1"
}

# tail_logs DIR: the end of each component's log, for a failed start or test.
tail_logs() {
  local f
  for f in "$1"/logs/*.log; do
    [ -f "$f" ] || continue
    printf '\n===== %s (last 25 lines) =====\n' "$f" >&2
    tail -n 25 "$f" >&2
  done
}
