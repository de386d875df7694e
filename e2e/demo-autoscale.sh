#!/usr/bin/env bash
# The autoscaling demo (`make demo` runs it last): a plan whose `web`
# component is autoscaled by an HPA the operator owns, over the real metrics
# pipeline of the local cluster (kwok's simulated kubelet metrics, scraped by
# metrics-server). Version 2.0 pauses at 50%; load comes; the real HPA
# scales the component from 2 to 6 in the middle of the canary, and the split
# is printed each second: both revisions grow, the step's share holds.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=e2e/lib.sh
. e2e/lib.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/releaseplan/cargo-target}"
NAME="${DEMO_CLUSTER:-demo}-autoscale"
RUN="$(cluster_dir "$NAME")"

say() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }

say "building the control plane (cached after the first run) and the operator"
e2e/build-control-plane.sh all
cargo build --quiet --bin releaseplan --bin kubectl-releaseplan
BIN="$CARGO_TARGET_DIR/debug"

OP_PID=""
cleanup() {
  status=$?
  if [ -n "$OP_PID" ] && kill "$OP_PID" 2>/dev/null; then
    wait "$OP_PID" 2>/dev/null || true
  fi
  say "stopping the cluster"
  e2e/cluster-down.sh "$NAME" || true
  exit "$status"
}
trap cleanup EXIT INT TERM

say "starting a local cluster '$NAME' (with metrics-server over kwok's simulated kubelet metrics)"
e2e/cluster-up.sh "$NAME"
# shellcheck source=/dev/null  # written by cluster-up.sh
. "$RUN/env"
export PATH="$BIN:$PATH"

kubectl apply --server-side -f crds/releaseplan.yaml -f crds/gatetemplates.yaml -f crds/componentscales.yaml >/dev/null
kubectl wait --for condition=Established --timeout 60s \
  crd/releaseplans.releaseplan.io crd/componentscales.releaseplan.io >/dev/null

# The simulated CPU usage of every container in the default namespace.
usage() {
  kubectl apply --server-side --force-conflicts -f - >/dev/null <<YAML
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterResourceUsage
metadata: {name: demo-autoscale}
spec:
  selector: {matchNamespaces: [default]}
  usages:
    - usage: {cpu: {value: $1}, memory: {value: 16Mi}}
YAML
}
usage 10m

say "starting the operator (log: $RUN/operator.log)"
# Single-tenant, in namespace default: as e2e/demo.sh says why.
"$BIN/releaseplan" --operator-namespace default --gate-policy optional \
  --metrics-addr 127.0.0.1:0 >"$RUN/operator.log" 2>&1 &
OP_PID=$!

say "first release of examples/autoscaled.yaml: web autoscaled (HPA 2..6 at 50% CPU), api fixed at 2"
for _ in $(seq 20); do kubectl apply --server-side -f examples/autoscaled.yaml && break; sleep 0.5; done
kubectl releaseplan wait shop --timeout 3m
kubectl get componentscale shop-web
kubectl get hpa shop-web

say "releasing web 2.0: the canary pauses at 50% for a human"
kubectl patch rp shop --type json -p '[
  {"op": "replace", "path": "/spec/components/0/template/spec/containers/0/image", "value": "registry.example/shop-web:2.0"}]'
for _ in $(seq 120); do
  [ "$(kubectl get rp shop -o jsonpath='{.status.currentStep}')" = 1 ] && break
  sleep 1
done
kubectl releaseplan get shop

# web's split, once: total the HPA asked for, then each revision's ready/wanted.
split() {
  kubectl get rp shop -o jsonpath='{range .status.components[?(@.name=="web")]}total {.replicas}  new {.currentReady}/{.currentReplicas} ready  stable {.stableReady}/{.stableReplicas} ready{end}'
}

say "load comes (each pod at 100% of its CPU request): the HPA scales web in the paused canary"
usage 100m
start=$(date +%s)
last=""
while :; do
  now=$(( $(date +%s) - start ))
  line=$(split)
  printf '  t=%3ss  web %s\n' "$now" "$line"
  case "$line" in "total 6  new 3/3 ready  stable 3/3 ready") break ;; esac
  [ "$now" -lt 180 ] || die "web did not reach 6 (3 and 3) within 180s; last: $line"
  last=$line
  sleep 1
done
: "$last"
kubectl get hpa shop-web
kubectl releaseplan get shop

say "promoting: the new revision takes the autoscaled 6 (no drop to minReplicas)"
kubectl releaseplan promote shop
kubectl releaseplan wait shop --timeout 3m
printf '  web %s\n' "$(split)"
kubectl releaseplan list

say "demo done: the HPA scaled web from 2 to 6 during the canary, the split held, promotion kept 6"
