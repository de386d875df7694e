#!/usr/bin/env bash
# The traffic part of `make demo` (after e2e/demo.sh): a weighted canary with
# real HTTP requests through a real Gateway API implementation, then a canary
# that fails while it serves, and the automatic rollback.
#   e2e/demo-traffic.sh     (cluster "${DEMO_CLUSTER:-demo}-traffic", stopped after)
# A local cluster whose Service ClusterIPs are on loopback (127.96.0.0/16), the
# Gateway API CRDs, Traefik (its Gateway provider, sending to a Service's
# ClusterIP), a Gateway, the operator, and a ReleasePlan with one routed
# component: the operator owns its stable and canary Services and the
# HTTPRoute whose weights follow the steps. kwok's pods run nothing, so
# e2e/demo-backends.py stands in for kube-proxy and the pods: it watches
# Services, EndpointSlices and Pods, and on each Service's ClusterIP:port
# answers with the revision of one of its ready endpoints (503 without one).
# e2e/demo-load.py sends 50 requests a second through the Gateway and prints
# the responses per revision each second. Every request
# stays on 127.0.0.0/8. Fails (non-zero) when anything does not converge in
# time; stops everything it started.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=e2e/lib.sh
. e2e/lib.sh
# shellcheck source=e2e/demo-notify.sh
. e2e/demo-notify.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/releaseplan/cargo-target}"
NAME="${DEMO_CLUSTER:-demo}-traffic"
RUN="$(cluster_dir "$NAME")"
NS=default

say() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }

say "traffic demo: building Traefik and fetching the Gateway API CRDs (cached after the first run)"
e2e/build-control-plane.sh all
e2e/build-control-plane.sh traefik
cargo build --quiet --bin releaseplan --bin kubectl-releaseplan
BIN="$CARGO_TARGET_DIR/debug"

PIDS=()
cleanup() {
  status=$?
  trap - EXIT INT TERM # once, also when a signal's exit would run EXIT again
  local p
  for p in "${PIDS[@]}"; do
    if kill "$p" 2>/dev/null; then wait "$p" 2>/dev/null || true; fi
  done
  say "stopping the cluster '$NAME'"
  e2e/cluster-down.sh "$NAME" || true
  exit "$status"
}
trap cleanup EXIT INT TERM

# wait_for WHAT SECONDS CMD...: runs CMD every half second until it succeeds;
# fails the demo when it has not after SECONDS.
wait_for() {
  local what=$1 secs=$2 i
  shift 2
  for ((i = 0; i < secs * 2; i++)); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.5
  done
  die "$what: not within ${secs}s (logs in $RUN)"
}

say "starting a local cluster '$NAME' with Service ClusterIPs on loopback (127.96.0.0/16)"
RP_SERVICE_CIDR=127.96.0.0/16 e2e/cluster-up.sh "$NAME"
# shellcheck source=/dev/null  # written by cluster-up.sh
. "$RUN/env"
export PATH="$BIN:$PATH"
LOGS="$RUN/logs"

say "installing the CRDs: ReleasePlan, gate templates, and the Gateway API (v$GATEWAY_API_VERSION)"
kubectl apply --server-side -f crds/releaseplan.yaml -f crds/gatetemplates.yaml -f crds/componentscales.yaml >/dev/null
for f in "$GATEWAY_CRDS"/*.yaml; do kubectl apply --server-side -f "$f" >/dev/null; done
kubectl wait --for condition=Established --timeout 60s crd/releaseplans.releaseplan.io \
  crd/gatetemplates.releaseplan.io crd/clustergatetemplates.releaseplan.io \
  crd/gateways.gateway.networking.k8s.io crd/httproutes.gateway.networking.k8s.io

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
say "starting Traefik v$TRAEFIK_VERSION on 127.0.0.1:$PORT (log: $LOGS/traefik.log) and a Gateway"
"$TRAEFIK_BIN/traefik" --entryPoints.web.address="127.0.0.1:$PORT" \
  --providers.kubernetesgateway=true --providers.kubernetesgateway.nativeLBByDefault=true \
  --log.level=ERROR >"$LOGS/traefik.log" 2>&1 &
PIDS+=($!)
kubectl apply -f - <<YAML
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: traefik}
spec: {controllerName: traefik.io/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: $NS}
spec:
  gatewayClassName: traefik
  listeners: [{name: web, port: $PORT, protocol: HTTP, allowedRoutes: {namespaces: {from: Same}}}]
YAML
wait_for "the Gateway to be Programmed by Traefik" 60 \
  kubectl wait -n "$NS" --for condition=Programmed --timeout 1s gateway/gw

say "starting the backends (log: $LOGS/backends.log): on each loopback ClusterIP, an HTTP server answering with the revision of a ready endpoint"
python3 -u e2e/demo-backends.py "$NS" >"$LOGS/backends.log" 2>&1 &
PIDS+=($!)

say "notifications: a webhook receiver, the namespace's ConfigMap releaseplan-notifications and a Secret"
notify_start "$LOGS" "$NS"
PIDS+=("$NOTIFY_PID")

# Started after the Gateway API CRDs: the operator watches HTTPRoutes only
# when it can list them at start-up.
say "starting the operator (log: $LOGS/operator.log)"
# Single-tenant, in namespace default: as e2e/demo.sh says why (a required
# policy would also hold the HTTPRoute to the demo's Gateway).
"$BIN/releaseplan" --operator-namespace default --gate-policy optional \
  --metrics-addr 127.0.0.1:0 >"$LOGS/operator.log" 2>&1 &
PIDS+=($!)

# plan IMAGE [ANNOTATIONS]: the demo plan, one routed component "web".
plan() {
  cat <<YAML
apiVersion: releaseplan.io/v1alpha1
kind: ReleasePlan
metadata: {name: shop, namespace: $NS}
spec:
  components:
  - name: web
    replicas: 4
    template:
      metadata:
        labels: {app: shop}
        annotations: {${2:-}}
      spec:
        containers: [{name: web, image: "registry.example/shop-web:$1"}]
    traffic:
      port: 8080
      gatewayAPI: {parentRefs: [{name: gw}]}
  strategy:
    steps:
    - setWeight: 10
    - pause: {duration: 5s}
    - setWeight: 50
    - pause: {duration: 10s}
  health:
    progressDeadlineSeconds: 60
YAML
}

# apply_plan IMAGE [ANNOTATIONS]: applies the plan.
apply_plan() { plan "$@" | kubectl apply --server-side -f - >/dev/null; }

say "first release of shop-web 1.0 (4 replicas, routed through the Gateway)"
# The API server may need a moment before it serves a new resource.
wait_for "the API server to accept the ReleasePlan" 30 apply_plan 1.0
kubectl releaseplan wait shop --timeout 2m
URL="http://127.0.0.1:$PORT/"
wait_for "1.0 to answer through the Gateway" 60 curl -sf "$URL"
kubectl get svc,httproute -n "$NS" -l releaseplan.io/plan=shop
echo "GET $URL -> $(curl -s "$URL")   (1.0's revision hash, which the Services select)"
notify_show shop promoted

say "releasing 2.0: requests move 10% -> 50% -> 100% ('traffic' is status.trafficWeight, the share the operator set on the route)"
apply_plan 2.0
python3 -u e2e/demo-load.py "$URL" "$NS" shop Stable 180
kubectl releaseplan get shop
notify_show shop promoted

say "releasing 3.0, whose pods crash 10s after they start: the operator rolls back on its own"
apply_plan 3.0 '"kwok.releaseplan.io/crash-after": "10s"'
python3 -u e2e/demo-load.py "$URL" "$NS" shop RolledBack 180
kubectl releaseplan get shop
kubectl get rp shop -o jsonpath='failure: {.status.failure.gate} {.status.failure.reason}: {.status.failure.message}{"\n"}'
notify_show shop rolledBack

say "traffic demo done: 2.0 serves every request; 3.0 got up to half of them, then none, without a human"
