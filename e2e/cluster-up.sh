#!/usr/bin/env bash
# Starts a local control plane on 127.0.0.1: etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kwok with 3 fake nodes, and
# metrics-server (the metrics.k8s.io API, from kwok's simulated resource
# usage: tests/it/support/metrics.rs sets it).
#   e2e/cluster-up.sh NAME      (state in ${RP_RUN_DIR:-<repo>/.e2e-run}/NAME)
# Of Kubernetes K8S_VERSION (e2e/versions.env's default unless set in the
# environment), whose binaries e2e/build-control-plane.sh built with the same
# K8S_VERSION; the env file exports it as RP_K8S_VERSION.
# Options for scale benchmarks (environment; unset = the defaults the tests use):
#   RP_NODES, RP_NODE_PODS     fake nodes (3) and pods each can hold (500)
#   RP_NODE_CPU, RP_NODE_MEMORY  what each fake node can allocate (64, 256Gi)
#   RP_KCM_QPS, RP_KCM_BURST   kube-controller-manager API rate (its default 20/30)
#   RP_KCM_SYNCS               its concurrent Deployment and ReplicaSet syncs (5)
#   RP_SCHED_QPS, RP_SCHED_BURST  kube-scheduler API rate (its default 50/100)
#   RP_SERVICE_CIDR            Service ClusterIPs (127.96.0.0/16, on loopback:
#                              the traffic tests serve them; see
#                              docs/control-plane.md)
#   RP_POD_CIDR                pod IPs kwok assigns (10.244.0.0/16)
#   RP_AUDIT_USER=NAME         a client identity NAME (system:masters) with its
#                              kubeconfig in pki/NAME.kubeconfig, and an audit
#                              log (logs/audit.log) of NAME's writes only: the
#                              writes of any controller counted the same way
# Every port is picked free, so several clusters can run at once. A cluster
# already running under NAME is stopped first. Stop it with cluster-down.sh.
# A start that fails or is interrupted stops everything it started (EXIT trap).
set -euo pipefail
# shellcheck source=e2e/lib.sh
. "$(dirname "$0")/lib.sh"

NAME="${1:-dev}"
DIR="$(cluster_dir "$NAME")"
# ClusterIPs on loopback: the traffic tests (tests/it/support/traffic.rs) serve
# HTTP on them, and Traefik sends to them, so every request stays on
# 127.0.0.0/8. Pod IPs cannot carry test traffic: the API server refuses
# loopback EndpointSlice addresses.
SERVICE_CIDR="${RP_SERVICE_CIDR:-127.96.0.0/16}"
[[ "$SERVICE_CIDR" =~ ^([0-9]+\.[0-9]+\.[0-9]+)\.([0-9]+)/[0-9]+$ ]] ||
  die "RP_SERVICE_CIDR must be an IPv4 CIDR, got '$SERVICE_CIDR'"
# The first address of the range: the ClusterIP of Service default/kubernetes,
# named in the API server's certificate.
KUBERNETES_SERVICE_IP="${BASH_REMATCH[1]}.$(( BASH_REMATCH[2] + 1 ))"
POD_CIDR="${RP_POD_CIDR:-10.244.0.0/16}"
NODES="${RP_NODES:-3}"
NODE_PODS="${RP_NODE_PODS:-500}"
NODE_CPU="${RP_NODE_CPU:-64}"
NODE_MEMORY="${RP_NODE_MEMORY:-256Gi}"
AUDIT_USER="${RP_AUDIT_USER:-}"
[[ "$NODES" =~ ^[1-9][0-9]*$ ]] || die "RP_NODES must be a positive number, got '$NODES'"
[[ "$NODE_PODS" =~ ^[1-9][0-9]*$ ]] || die "RP_NODE_PODS must be a positive number, got '$NODE_PODS'"
[[ "$NODE_CPU" =~ ^[1-9][0-9]*$ ]] || die "RP_NODE_CPU must be a positive number of cores, got '$NODE_CPU'"
[[ "$NODE_MEMORY" =~ ^[1-9][0-9]*(Mi|Gi|Ti)$ ]] || die "RP_NODE_MEMORY must be like 256Gi, got '$NODE_MEMORY'"
[ -z "$AUDIT_USER" ] || [[ "$AUDIT_USER" =~ ^[a-z0-9][a-z0-9-]*$ ]] ||
  die "RP_AUDIT_USER must match [a-z0-9][a-z0-9-]*, got '$AUDIT_USER'"
# Extra flags of the controller manager and the scheduler, only when asked for.
KCM_EXTRA=() SCHED_EXTRA=() API_EXTRA=()
[ -z "${RP_KCM_QPS:-}" ] || KCM_EXTRA+=(--kube-api-qps "$RP_KCM_QPS")
[ -z "${RP_KCM_BURST:-}" ] || KCM_EXTRA+=(--kube-api-burst "$RP_KCM_BURST")
[ -z "${RP_KCM_SYNCS:-}" ] ||
  KCM_EXTRA+=(--concurrent-deployment-syncs "$RP_KCM_SYNCS" --concurrent-replicaset-syncs "$RP_KCM_SYNCS")
[ -z "${RP_SCHED_QPS:-}" ] || SCHED_EXTRA+=(--kube-api-qps "$RP_SCHED_QPS")
[ -z "${RP_SCHED_BURST:-}" ] || SCHED_EXTRA+=(--kube-api-burst "$RP_SCHED_BURST")

for b in "$ETCD_BIN/etcd" "$K8S_BIN/kube-apiserver" "$K8S_BIN/kube-controller-manager" \
  "$K8S_BIN/kube-scheduler" "$K8S_BIN/kubectl" "$KWOK_BIN/kwok" "$METRICS_SERVER_BIN/metrics-server"; do
  [ -x "$b" ] || die "$b is missing: run 'make tools' (e2e/build-control-plane.sh)"
done
command -v openssl >/dev/null || die "openssl is not installed"
command -v curl >/dev/null || die "curl is not installed"

[ -e "$DIR/pids" ] && "$E2E_DIR/cluster-down.sh" "$NAME"
start_ns=$(date +%s%N)
rm -rf "$DIR"
mkdir -p "$DIR/logs" "$DIR/pki" "$DIR/etcd-data" "$DIR/kwok" "$DIR/metrics"
chmod 700 "$DIR/pki" "$DIR/etcd-data"

# From here on, any failure (a wait that times out, a component that exits, a
# failed command under set -e) and Ctrl-C or SIGTERM stop everything started so
# far: cluster-down.sh stops what the pids file records, kills any process of
# the pinned binaries that still names the run dir (one started but not yet
# recorded), and frees the ports. Disarmed once the cluster is up.
# A signal can run the trap while a command's output goes to /dev/null (bash
# runs it in the middle of `until CMD >/dev/null`): the trap writes to the
# original stdout and stderr, kept as fds 7 and 8 (not passed to components).
exec 7>&1 8>&2
on_exit() {
  local rc=$?
  exec 1>&7 2>&8
  trap - EXIT INT TERM
  [ "$rc" -ne 0 ] || rc=1
  if [ "$rc" -ge 128 ]; then
    log "cluster-up of '$NAME' interrupted (exit $rc): stopping what it started"
  else
    log "cluster-up of '$NAME' failed (exit $rc): component logs follow, then what it started is stopped"
    tail_logs "$DIR"
  fi
  "$E2E_DIR/cluster-down.sh" "$NAME" >&2 || log "error: cluster-down.sh '$NAME' failed too"
  exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---------------------------------------------------------------- ports
# Free ports below the ephemeral range, not bound now and not recorded by
# another cluster of this run root; a lock keeps two concurrent starts apart.
mkdir -p "$RUN_ROOT"
exec 9>"$RUN_ROOT/.ports.lock"
flock 9
used=" $(ss -Htan | awk '{n=split($4,a,":"); print a[n]}' | sort -u | tr '\n' ' ') "
used+=" $( (cat "$RUN_ROOT"/*/ports 2>/dev/null || true) | tr "\n" " ") "
# pick_port VAR: sets VAR to a port that is neither in use nor picked before.
pick_port() {
  local p
  while :; do
    p=$(( 10000 + (RANDOM * 32768 + RANDOM) % 22000 ))
    [[ "$used" == *" $p "* ]] || break
  done
  used+=" $p "
  printf -v "$1" '%s' "$p"
}
for v in ETCD_PORT ETCD_PEER_PORT API_PORT KCM_PORT SCHED_PORT KWOK_PORT METRICS_PORT; do pick_port "$v"; done
printf '%s\n' "$ETCD_PORT" "$ETCD_PEER_PORT" "$API_PORT" "$KCM_PORT" "$SCHED_PORT" "$KWOK_PORT" \
  "$METRICS_PORT" >"$DIR/ports"
flock -u 9
exec 9>&-

# ---------------------------------------------------------------- certificates
# EC P-256 keys (fast to make): a CA, the apiserver serving cert, one client
# cert per component and the service-account signing key pair.
PKI="$DIR/pki"
cat >"$PKI/openssl.cnf" <<CNF
[req]
distinguished_name = dn
prompt = no
[dn]
[ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign,digitalSignature
subjectKeyIdentifier = hash
[server]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1,IP:$KUBERNETES_SERVICE_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local
[client]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = clientAuth
[loopback]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1,DNS:localhost
[metrics_server]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1,DNS:localhost,DNS:metrics-server.kube-system.svc
CNF
newkey() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$PKI/$1.key" 2>/dev/null; }
# cert NAME SUBJECT EXTENSIONS: a key and a cert signed by the CA.
cert() {
  newkey "$1"
  openssl req -new -key "$PKI/$1.key" -subj "$2" -config "$PKI/openssl.cnf" |
    openssl x509 -req -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -set_serial "0x$(openssl rand -hex 8)" \
      -days 365 -extfile "$PKI/openssl.cnf" -extensions "$3" -out "$PKI/$1.crt" 2>/dev/null
}
newkey ca
openssl req -x509 -new -key "$PKI/ca.key" -subj "/CN=releaseplan-e2e-$NAME-ca" -days 365 \
  -config "$PKI/openssl.cnf" -extensions ca -out "$PKI/ca.crt"
cert apiserver "/CN=kube-apiserver" server
cert admin "/O=system:masters/CN=releaseplan-admin" client
# The controller manager runs as system:masters with its own credentials for
# every controller: making one service account and token per controller
# (--use-service-account-credentials) costs ~5s of startup here.
cert kube-controller-manager "/O=system:masters/CN=system:kube-controller-manager" client
cert kube-scheduler "/CN=system:kube-scheduler" client
cert kwok "/O=system:masters/CN=kwok" client
# kwok serves the nodes' kubelet endpoint (the simulated /metrics/resource)
# over TLS with this cert, checked by metrics-server against the CA; plain
# HTTP (its /healthz) still answers on the same port.
cert kwok-serving "/CN=kwok" loopback
# metrics-server: a client cert for the API server, and a serving cert for
# the aggregator, which checks it against the APIService's caBundle under
# the Service's name metrics-server.kube-system.svc.
cert metrics-server "/O=system:masters/CN=metrics-server" client
cert metrics-server-serving "/CN=metrics-server" metrics_server
cert front-proxy-client "/CN=front-proxy-client" client
newkey sa
openssl pkey -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub"
if [ -n "$AUDIT_USER" ]; then
  cert "$AUDIT_USER" "/O=system:masters/CN=$AUDIT_USER" client
  # Metadata of every write by that user, one line per finished request.
  cat >"$DIR/audit-policy.yaml" <<YAML
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  users: ["$AUDIT_USER"]
  verbs: [create, update, patch, delete, deletecollection]
- level: None
YAML
  API_EXTRA+=(--audit-policy-file "$DIR/audit-policy.yaml" --audit-log-path "$DIR/logs/audit.log"
    --audit-log-mode blocking --audit-log-format json)
fi

API_URL="https://127.0.0.1:$API_PORT"
b64() { base64 -w0 <"$1"; }
# kubeconfig FILE CERT: a kubeconfig for the client cert pki/CERT.{crt,key}.
kubeconfig() {
  cat >"$1" <<YAML
apiVersion: v1
kind: Config
clusters:
- name: $NAME
  cluster:
    server: $API_URL
    certificate-authority-data: $(b64 "$PKI/ca.crt")
users:
- name: $2
  user:
    client-certificate-data: $(b64 "$PKI/$2.crt")
    client-key-data: $(b64 "$PKI/$2.key")
contexts:
- name: $NAME
  context:
    cluster: $NAME
    user: $2
current-context: $NAME
YAML
}
kubeconfig "$DIR/kubeconfig" admin
for c in kube-controller-manager kube-scheduler kwok metrics-server ${AUDIT_USER:+"$AUDIT_USER"}; do
  kubeconfig "$PKI/$c.kubeconfig" "$c"
done

cat >"$DIR/env" <<ENV
# Source this file to use cluster '$NAME': . $DIR/env
export RP_CLUSTER_NAME=$NAME
export RP_K8S_VERSION=$K8S_VERSION
export RP_CLUSTER_DIR=$DIR
export KUBECONFIG=$DIR/kubeconfig
export RP_API_URL=$API_URL
export RP_API_PORT=$API_PORT
export RP_ETCD_PORT=$ETCD_PORT
export RP_ETCD_PEER_PORT=$ETCD_PEER_PORT
export RP_KCM_PORT=$KCM_PORT
export RP_SCHEDULER_PORT=$SCHED_PORT
export RP_KWOK_PORT=$KWOK_PORT
export RP_METRICS_SERVER_PORT=$METRICS_PORT
export RP_SERVICE_CIDR=$SERVICE_CIDR
export RP_POD_CIDR=$POD_CIDR
export RP_HEALTH=$RP_HEALTH_BIN/rp-health
export PATH=$RP_TOOLS_PATH:\$PATH
ENV
if [ -n "$AUDIT_USER" ]; then
  cat >>"$DIR/env" <<ENV
export RP_AUDIT_USER=$AUDIT_USER
export RP_AUDIT_KUBECONFIG=$PKI/$AUDIT_USER.kubeconfig
export RP_AUDIT_LOG=$DIR/logs/audit.log
ENV
fi

# ---------------------------------------------------------------- kwok stages
# The upstream stages, with pod-ready and pod-complete made to skip pods that
# carry the fault annotation (and pod-complete the Job pods that the
# job-finish stages end after a delay), plus the stages of e2e/kwok/.
STAGE_SRC="$KWOK_BIN/../stage"
# exclude FILE KEYS: FILE's stage, skipping pods annotated with any of the
# space-separated KEYS.
exclude() {
  local file=$1
  shift
  awk -v keys="$*" '{ print } /^    matchExpressions:$/ && !done {
    n = split(keys, k, " ")
    for (i = 1; i <= n; i++) {
      print "    - key: '"'"'.metadata.annotations[\"" k[i] "\"]'"'"'"
      print "      operator: '"'"'DoesNotExist'"'"'"
    }
    done = 1 }' "$file"
}
JOB_KEYS="kwok.releaseplan.io/job-succeed-after kwok.releaseplan.io/job-fail-after"
{
  for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
    pod/fast/pod-delete.yaml; do
    [ -f "$STAGE_SRC/$f" ] || die "kwok stage $STAGE_SRC/$f is missing: run 'make tools'"
    echo "---"; cat "$STAGE_SRC/$f"
  done
  for f in pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml; do
    [ -f "$STAGE_SRC/$f" ] || die "kwok stage $STAGE_SRC/$f is missing: run 'make tools'"
    keys=kwok.releaseplan.io/fault
    [ "$f" = pod/fast/pod-complete.yaml ] && keys="$keys $JOB_KEYS"
    echo "---"; exclude "$STAGE_SRC/$f" "$keys"
  done
  for f in "$E2E_DIR"/kwok/*.yaml; do echo "---"; cat "$f"; done
  # kwok's Metric of the module (kustomize/metrics/resource): a kubelet's
  # /metrics/resource for each node at /metrics/nodes/NODE/metrics/resource,
  # from the usage that the ClusterResourceUsage objects give the pods.
  [ -f "$KWOK_BIN/../metrics/resource/metrics-resource.yaml" ] ||
    die "kwok's metrics-resource.yaml is missing: run 'make tools'"
  echo "---"; cat "$KWOK_BIN/../metrics/resource/metrics-resource.yaml"
} >"$DIR/kwok/stages.yaml"
[ "$(grep -c 'kwok.releaseplan.io/fault"' "$DIR/kwok/stages.yaml")" -ge 2 ] ||
  die "could not add the fault exclusion to the upstream pod stages (layout changed?)"
[ "$(grep -c 'kwok.releaseplan.io/job-succeed-after"' "$DIR/kwok/stages.yaml")" -ge 2 ] ||
  die "could not add the Job exclusion to the upstream pod-complete stage (layout changed?)"

# ---------------------------------------------------------------- metrics
# The resource metrics pipeline: kwok serves each node's simulated kubelet
# /metrics/resource (the Metric above) from the usage of the
# ClusterResourceUsage objects (kwok.x-k8s.io/v1alpha1, cluster-scoped, read
# from the API: --enable-crds), which tests write per namespace
# (tests/it/support/metrics.rs); metrics-server scrapes it and serves
# metrics.k8s.io through the aggregator, for the HPA controller and
# `kubectl top`. The nodes' InternalIP is 127.0.0.1 and their kubelet port
# kwok's (--node-ip, --node-port), so metrics-server reaches kwok on loopback.
sed '1{/^---$/d}' "$KWOK_CRDS/kwok.x-k8s.io_clusterresourceusages.yaml" >"$DIR/metrics/kwok-crd.yaml"
# The aggregator reaches metrics-server through a Service of type
# ExternalName 127.0.0.1: without --enable-aggregator-routing (the default)
# it sends to externalName:port of the APIService, and checks the serving
# cert for metrics-server.kube-system.svc. A ClusterIP Service cannot work
# here (nothing serves on its ClusterIP), nor a selectorless one with a
# manual EndpointSlice (the API server refuses loopback endpoint addresses;
# and with --enable-aggregator-routing the aggregator refuses ExternalName).
cat >"$DIR/metrics/service.yaml" <<YAML
apiVersion: v1
kind: Service
metadata: {name: metrics-server, namespace: kube-system}
spec:
  type: ExternalName
  externalName: 127.0.0.1
  ports: [{name: https, port: $METRICS_PORT, protocol: TCP}]
YAML
cat >"$DIR/metrics/apiservice.yaml" <<YAML
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1beta1.metrics.k8s.io}
spec:
  group: metrics.k8s.io
  version: v1beta1
  groupPriorityMinimum: 100
  versionPriority: 100
  service: {name: metrics-server, namespace: kube-system, port: $METRICS_PORT}
  caBundle: $(b64 "$PKI/ca.crt")
YAML

# ---------------------------------------------------------------- processes
# Components are started through lib.sh (own process group, command recorded
# in $DIR/cmd/NAME, "NAME PID" lines in $DIR/pids), so that
# restart-apiserver.sh can start kube-apiserver again the very same way.
: >"$DIR/pids"
# launch NAME CMD...: records CMD as component NAME's command and starts it.
launch() { record_component "$DIR" "$@"; start_component "$DIR" "$1"; }
alive() { kill -0 "$(component_pid "$DIR" "$1")" 2>/dev/null; }
# fail MESSAGE: the EXIT trap prints the logs and stops everything.
fail() { log "error: $*"; exit 1; }
# wait_for WHAT SECONDS COMPONENT CMD...: polls CMD every 0.1s.
wait_for() {
  local what=$1 secs=$2 comp=$3; shift 3
  local deadline=$(( $(date +%s) + secs ))
  until "$@" >/dev/null 2>&1; do
    alive "$comp" || fail "$comp exited while waiting for $what (see $DIR/logs/$comp.log)"
    [ "$(date +%s)" -lt "$deadline" ] || fail "timed out after ${secs}s waiting for $what"
    sleep 0.1
  done
}
kubectl() { "$K8S_BIN/kubectl" --kubeconfig "$DIR/kubeconfig" "$@"; }

launch etcd "$ETCD_BIN/etcd" --name "$NAME" --data-dir "$DIR/etcd-data" \
  --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-cluster "$NAME=http://127.0.0.1:$ETCD_PEER_PORT" --unsafe-no-fsync --log-level warn

# --shutdown-watch-termination-grace-period: on SIGTERM the apiserver ends the
# open watches and exits within about a second; without it, it stops
# listening at once but then waits 60s for the controllers' watch connections
# (restart-apiserver.sh, cluster-down.sh).
launch kube-apiserver "$K8S_BIN/kube-apiserver" \
  --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
  --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$API_PORT" \
  --cert-dir "$DIR/pki" --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
  --client-ca-file "$PKI/ca.crt" \
  --requestheader-client-ca-file "$PKI/ca.crt" --requestheader-allowed-names front-proxy-client \
  --requestheader-username-headers X-Remote-User --requestheader-group-headers X-Remote-Group \
  --requestheader-extra-headers-prefix X-Remote-Extra- \
  --proxy-client-cert-file "$PKI/front-proxy-client.crt" --proxy-client-key-file "$PKI/front-proxy-client.key" \
  --authorization-mode Node,RBAC \
  --service-account-issuer https://kubernetes.default.svc.cluster.local \
  --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
  --service-cluster-ip-range "$SERVICE_CIDR" \
  --endpoint-reconciler-type none --shutdown-watch-termination-grace-period 2s \
  --allow-privileged --profiling=false --v 1 ${API_EXTRA[@]+"${API_EXTRA[@]}"}

wait_for "kube-apiserver /readyz" 90 kube-apiserver api_get "$DIR" "$API_URL" /readyz
api_ready_ms=$(( ($(date +%s%N) - start_ns) / 1000000 ))

# The HPA controller, tuned so that tests see it act within seconds: it syncs
# every 2s (default 15s). In a pod's first cpu-initialization-period (default
# 5m) it drops a CPU sample taken less than one metric window after the pod
# became Ready, and counts the pod as using nothing on a scale up; after
# that, the initial-readiness-delay (default 30s) decides whether a not
# Ready pod ever was: kwok pods are Ready at once, so with 1s each their
# first metrics count. An HPA without spec.behavior scales down 1s after a
# lower recommendation (downscale-stabilization, default 5m); tests set
# behavior on their HPAs anyway. Metrics still change only every 10s
# (metrics-server's least --metric-resolution).
KCM_HPA=(--horizontal-pod-autoscaler-sync-period 2s
  --horizontal-pod-autoscaler-cpu-initialization-period 1s
  --horizontal-pod-autoscaler-initial-readiness-delay 1s
  --horizontal-pod-autoscaler-downscale-stabilization 1s)
launch kube-controller-manager "$K8S_BIN/kube-controller-manager" \
  --kubeconfig "$PKI/kube-controller-manager.kubeconfig" \
  --authentication-kubeconfig "$PKI/kube-controller-manager.kubeconfig" \
  --authorization-kubeconfig "$PKI/kube-controller-manager.kubeconfig" \
  --bind-address 127.0.0.1 --secure-port "$KCM_PORT" --cert-dir "$DIR/pki/kcm" \
  --leader-elect=false --use-service-account-credentials=false \
  --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
  --cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
  --cluster-name "$NAME" --service-cluster-ip-range "$SERVICE_CIDR" \
  "${KCM_HPA[@]}" --profiling=false --v 1 ${KCM_EXTRA[@]+"${KCM_EXTRA[@]}"}

launch kube-scheduler "$K8S_BIN/kube-scheduler" \
  --kubeconfig "$PKI/kube-scheduler.kubeconfig" \
  --authentication-kubeconfig "$PKI/kube-scheduler.kubeconfig" \
  --authorization-kubeconfig "$PKI/kube-scheduler.kubeconfig" \
  --bind-address 127.0.0.1 --secure-port "$SCHED_PORT" --cert-dir "$DIR/pki/scheduler" \
  --leader-elect=false --profiling=false --v 1 ${SCHED_EXTRA[@]+"${SCHED_EXTRA[@]}"}

# Before kwok starts (the controller manager and the scheduler start
# meanwhile), so that its watch of ClusterResourceUsages finds the resource
# (it would retry otherwise, with back-off).
wait_for "kwok's ClusterResourceUsage CRD created" 30 kube-apiserver \
  api_create "$DIR" "$API_URL" /apis/apiextensions.k8s.io/v1/customresourcedefinitions "$DIR/metrics/kwok-crd.yaml"

launch kwok "$KWOK_BIN/kwok" --kubeconfig "$PKI/kwok.kubeconfig" --config "$DIR/kwok/stages.yaml" \
  --manage-all-nodes --cidr "$POD_CIDR" --node-lease-duration-seconds 40 \
  --server-address "127.0.0.1:$KWOK_PORT" --node-ip 127.0.0.1 --node-port "$KWOK_PORT" \
  --tls-cert-file "$PKI/kwok-serving.crt" --tls-private-key-file "$PKI/kwok-serving.key" \
  --enable-crds ClusterResourceUsage

# metrics-server: scrapes every node's kubelet endpoint from its status (kwok,
# above) at the path of its metrics.k8s.io/resource-metrics-path annotation,
# every 10s (the least it takes), and serves metrics.k8s.io to the
# aggregator. It authenticates the aggregator's requests with the
# requestheader settings the API server publishes (configmap
# kube-system/extension-apiserver-authentication) and authorizes them with
# SubjectAccessReviews. Default log level: at --v 1 it logs every pod
# without usage at every scrape.
launch metrics-server "$METRICS_SERVER_BIN/metrics-server" \
  --kubeconfig "$PKI/metrics-server.kubeconfig" \
  --authentication-kubeconfig "$PKI/metrics-server.kubeconfig" \
  --authorization-kubeconfig "$PKI/metrics-server.kubeconfig" \
  --bind-address 127.0.0.1 --secure-port "$METRICS_PORT" \
  --tls-cert-file "$PKI/metrics-server-serving.crt" --tls-private-key-file "$PKI/metrics-server-serving.key" \
  --kubelet-preferred-address-types InternalIP --kubelet-use-node-status-port \
  --kubelet-certificate-authority "$PKI/ca.crt" \
  --metric-resolution 10s --kubelet-request-timeout 5s --profiling=false

# Fake nodes: kwok manages every node; capacity for NODE_PODS pods each.
for i in $(seq 1 "$NODES"); do
  cat <<YAML
---
apiVersion: v1
kind: Node
metadata:
  name: kwok-node-$i
  annotations:
    kwok.x-k8s.io/node: fake
    node.alpha.kubernetes.io/ttl: "0"
    metrics.k8s.io/resource-metrics-path: /metrics/nodes/kwok-node-$i/metrics/resource
  labels:
    kubernetes.io/hostname: kwok-node-$i
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    type: kwok
status:
  allocatable: {cpu: "$NODE_CPU", memory: $NODE_MEMORY, pods: "$NODE_PODS"}
  capacity: {cpu: "$NODE_CPU", memory: $NODE_MEMORY, pods: "$NODE_PODS"}
YAML
done >"$DIR/kwok/nodes.yaml"
wait_for "fake nodes created" 30 kwok kubectl apply -f "$DIR/kwok/nodes.yaml"
# While the controllers start: metrics.k8s.io registered with the aggregator.
wait_for "the metrics.k8s.io Service" 30 kube-apiserver \
  api_create "$DIR" "$API_URL" /api/v1/namespaces/kube-system/services "$DIR/metrics/service.yaml"
wait_for "the metrics.k8s.io APIService" 30 kube-apiserver \
  api_create "$DIR" "$API_URL" /apis/apiregistration.k8s.io/v1/apiservices "$DIR/metrics/apiservice.yaml"

nodes_ready() {
  [ "$(kubectl get nodes -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' |
    grep -c '^True$')" -eq "$NODES" ]
}
wait_for "default service account" 60 kube-controller-manager \
  api_get "$DIR" "$API_URL" /api/v1/namespaces/default/serviceaccounts/default
wait_for "kube-controller-manager /healthz" 30 kube-controller-manager curl -sfk "https://127.0.0.1:$KCM_PORT/healthz"
wait_for "kube-scheduler /healthz" 30 kube-scheduler curl -sfk "https://127.0.0.1:$SCHED_PORT/healthz"
# Over TLS, as metrics-server reaches it (plain HTTP answers on the same port).
wait_for "kwok /healthz" 30 kwok curl -sf --cacert "$PKI/ca.crt" "https://127.0.0.1:$KWOK_PORT/healthz"
wait_for "$NODES ready nodes" 60 kwok nodes_ready
# Through the aggregator: the APIService is Available and metrics-server answers.
wait_for "metrics.k8s.io (metrics-server through the aggregator)" 60 metrics-server \
  api_get "$DIR" "$API_URL" /apis/metrics.k8s.io/v1beta1/pods

trap - EXIT INT TERM
total_ms=$(( ($(date +%s%N) - start_ns) / 1000000 ))
log "cluster '$NAME' (Kubernetes v$K8S_VERSION) is up: $API_URL (readyz after ${api_ready_ms}ms, all ready after ${total_ms}ms)"
log "use it with: . $DIR/env   (KUBECONFIG=$DIR/kubeconfig)"
