# shellcheck shell=bash disable=SC2034  # variables are used by the sourcing scripts
# Shared helpers for the e2e scripts. Source it; it sets no shell options.
E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=e2e/versions.env
. "$E2E_DIR/versions.env"
RP_CACHE="${RP_CACHE:-$HOME/.cache/releaseplan}"
K8S_BIN="$RP_CACHE/k8s-v$K8S_VERSION/bin"
ETCD_BIN="$RP_CACHE/etcd-v$ETCD_VERSION/bin"
KWOK_BIN="$RP_CACHE/kwok-v$KWOK_VERSION/bin"
# The CRDs of kwok's ClusterResourceUsage (and the other kinds), copied from its module.
KWOK_CRDS="$RP_CACHE/kwok-v$KWOK_VERSION/crd"
METRICS_SERVER_BIN="$RP_CACHE/metrics-server-v$METRICS_SERVER_VERSION/bin"
HELM_BIN="$RP_CACHE/helm-v$HELM_VERSION/bin"
KREW_BIN="$RP_CACHE/krew-v$KREW_VERSION/bin"
COSIGN_BIN="$RP_CACHE/cosign-v$COSIGN_VERSION/bin"
KYVERNO_CRDS="$RP_CACHE/kyverno-crds-v$KYVERNO_VERSION"
RP_HEALTH_BIN="$RP_CACHE/rp-health-v$RP_HEALTH_VERSION/bin"
ADAPTIVECARDS_DIR="$RP_CACHE/adaptivecards-v$ADAPTIVECARDS_VERSION"
ARGO_BIN="$RP_CACHE/argo-rollouts-v$ARGO_ROLLOUTS_VERSION/bin"
TRAEFIK_BIN="$RP_CACHE/traefik-v$TRAEFIK_VERSION/bin"
GATEWAY_CRDS="$RP_CACHE/gateway-api-crds-v$GATEWAY_API_VERSION"
INFERENCE_CRDS="$RP_CACHE/gateway-api-inference-extension-crds-v$INFERENCE_EXTENSION_VERSION"
TRAEFIK_CRDS="$RP_CACHE/traefik-crds-v$TRAEFIK_VERSION"
MONITORING_CRDS="$RP_CACHE/prometheus-operator-crds-v$PROMETHEUS_OPERATOR_VERSION"
RP_TOOLS_PATH="$K8S_BIN:$ETCD_BIN:$KWOK_BIN:$METRICS_SERVER_BIN:$HELM_BIN:$RP_HEALTH_BIN"
log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }
# A Kubernetes release, as the module proxy names it (k8s.io/kubernetes@vX.Y.Z):
# a version asked for in the environment is checked before anything is built.
for _k8s_var in K8S_VERSION K8S_OLDEST_VERSION; do
  [[ "${!_k8s_var}" =~ ^1\.[0-9]+\.[0-9]+$ ]] ||
    die "$_k8s_var must be a Kubernetes release such as 1.36.3, got '${!_k8s_var}'"
done
unset _k8s_var
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

# live_members PGID: live (non-zombie) processes of a process group.
live_members() { ps -e -o pid=,pgid=,stat= | awk -v g="$1" '$2 == g && $3 !~ /^Z/ { print $1 }'; }

# ---------------------------------------------------------------- components
# A cluster's components (etcd, kube-apiserver, ...) are started by
# cluster-up.sh, and kube-apiserver again by restart-apiserver.sh, through
# these. The command of component C is recorded in DIR/cmd/C, one argument
# per line, so that it is started again exactly the same way; "C PID" lines
# are in DIR/pids, which cluster-down.sh reads. Each component runs in its own
# session and process group (setsid: its pid is its group), so that
# cluster-down.sh can stop the whole group.

# record_component DIR C CMD...: records CMD as the command of component C.
record_component() {
  local dir=$1 comp=$2 arg
  shift 2
  for arg in "$@"; do
    [[ "$arg" != *$'\n'* ]] || die "$comp: an argument holds a newline, which cannot be recorded"
  done
  mkdir -p "$dir/cmd"
  printf '%s\n' "$@" >"$dir/cmd/$comp"
}

# start_component DIR C: starts the recorded command of component C detached
# (setsid, stdin /dev/null, output appended to DIR/logs/C.log) and records its
# pid in DIR/pids, in place of an earlier pid of C.
start_component() {
  local dir=$1 comp=$2
  local -a argv
  [ -s "$dir/cmd/$comp" ] || die "no recorded command for $comp in $dir/cmd"
  mapfile -t argv <"$dir/cmd/$comp"
  mkdir -p "$dir/logs"
  # 7>&- 8>&-: cluster-up.sh keeps its stdout and stderr there (see its EXIT
  # trap); a component must not hold them open (a pipe would never close).
  setsid "${argv[@]}" >>"$dir/logs/$comp.log" 2>&1 </dev/null 7>&- 8>&- &
  set_component_pid "$dir" "$comp" "$!"
}

# set_component_pid DIR C PID: the "C PID" line of DIR/pids, replaced in
# place (the order is the stop order, reversed) or appended.
set_component_pid() {
  local dir=$1 comp=$2 pid=$3
  [ -f "$dir/pids" ] || : >"$dir/pids"
  awk -v c="$comp" -v p="$pid" '$1 == c { if (!done) print c, p; done = 1; next } { print }
    END { if (!done) print c, p }' "$dir/pids" >"$dir/pids.new"
  mv "$dir/pids.new" "$dir/pids"
}

# component_pid DIR C: the recorded pid of component C (empty if none).
component_pid() { awk -v c="$2" '$1 == c { print $2; exit }' "$1/pids" 2>/dev/null || true; }

# api_get DIR URL PATH: GET URL/PATH as the cluster's admin (client cert).
api_get() {
  curl -sf --cacert "$1/pki/ca.crt" --cert "$1/pki/admin.crt" --key "$1/pki/admin.key" "$2$3"
}

# api_create DIR URL PATH FILE: POSTs the one YAML object of FILE to URL/PATH
# as the cluster's admin; succeeds when it is created or already exists.
api_create() {
  local code
  code=$(curl -s -o /dev/null -w '%{http_code}' --cacert "$1/pki/ca.crt" --cert "$1/pki/admin.crt" \
    --key "$1/pki/admin.key" -X POST -H 'Content-Type: application/yaml' --data-binary "@$4" "$2$3")
  [ "$code" = 201 ] || [ "$code" = 409 ]
}
