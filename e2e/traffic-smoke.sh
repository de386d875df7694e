#!/usr/bin/env bash
# The traffic layer's data plane, by hand: a cluster whose Service ClusterIPs
# are on loopback, the Gateway API CRDs, Traefik (its Gateway provider, with
# native Kubernetes load balancing: to a Service's ClusterIP, not its pods),
# a stable and a canary Service each answered by a tiny server bound to its
# ClusterIP, and an HTTPRoute splitting 80/20 with a header route to the
# canary. Prints the responses per Service. Not part of `make test`.
#   e2e/traffic-smoke.sh            (cluster "traffic", stopped after)
# Why ClusterIPs and not pod IPs: the API server refuses EndpointSlices with
# loopback addresses ("may not be in the loopback range"), so "pods" on a
# loopback pod CIDR never become endpoints; ClusterIPs on loopback are
# accepted, and every request stays on 127.0.0.0/8.
set -euo pipefail
# shellcheck source=e2e/lib.sh
. "$(dirname "$0")/lib.sh"
NAME=traffic
"$E2E_DIR/build-control-plane.sh" traefik
RP_SERVICE_CIDR=127.96.0.0/16 "$E2E_DIR/cluster-up.sh" "$NAME"
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  "$E2E_DIR/cluster-down.sh" "$NAME" >/dev/null 2>&1 || true
}
trap cleanup EXIT
# shellcheck disable=SC1090,SC1091
. "$RUN_ROOT/$NAME/env"
for f in "$GATEWAY_CRDS"/*.yaml; do kubectl apply --server-side -f "$f" >/dev/null; done
kubectl wait --for=condition=Established --timeout=60s crd/httproutes.gateway.networking.k8s.io >/dev/null
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
kubectl create namespace smoke >/dev/null
kubectl apply -f - >/dev/null <<YAML
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: traefik}
spec: {controllerName: traefik.io/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: smoke}
spec:
  gatewayClassName: traefik
  listeners: [{name: web, port: $PORT, protocol: HTTP, allowedRoutes: {namespaces: {from: Same}}}]
---
apiVersion: v1
kind: Service
metadata: {name: stable, namespace: smoke}
spec: {selector: {app: web, rev: a}, ports: [{port: 8080}]}
---
apiVersion: v1
kind: Service
metadata: {name: canary, namespace: smoke}
spec: {selector: {app: web, rev: b}, ports: [{port: 8080}]}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: web, namespace: smoke}
spec:
  parentRefs: [{name: gw}]
  rules:
  - backendRefs: [{name: stable, port: 8080, weight: 80}, {name: canary, port: 8080, weight: 20}]
  - matches: [{headers: [{name: x-canary, value: "true"}]}]
    backendRefs: [{name: canary, port: 8080}]
YAML
serve() { # serve IP NAME: answer NAME on IP:8080
  python3 -c '
import http.server, sys
ip, name = sys.argv[1], sys.argv[2].encode()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Length", str(len(name))); self.end_headers(); self.wfile.write(name)
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer((ip, 8080), H).serve_forever()' "$1" "$2" &
  PIDS+=($!)
}
for svc in stable canary; do
  ip=$(kubectl -n smoke get svc "$svc" -o jsonpath='{.spec.clusterIP}')
  [[ "$ip" == 127.* ]] || die "ClusterIP $ip of $svc is not on loopback"
  serve "$ip" "$svc"
done
"$TRAEFIK_BIN/traefik" --entryPoints.web.address="127.0.0.1:$PORT" \
  --providers.kubernetesgateway=true --providers.kubernetesgateway.nativeLBByDefault=true \
  --log.level=ERROR >"$RUN_ROOT/$NAME/logs/traefik.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 60); do
  [ "$(curl -s -o /dev/null -w '%{http_code}' "127.0.0.1:$PORT/")" = 200 ] && break
  sleep 1
done
log "200 requests, weights stable 80 / canary 20:"
for _ in $(seq 200); do curl -s "127.0.0.1:$PORT/"; echo; done | sort | uniq -c
log "20 requests with x-canary: true:"
for _ in $(seq 20); do curl -s -H 'x-canary: true' "127.0.0.1:$PORT/"; echo; done | sort | uniq -c
