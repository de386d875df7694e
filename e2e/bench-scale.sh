#!/usr/bin/env bash
# Scale benchmark of one controller on a fresh cluster (benches/scale.rs):
#   e2e/bench-scale.sh releaseplan|argo N [JSON]
# The cluster (named bench-rp or bench-argo) gets fake nodes for the pods of N
# objects, a rollout of 10% and N plain Deployments of the floor, the
# controller-manager and scheduler API rates and syncs raised (their defaults
# of 20 requests per second and 5 syncs would bound every controller alike),
# and an audit log of the controller's writes. It is stopped after the run.
# The table goes to stdout; with JSON, the figures are written there too.
# Needs: the control plane built, and for releaseplan RP_OPERATOR_BIN (a
# release build), for argo the Argo Rollouts build (build-control-plane.sh
# argo-rollouts). Not part of `make test`.
set -euo pipefail
# shellcheck source=e2e/lib.sh
. "$(dirname "$0")/lib.sh"

[ $# -ge 2 ] || die "usage: $0 releaseplan|argo N [JSON]"
CONTROLLER=$1 N=$2 JSON=${3:-}
[[ "$N" =~ ^[1-9][0-9]*$ ]] || die "N must be a positive number, got '$N'"
case "$CONTROLLER" in
  releaseplan)
    NAME=bench-rp FLOOR=${RP_BENCH_FLOOR:-1}
    [ -x "${RP_OPERATOR_BIN:-}" ] || die "RP_OPERATOR_BIN must name the operator binary (a release build)"
    # `cargo bench` (below) writes its own build of the operator (the bench
    # profile: opt-level 3, twice the code) to target/release, the path
    # `make bench-scale` gives: the run measures a copy of what was given.
    bin_dir=$(mktemp -d)
    trap 'rm -rf "$bin_dir"' EXIT
    bin_copy=$bin_dir/$(basename "$RP_OPERATOR_BIN")
    cp "$RP_OPERATOR_BIN" "$bin_copy"
    log "operator: $RP_OPERATOR_BIN, $(stat -c %s "$bin_copy") bytes, sha256 $(sha256sum "$bin_copy" | cut -c1-16)"
    export RP_OPERATOR_BIN=$bin_copy ;;
  argo)
    NAME=bench-argo FLOOR=${RP_BENCH_FLOOR:-0}
    [ -x "$ARGO_BIN/rollouts-controller" ] || die "run 'e2e/build-control-plane.sh argo-rollouts' first"
    export RP_ARGO_BIN="$ARGO_BIN/rollouts-controller"
    export RP_ARGO_CRDS="$RP_CACHE/argo-rollouts-v$ARGO_ROLLOUTS_VERSION/crds" ;;
  *) die "usage: $0 releaseplan|argo N [JSON]" ;;
esac

# Pods at most: 2 per object, +1 per rolled object during its canary, and
# the floor's 2 per Deployment; 500 per fake node, with room to spare.
pods=$(( 2 * N + N / 10 + (FLOOR == 1 ? 2 * N : 0) ))
export RP_NODES=$(( pods / 400 + 1 )) RP_NODE_PODS=500
# Room for 500 pods of RP_BENCH_TEMPLATE=production (300m CPU and 320Mi each).
export RP_NODE_CPU=${RP_NODE_CPU:-160} RP_NODE_MEMORY=${RP_NODE_MEMORY:-256Gi}
export RP_KCM_QPS=${RP_KCM_QPS:-500} RP_KCM_BURST=${RP_KCM_BURST:-1000} RP_KCM_SYNCS=${RP_KCM_SYNCS:-20}
export RP_SCHED_QPS=${RP_SCHED_QPS:-500} RP_SCHED_BURST=${RP_SCHED_BURST:-1000}
export RP_AUDIT_USER=bench-controller
export RP_BENCH_CONTROLLER=$CONTROLLER RP_BENCH_N=$N RP_BENCH_FLOOR=$FLOOR
if [ -n "$JSON" ]; then
  mkdir -p "$(dirname "$JSON")"
  RP_BENCH_JSON="$(cd "$(dirname "$JSON")" && pwd)/$(basename "$JSON")"
  export RP_BENCH_JSON
fi

log "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) before the run"
log "cluster $NAME: $RP_NODES nodes of $RP_NODE_PODS pods, $RP_NODE_CPU CPUs, $RP_NODE_MEMORY; kcm qps/burst $RP_KCM_QPS/$RP_KCM_BURST," \
  "syncs $RP_KCM_SYNCS; scheduler qps/burst $RP_SCHED_QPS/$RP_SCHED_BURST"
cd "$REPO_ROOT"
# RP_BENCH_HARNESS: a harness built before (`cargo bench --bench scale
# --no-run` prints its path), so a run does not rebuild it, or wait for a
# build beside it to finish.
if [ -n "${RP_BENCH_HARNESS:-}" ]; then
  "$E2E_DIR/with-cluster.sh" "$NAME" -- "$RP_BENCH_HARNESS" --bench
else
  "$E2E_DIR/with-cluster.sh" "$NAME" -- cargo bench --bench scale
fi
log "load average $(cut -d' ' -f1-3 /proc/loadavg) after the run"
