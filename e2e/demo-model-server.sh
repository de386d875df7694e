#!/usr/bin/env bash
# The model-server demo (`make demo` runs it): the journey of the design
# notes (shared/seeds/reconcile-journey.zh.txt, 4.8), a vLLM service `llama`
# in namespace `prod` at 2 replicas of vllm:0.6.3, patched in one command to
# 4 replicas of vllm:0.7.0, on GPU nodes that this release fills to the last
# GPU, with pods that are Ready long before their model is loaded.
#
# The cluster's GPU nodes are kwok nodes advertising nvidia.com/gpu (3 nodes
# x 2), one pair taken by another team's `embeddings`; their pods get
# loopback IPs, where e2e/demo-model-pods.py runs a stand-in vLLM server
# (e2e/model-server.py: vLLM's metric names, a model that loads for 10 s,
# synthetic requests), scraped by a real Prometheus. The plan releases
# within its capacity (no surge: the GPUs are full), counts a pod only once
# it answers /v1/models naming the model, and judges the new revision's time
# to first token against the stable one's with the ready-made gate of
# integrations/vllm. Printed each second: pods per revision, GPUs in use,
# model-ready pods, the step's weight, and the p90 time to first token of
# each revision. Then a version whose time to first token is three times
# worse is rolled back, with the reason. Fails when anything does not
# converge. Stops everything it started.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=e2e/lib.sh
. e2e/lib.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/releaseplan/cargo-target}"
NAME="${DEMO_CLUSTER:-demo}-llm"
RUN="$(cluster_dir "$NAME")"
PROM="demo-llm-$$"

say() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }

say "building the control plane (cached after the first run) and the operator"
e2e/build-control-plane.sh all
cargo build --quiet --bin releaseplan --bin kubectl-releaseplan
BIN="$CARGO_TARGET_DIR/debug"

OP_PID="" PODS_PID=""
cleanup() {
  status=$?
  for pid in "$OP_PID" "$PODS_PID"; do
    if [ -n "$pid" ] && kill "$pid" 2>/dev/null; then
      wait "$pid" 2>/dev/null || true
    fi
  done
  e2e/prometheus.sh remove "$PROM" >/dev/null 2>&1 || true
  say "stopping the cluster"
  e2e/cluster-down.sh "$NAME" || true
  exit "$status"
}
trap cleanup EXIT INT TERM

say "starting a local cluster '$NAME'"
e2e/cluster-up.sh "$NAME"
# shellcheck source=/dev/null  # written by cluster-up.sh
. "$RUN/env"
export PATH="$BIN:$PATH"

kubectl apply --server-side -f crds/releaseplan.yaml -f crds/gatetemplates.yaml -f crds/componentscales.yaml >/dev/null
kubectl wait --for condition=Established --timeout 60s \
  crd/releaseplans.releaseplan.io crd/clustergatetemplates.releaseplan.io >/dev/null

say "three GPU nodes of 2 x nvidia.com/gpu (pods on loopback IPs), and another team's embeddings on 2 of the 6 GPUs"
for i in 0 1 2; do
  kubectl apply --server-side -f - >/dev/null <<YAML
apiVersion: v1
kind: Node
metadata:
  name: gpu-node-$i
  annotations: {kwok.x-k8s.io/node: fake, node.alpha.kubernetes.io/ttl: "0"}
  labels: {kubernetes.io/hostname: gpu-node-$i, kubernetes.io/os: linux, type: kwok-gpu}
spec:
  podCIDR: 127.110.$i.0/24
  podCIDRs: [127.110.$i.0/24]
status:
  allocatable: {cpu: "32", memory: 128Gi, pods: "50", nvidia.com/gpu: "2"}
  capacity: {cpu: "32", memory: 128Gi, pods: "50", nvidia.com/gpu: "2"}
YAML
done
kubectl create namespace prod >/dev/null
kubectl apply -n prod -f - >/dev/null <<'YAML'
apiVersion: apps/v1
kind: Deployment
metadata: {name: embeddings}
spec:
  replicas: 2
  selector: {matchLabels: {app: embeddings}}
  template:
    metadata: {labels: {app: embeddings}}
    spec:
      containers:
        - name: tei
          image: text-embeddings-inference:1.5
          env: [{name: RPS, value: "0"}]
          resources: {limits: {nvidia.com/gpu: "1"}}
YAML
kubectl rollout status -n prod deployment/embeddings --timeout 120s >/dev/null

say "stand-in model servers on the pods' IPs, and a Prometheus scraping them"
TARGETS="$RUN/model-targets.json"
e2e/demo-model-pods.py prod "$TARGETS" &
PODS_PID=$!
PROM_URL=$(RP_PROMETHEUS_FILE_SD="$TARGETS" e2e/prometheus.sh start "$PROM" - | tail -1)
echo "prometheus: $PROM_URL"

say "the ready-made vLLM gates (integrations/vllm/gate-templates.yaml)"
kubectl apply --server-side -f integrations/vllm/gate-templates.yaml

say "starting the operator (log: $RUN/operator.log)"
# Single-tenant, as e2e/demo.sh says why.
"$BIN/releaseplan" --operator-namespace default --gate-policy optional \
  --metrics-addr 127.0.0.1:0 >"$RUN/operator.log" 2>&1 &
OP_PID=$!

# The plan: the component at `replicas` pods of `image`, whose stand-in
# takes 10 s to load and answers its first token after `ttft` ms.
plan() {
  local replicas=$1 image=$2 ttft=$3
  cat <<YAML
apiVersion: releaseplan.io/v1alpha1
kind: ReleasePlan
metadata: {name: llama, namespace: prod}
spec:
  components:
    - name: llama
      replicas: $replicas
      capacity: {maxSurge: 0, maxUnavailable: 1}
      serving: {port: 8000, model: llama, warmup: 2m}
      template:
        metadata: {labels: {app: llama}}
        spec:
          containers:
            - name: vllm
              image: $image
              ports: [{name: http, containerPort: 8000}]
              env:
                - {name: MODEL, value: llama}
                - {name: VERSION, value: "${image#vllm:}"}
                - {name: LOAD_SECONDS, value: "10"}
                - {name: TTFT_MS, value: "$ttft"}
                - {name: RPS, value: "20"}
              resources: {limits: {nvidia.com/gpu: "1"}}
  strategy:
    steps:
      - setWeight: 50
      - pause: {duration: 20s}
  health:
    progressDeadlineSeconds: 60
    gates:
      - name: time-to-first-token
        component: llama
        template:
          kind: ClusterGateTemplate
          name: vllm-time-to-first-token
          args: {prometheus: "${PROM_URL#http://}", window: 15s}
YAML
}

# One line of what the release looks like now.
line() {
  python3 - "$PROM_URL" <<'PY'
import json, subprocess, sys, urllib.parse, urllib.request
prom = sys.argv[1]
def kube(*a):
    return json.loads(subprocess.run(["kubectl", *a, "-o", "json"], capture_output=True, text=True, check=True).stdout)
rp = kube("get", "rp", "llama", "-n", "prod")
st = rp.get("status", {})
c = (st.get("components") or [{}])[0]
pods = kube("get", "pods", "-A")["items"]
revs, gpus = {}, 0
for p in pods:
    gpu = any("nvidia.com/gpu" in (ct.get("resources", {}).get("limits") or {}) for ct in p["spec"]["containers"])
    if gpu and p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp"):
        gpus += 1
    if p["metadata"].get("labels", {}).get("app") != "llama" or p["metadata"].get("deletionTimestamp"):
        continue
    img = p["spec"]["containers"][0]["image"].split(":")[-1]
    ready = any(x["type"] == "Ready" and x["status"] == "True" for x in p.get("status", {}).get("conditions", []))
    t, r = revs.get(img, (0, 0))
    revs[img] = (t + 1, r + ready)
def ttft(h):
    if not h:
        return "-"
    q = ('histogram_quantile(0.9, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket'
         '{namespace="prod", revision="%s"}[15s])))' % h)
    try:
        with urllib.request.urlopen(prom + "/api/v1/query?" + urllib.parse.urlencode({"query": q}), timeout=2) as r:
            res = json.load(r)["data"]["result"]
        v = float(res[0]["value"][1]) if res else float("nan")
        return "-" if v != v else "%dms" % round(v * 1000)
    except Exception:
        return "?"
pods_s = "  ".join("%s %d/%d ready" % (k, v[1], v[0]) for k, v in sorted(revs.items())) or "no pods"
model_ready = "model-ready new %s stable %s" % (c.get("currentReady", 0), c.get("stableReady", 0))
ttfts = "ttft p90 new %s stable %s" % (ttft(c.get("currentHash")), ttft(c.get("stableHash") if c.get("stableHash") != c.get("currentHash") else None))
print("%-14s step %s weight %3s%%  %-32s GPUs %d/6  %s  %s" % (
    st.get("phase", "-"), st.get("currentStep", "-"), st.get("weight", 0), pods_s, gpus, model_ready, ttfts))
PY
}

# Prints a line each second until the plan is in phase $1 (fails past $2 s).
watch_until() {
  local want=$1 limit=$2 start now phase
  start=$(date +%s)
  while :; do
    now=$(( $(date +%s) - start ))
    printf '  t=%3ss %s\n' "$now" "$(line)"
    phase=$(kubectl get rp llama -n prod -o jsonpath='{.status.phase}')
    [ "$phase" = "$want" ] && [ "$(kubectl get rp llama -n prod -o jsonpath='{.status.observedGeneration}')" = \
      "$(kubectl get rp llama -n prod -o jsonpath='{.metadata.generation}')" ] && return 0
    [ "$now" -lt "$limit" ] || die "llama did not reach $want within ${limit}s (phase $phase)"
    sleep 1
  done
}

say "first release: llama at 2 x vllm:0.6.3 (a pod counts once its model answers)"
for _ in $(seq 20); do plan 2 vllm:0.6.3 80 | kubectl apply --server-side -f - >/dev/null && break; sleep 0.5; done
watch_until Stable 120

say "the notes' patch: 4 replicas of vllm:0.7.0, in one command; the GPUs fill up, nothing surges"
kubectl patch releaseplan llama -n prod --type json -p '[
  {"op": "replace", "path": "/spec/components/0/replicas", "value": 4},
  {"op": "replace", "path": "/spec/components/0/template/spec/containers/0/image", "value": "vllm:0.7.0"},
  {"op": "replace", "path": "/spec/components/0/template/spec/containers/0/env/1/value", "value": "0.7.0"}]'
sleep 1
watch_until Stable 240
kubectl releaseplan get llama -n prod

say "vllm:0.7.1, whose time to first token is three times worse: the gate rolls it back"
kubectl patch releaseplan llama -n prod --type json -p '[
  {"op": "replace", "path": "/spec/components/0/template/spec/containers/0/image", "value": "vllm:0.7.1"},
  {"op": "replace", "path": "/spec/components/0/template/spec/containers/0/env/1/value", "value": "0.7.1"},
  {"op": "replace", "path": "/spec/components/0/template/spec/containers/0/env/3/value", "value": "240"}]'
sleep 1
watch_until RolledBack 240
reason=$(kubectl get rp llama -n prod -o jsonpath='{.status.failure.gate}: {.status.failure.message}')
echo "  rolled back: $reason"
case "$reason" in time-to-first-token:*) ;; *) die "rolled back for another reason: $reason" ;; esac
kubectl releaseplan get llama -n prod

say "model-server demo done: 4 x vllm:0.7.0 serve on full GPUs, released without a surge; 0.7.1 was rolled back on its time to first token"
