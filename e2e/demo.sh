#!/usr/bin/env bash
# The main demo (`make demo`): a local cluster, the operator, and a ReleasePlan
# of two components that is rolled out step by step, then rolled out broken
# and rolled back by the operator on its own; then a config-only release
# that fails its smoke test and is rolled back, the pods back on their
# revision's config. The notifications the operator sends (a webhook
# receiver on 127.0.0.1) are printed as they arrive. Stops everything it started.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=e2e/lib.sh
. e2e/lib.sh
# shellcheck source=e2e/demo-notify.sh
. e2e/demo-notify.sh
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
  notify_stop
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

say "notifications: a webhook receiver, the namespace's ConfigMap releaseplan-notifications and a Secret"
notify_start "$RUN"

say "starting the operator (log: $RUN/operator.log)"
# Run by hand, the operator must be told its namespace (the chart's pod gets
# it from POD_NAMESPACE), and its gate policy defaults to the chart's
# `required`: this one-person cluster runs it single-tenant, as
# `gatePolicy.singleTenant: true` does (docs/security.md, "Gate policy").
# Config released with the code in the demo's namespace (the default grants
# it nowhere: --config-namespaces, the chart's config.namespaces).
"$BIN/releaseplan" --operator-namespace default --gate-policy optional \
  --config-namespaces=default --metrics-addr 127.0.0.1:0 >"$RUN/operator.log" 2>&1 &
OP_PID=$!

say "first release of examples/demo.yaml: straight to full scale"
# The API server may need a moment before it serves a new resource.
for _ in $(seq 20); do kubectl apply --server-side -f examples/demo.yaml && break; sleep 0.5; done
kubectl releaseplan wait shop --timeout 3m
kubectl releaseplan get shop
kubectl get rp shop
notify_show shop promoted

say "releasing version 2.0 of both components: canary steps 34% -> 67% -> 100%"
kubectl patch rp shop --type json -p '[
  {"op": "replace", "path": "/spec/components/0/template/spec/containers/0/image", "value": "registry.example/shop-frontend:2.0"},
  {"op": "replace", "path": "/spec/components/1/template/spec/containers/0/image", "value": "registry.example/shop-api:2.0"}]'
kubectl releaseplan wait shop --timeout 3m
kubectl releaseplan get shop
notify_show shop promoted

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
notify_show shop rolledBack
kubectl get events --field-selector involvedObject.name=shop --sort-by=.metadata.creationTimestamp \
  -o custom-columns=TYPE:.type,REASON:.reason,MESSAGE:.message | tail -n 12

# What each revision Deployment of plan $1 reads: its ConfigMap (the
# revision's own copy) and the GREETING in it.
show_config() {
  kubectl get deploy -l "releaseplan.io/plan=$1" \
    -o jsonpath='{range .items[*]}{.metadata.name} {.spec.replicas} {.spec.template.spec.containers[0].envFrom[0].configMapRef.name}{"\n"}{end}' |
  while read -r dep replicas cm; do
    greeting=$(kubectl get configmap "$cm" -o jsonpath='{.data.GREETING}')
    printf '  %-34s replicas %s  reads configmap/%-24s GREETING=%s\n' "$dep" "$replicas" "$cm" "$greeting"
  done
}

say "config released with the code: plan 'greeter' reads ConfigMap greeter-config (GREETING=hello)"
kubectl apply --server-side -f - <<'YAML'
apiVersion: v1
kind: ConfigMap
metadata: {name: greeter-config}
data: {GREETING: hello}
---
apiVersion: releaseplan.io/v1alpha1
kind: ReleasePlan
metadata: {name: greeter}
spec:
  components:
    - name: web
      replicas: 2
      template:
        metadata: {labels: {app: greeter}}
        spec:
          containers:
            - name: web
              image: registry.example/greeter:1.0
              envFrom: [{configMapRef: {name: greeter-config}}]
  strategy:
    steps: [{setWeight: 50}, {pause: {duration: 2s}}]
  health:
    gates:
      - name: smoke
        job:
          template:
            spec:
              template:
                metadata:
                  # kwok finishes the smoke test's pod: it passes after 1s.
                  annotations: {kwok.releaseplan.io/job-succeed-after: 1s}
                spec:
                  containers: [{name: smoke, image: registry.example/smoke:1}]
YAML
kubectl releaseplan wait greeter --timeout 3m
kubectl releaseplan get greeter
echo "what the pods read: the operator's immutable copy, not greeter-config itself"
show_config greeter
notify_show greeter promoted

say "a config-only release (GREETING=bonjour) whose smoke test fails: rolled back, config included"
# The smoke test of this release fails (kwok fails its pod after 2s); the
# plan's template does not change: only the ConfigMap does.
kubectl patch rp greeter --type json -p '[{"op": "replace",
  "path": "/spec/health/gates/0/job/template/spec/template/metadata/annotations",
  "value": {"kwok.releaseplan.io/job-fail-after": "2s"}}]'
kubectl create configmap greeter-config --from-literal=GREETING=bonjour \
  --dry-run=client -o yaml | kubectl apply --server-side --force-conflicts -f -
set +e
kubectl releaseplan wait greeter --timeout 3m
code=$?
set -e
if [ "$code" -ne 2 ]; then
  echo "expected the config release to be rolled back (wait exit code 2), got $code" >&2
  exit 1
fi
echo "kubectl releaseplan wait exited $code: rolled back, as expected"
echo "greeter-config (as git wrote it) says: GREETING=$(kubectl get configmap greeter-config -o jsonpath='{.data.GREETING}')"
echo "what the pods read after the rollback:"
show_config greeter
stable_reads=$(show_config greeter | awk '$3 != "0" {print $NF}')
if [ "$stable_reads" != "GREETING=hello" ]; then
  echo "expected the serving revision to read GREETING=hello, got: $stable_reads" >&2
  exit 1
fi
kubectl releaseplan history greeter
notify_show greeter rolledBack

say "demo done: version 2.0 serves at full scale, 3.0 was rolled back without a human, and so was the bad config"
