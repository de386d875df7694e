#!/usr/bin/env bash
# The main demo (`make demo`): a local cluster, the operator, and a ReleasePlan
# of two components that is rolled out step by step, then rolled out broken
# and rolled back by the operator on its own. Stops everything it started.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=e2e/lib.sh
. e2e/lib.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/releaseplan/cargo-target}"
NAME="${DEMO_CLUSTER:-demo}"
RUN="${RP_RUN_DIR:-$PWD/.e2e-run}/$NAME"

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

say "starting a local cluster '$NAME' (etcd, kube-apiserver, controller-manager, scheduler, kwok)"
e2e/cluster-up.sh "$NAME"
# shellcheck source=/dev/null  # written by cluster-up.sh
. "$RUN/env"
export PATH="$BIN:$PATH"   # kubectl finds kubectl-releaseplan as `kubectl releaseplan`

say "installing the CRDs (ReleasePlan, GateTemplate, ClusterGateTemplate)"
kubectl apply --server-side -f crds/releaseplan.yaml -f crds/gatetemplates.yaml -f crds/componentscales.yaml
for _ in $(seq 120); do
  est=$(kubectl get crd releaseplans.releaseplan.io \
    -o jsonpath='{.status.conditions[?(@.type=="Established")].status}' 2>/dev/null || true)
  [ "$est" = True ] && break
  sleep 0.5
done
[ "$est" = True ] || die "the CRD did not become Established"

say "starting the operator (log: $RUN/operator.log)"
"$BIN/releaseplan" --metrics-addr 127.0.0.1:0 >"$RUN/operator.log" 2>&1 &
OP_PID=$!

say "first release of examples/demo.yaml: straight to full scale"
# The API server may need a moment before it serves a new resource.
for _ in $(seq 20); do kubectl apply --server-side -f examples/demo.yaml && break; sleep 0.5; done
kubectl releaseplan wait shop --timeout 3m
kubectl releaseplan get shop
kubectl get rp shop

say "releasing version 2.0 of both components: canary steps 34% -> 67% -> 100%"
kubectl patch rp shop --type json -p '[
  {"op": "replace", "path": "/spec/components/0/template/spec/containers/0/image", "value": "registry.example/shop-frontend:2.0"},
  {"op": "replace", "path": "/spec/components/1/template/spec/containers/0/image", "value": "registry.example/shop-api:2.0"}]'
kubectl releaseplan wait shop --timeout 3m
kubectl releaseplan get shop

say "releasing a broken 3.0 frontend (its pods crash-loop): the operator rolls back on its own"
kubectl patch rp shop --type json -p '[
  {"op": "replace", "path": "/spec/components/0/template/spec/containers/0/image", "value": "registry.example/shop-frontend:3.0"},
  {"op": "add", "path": "/spec/components/0/template/metadata/annotations", "value": {"kwok.releaseplan.io/fault": "crash-loop"}}]'
set +e
kubectl releaseplan wait shop --timeout 3m
code=$?
set -e
if [ "$code" -ne 2 ]; then
  echo "expected the broken release to be rolled back (wait exit code 2), got $code" >&2
  exit 1
fi
echo "kubectl releaseplan wait exited $code: rolled back, as expected"
kubectl releaseplan get shop
kubectl releaseplan history shop
kubectl get events --field-selector involvedObject.name=shop --sort-by=.metadata.creationTimestamp \
  -o custom-columns=TYPE:.type,REASON:.reason,MESSAGE:.message | tail -n 12

say "demo done: version 2.0 serves at full scale, 3.0 was rolled back without a human"
