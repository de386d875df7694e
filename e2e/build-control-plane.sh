#!/usr/bin/env bash
# Builds etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl,
# kwok, metrics-server, helm, rp-health (the consumers' health checks, e2e/health) and Traefik
# (the traffic tests' Gateway) from Go modules into $RP_CACHE, keyed by
# version, and fetches the CRDs the tests install (prometheus-operator's, the
# Gateway API's); on request (not in "all"), Argo Rollouts for
# `make bench-compare`. A part whose binaries are already there is
# skipped, so a second run takes a second.
set -euo pipefail
# shellcheck source=e2e/lib.sh
. "$(dirname "$0")/lib.sh"
export GOFLAGS="-mod=mod -buildvcs=false" CGO_ENABLED=0 GOTOOLCHAIN=local
command -v go >/dev/null || die "go is not installed"

build_k8s() {
  local want=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
  local missing=0 b
  for b in "${want[@]}"; do [ -x "$K8S_BIN/$b" ] || missing=1; done
  [ "$missing" = 0 ] && { log "kubernetes v$K8S_VERSION cached in $K8S_BIN"; return; }
  log "building kubernetes v$K8S_VERSION (cold build: many minutes)"
  local work="$RP_CACHE/src/k8s-v$K8S_VERSION"
  mkdir -p "$work" "$K8S_BIN"
  local minor="${K8S_VERSION#*.}"; minor="${minor%%.*}"
  local staging="0.${K8S_VERSION#*.}"
  # The kubernetes go.mod replaces its staging modules with ./staging paths,
  # which do not apply to a dependency: replace each with its published
  # version, with the list taken from the downloaded go.mod.
  local modfile
  modfile=$(cd /tmp && go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  [ -f "$modfile" ] || die "could not download k8s.io/kubernetes@v$K8S_VERSION"
  {
    echo "module releaseplan.local/k8s-build"
    echo
    echo "go $(sed -n 's/^go //p' "$modfile")"
    echo
    echo "require k8s.io/kubernetes v$K8S_VERSION"
    echo
    echo "replace ("
    sed -n 's#^\s*\(k8s.io/[^ ]*\) => ./staging/.*#\t\1 => \1 v'"$staging"'#p' "$modfile"
    echo ")"
  } >"$work/go.mod"
  cat >"$work/tools.go" <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubectl/pkg/cmd"
)
GO
  local v=k8s.io/component-base/version
  local ld="-s -w -X $v.gitVersion=v$K8S_VERSION -X $v.gitMajor=1 -X $v.gitMinor=$minor"
  ld="$ld -X $v.gitTreeState=clean -X $v.buildDate=1970-01-01T00:00:00Z"
  ld="$ld -X k8s.io/client-go/pkg/version.gitVersion=v$K8S_VERSION -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor"
  (cd "$work"
   go mod tidy -e >/dev/null 2>&1 || true
   go build -trimpath -ldflags "$ld" -o "$K8S_BIN/" \
     k8s.io/kubernetes/cmd/kube-apiserver \
     k8s.io/kubernetes/cmd/kube-controller-manager \
     k8s.io/kubernetes/cmd/kube-scheduler \
     k8s.io/kubernetes/cmd/kubectl)
  log "kubernetes built: $("$K8S_BIN/kube-apiserver" --version)"
}

build_etcd() {
  [ -x "$ETCD_BIN/etcd" ] && { log "etcd v$ETCD_VERSION cached"; return; }
  log "building etcd v$ETCD_VERSION"
  local work="$RP_CACHE/src/etcd-v$ETCD_VERSION"
  mkdir -p "$work" "$ETCD_BIN"
  cat >"$work/go.mod" <<MOD
module releaseplan.local/etcd-build

go 1.24

require go.etcd.io/etcd/server/v3 v$ETCD_VERSION

replace (
	go.etcd.io/etcd/api/v3 => go.etcd.io/etcd/api/v3 v$ETCD_VERSION
	go.etcd.io/etcd/client/pkg/v3 => go.etcd.io/etcd/client/pkg/v3 v$ETCD_VERSION
	go.etcd.io/etcd/client/v3 => go.etcd.io/etcd/client/v3 v$ETCD_VERSION
	go.etcd.io/etcd/pkg/v3 => go.etcd.io/etcd/pkg/v3 v$ETCD_VERSION
)
MOD
  (cd "$work" && go build -trimpath -ldflags "-s -w" -o "$ETCD_BIN/etcd" go.etcd.io/etcd/server/v3)
  log "etcd built: $("$ETCD_BIN/etcd" --version | head -1)"
}

build_kwok() {
  if [ -x "$KWOK_BIN/kwok" ] && [ -d "$KWOK_BIN/../stage" ] &&
    [ -f "$KWOK_BIN/../metrics/resource/metrics-resource.yaml" ] &&
    [ -f "$KWOK_CRDS/kwok.x-k8s.io_clusterresourceusages.yaml" ]; then
    log "kwok v$KWOK_VERSION cached"; return
  fi
  if [ ! -x "$KWOK_BIN/kwok" ]; then
    log "building kwok v$KWOK_VERSION"
    mkdir -p "$KWOK_BIN"
    (cd /tmp && GOFLAGS=-buildvcs=false GOBIN="$KWOK_BIN" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@v$KWOK_VERSION")
  fi
  # The stage definitions, the Metric of a kubelet's /metrics/resource and the
  # CRDs (cluster-up installs the ClusterResourceUsage one) ship in the
  # module; keep a copy beside the binary.
  local moddir
  moddir=$(module_dir "sigs.k8s.io/kwok@v$KWOK_VERSION")
  [ -d "$moddir" ] || die "go mod download sigs.k8s.io/kwok@v$KWOK_VERSION gave no module directory"
  mkdir -p "$KWOK_BIN/../stage" "$KWOK_BIN/../metrics" "$KWOK_CRDS"
  cp -r "$moddir/kustomize/stage/." "$KWOK_BIN/../stage/"
  cp -r "$moddir/kustomize/metrics/." "$KWOK_BIN/../metrics/"
  cp "$moddir"/kustomize/crd/bases/kwok.x-k8s.io_*.yaml "$KWOK_CRDS/"
  chmod -R u+w "$KWOK_BIN/../stage" "$KWOK_BIN/../metrics" "$KWOK_CRDS"
  log "kwok v$KWOK_VERSION stages, metrics and CRDs copied from its module"
}

# metrics-server, the resource metrics API behind the aggregator
# (e2e/cluster-up.sh starts it on every cluster): `go install` of its command
# at the pinned version, so with the dependency versions of its own go.mod,
# version stamped as its Makefile does. Cold: see docs/control-plane.md.
build_metrics_server() {
  [ -x "$METRICS_SERVER_BIN/metrics-server" ] && { log "metrics-server v$METRICS_SERVER_VERSION cached"; return; }
  log "building metrics-server v$METRICS_SERVER_VERSION"
  mkdir -p "$METRICS_SERVER_BIN"
  local v=k8s.io/client-go/pkg/version
  (cd /tmp && GOFLAGS=-buildvcs=false GOBIN="$METRICS_SERVER_BIN" go install -trimpath \
    -ldflags "-s -w -X $v.gitVersion=v$METRICS_SERVER_VERSION -X $v.buildDate=1970-01-01T00:00:00Z" \
    "sigs.k8s.io/metrics-server/cmd/metrics-server@v$METRICS_SERVER_VERSION")
  log "metrics-server built: $("$METRICS_SERVER_BIN/metrics-server" --version 2>&1 | head -1)"
}

build_helm() {
  [ -x "$HELM_BIN/helm" ] && { log "helm v$HELM_VERSION cached"; return; }
  log "building helm v$HELM_VERSION"
  mkdir -p "$HELM_BIN"
  (cd /tmp && GOFLAGS=-buildvcs=false GOBIN="$HELM_BIN" go install -trimpath \
    -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=v$HELM_VERSION" "helm.sh/helm/v3/cmd/helm@v$HELM_VERSION")
  log "helm built: $("$HELM_BIN/helm" version --short)"
}

# rp-health: kstatus, Argo CD's Lua and Flux's CEL health checks in one small
# binary for tests/it/consumers.rs. Rebuilt when e2e/health changes (its sources'
# hash is kept beside the binary). Cold: about a minute on 2 cores.
build_consumers() {
  local src="$E2E_DIR/health" sum
  sum=$(cat "$src/go.mod" "$src/go.sum" "$src/main.go" | sha256sum | cut -d' ' -f1)
  if [ -x "$RP_HEALTH_BIN/rp-health" ] && [ "$(cat "$RP_HEALTH_BIN/.source-sum" 2>/dev/null)" = "$sum" ]; then
    log "rp-health v$RP_HEALTH_VERSION cached"; return
  fi
  log "building rp-health v$RP_HEALTH_VERSION"
  mkdir -p "$RP_HEALTH_BIN"
  (cd "$src" && go build -trimpath -ldflags "-s -w" -o "$RP_HEALTH_BIN/rp-health" .)
  echo "$sum" >"$RP_HEALTH_BIN/.source-sum"
  log "rp-health built"
}

# The Adaptive Cards JavaScript SDK from npm (no build): the Teams messages'
# consumer in tests/it/notifications.rs. A few seconds, 2 MB. Not in "all"
# (which the demo runs without Node): make test and test-oldest ask for it.
build_adaptivecards() {
  local js="$ADAPTIVECARDS_DIR/node_modules/adaptivecards/dist/adaptivecards.js"
  [ -f "$js" ] && { log "adaptivecards v$ADAPTIVECARDS_VERSION cached"; return; }
  command -v npm >/dev/null || die "npm not found: install Node.js (README, prerequisites)"
  log "fetching adaptivecards v$ADAPTIVECARDS_VERSION from npm"
  mkdir -p "$ADAPTIVECARDS_DIR"
  npm install --silent --no-audit --no-fund --no-save --prefix "$ADAPTIVECARDS_DIR" \
    "adaptivecards@$ADAPTIVECARDS_VERSION" >/dev/null
  [ -f "$js" ] || die "npm installed no $js"
}

# The prometheus-operator's ServiceMonitor and PrometheusRule CRDs, from the
# module's example/prometheus-operator-crd (a 4 MB module zip; nothing is
# built): the chart's monitoring objects are applied against them.
build_monitoring_crds() {
  local mod=github.com/prometheus-operator/prometheus-operator moddir kind
  [ -f "$MONITORING_CRDS/monitoring.coreos.com_prometheusrules.yaml" ] && {
    log "prometheus-operator CRDs v$PROMETHEUS_OPERATOR_VERSION cached"; return; }
  log "fetching the prometheus-operator CRDs v$PROMETHEUS_OPERATOR_VERSION"
  moddir=$(cd /tmp && GOFLAGS=-mod=mod go mod download -json "$mod@v$PROMETHEUS_OPERATOR_VERSION" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [ -d "$moddir" ] || die "go mod download $mod@v$PROMETHEUS_OPERATOR_VERSION gave no module directory"
  mkdir -p "$MONITORING_CRDS"
  for kind in servicemonitors prometheusrules; do
    cp "$moddir/example/prometheus-operator-crd/monitoring.coreos.com_$kind.yaml" "$MONITORING_CRDS/"
  done
  chmod -R u+w "$MONITORING_CRDS"
}

# Traefik, the Gateway API implementation of the traffic tests
# (tests/it/support/traffic.rs): a wrapper module requiring github.com/traefik/traefik/v3 with the
# replace block of its go.mod, and three bridges from e2e/traefik (its README
# says why): the nested ext module, lego without its DNS providers, and
# go-http-auth with the two functions of traefik's fork.
# Cold (no Go build cache): 6.3 minutes, 7 CPU-minutes, on 2 busy cores with
# the modules already downloaded; the binary is 140 MB.
build_traefik() {
  local mod=github.com/traefik/traefik/v3 moddir src lego auth
  [ -x "$TRAEFIK_BIN/traefik" ] && { log "traefik v$TRAEFIK_VERSION cached"; return; }
  log "building traefik v$TRAEFIK_VERSION"
  src="$RP_CACHE/src/traefik-v$TRAEFIK_VERSION"
  rm -rf "$src"; mkdir -p "$src/ext" "$TRAEFIK_BIN"
  moddir=$(module_dir "$mod@v$TRAEFIK_VERSION")
  lego=$(module_dir "$(sed -n 's#^[[:space:]]*\(github.com/go-acme/lego/v5\) \(v[^ ]*\).*#\1@\2#p' "$moddir/go.mod" | head -1)")
  auth=$(module_dir github.com/abbot/go-http-auth@v0.4.0)
  cp "$E2E_DIR/traefik/ext/ext.go" "$src/ext/"
  printf 'module github.com/traefik/traefik/dynamic/ext\n\ngo 1.22\n' >"$src/ext/go.mod"
  cp -r "$lego" "$src/lego"; cp -r "$auth" "$src/go-http-auth"; chmod -R u+w "$src"
  find "$src/lego/providers/dns" -mindepth 1 -maxdepth 1 ! -name '*.go' -exec rm -rf {} +
  rm -f "$src/lego/providers/dns/"*.go
  cp "$E2E_DIR/traefik/lego-dns/zz_gen_dns_providers.go" "$src/lego/providers/dns/"
  cp "$E2E_DIR/traefik/go-http-auth/traefik_compat.go" "$src/go-http-auth/"
  printf 'module github.com/abbot/go-http-auth\n\ngo 1.20\n' >"$src/go-http-auth/go.mod"
  {
    printf 'module rp/traefik-wrapper\n\ngo 1.26.0\n\nrequire %s v%s\n\n' "$mod" "$TRAEFIK_VERSION"
    printf 'replace github.com/traefik/traefik/dynamic/ext => ./ext\n\n'
    printf 'replace github.com/go-acme/lego/v5 => ./lego\n\n'
    # The replace and exclude blocks of traefik's go.mod, but its fork of go-http-auth.
    sed -n '/^\/\/ Containous forks/,$p' "$moddir/go.mod" |
      sed 's#github.com/abbot/go-http-auth => .*#github.com/abbot/go-http-auth => ./go-http-auth#'
  } >"$src/go.mod"
  (cd "$src" && go build -trimpath -ldflags "-s -w -X github.com/traefik/traefik/v3/pkg/version.Version=$TRAEFIK_VERSION" \
     -o "$TRAEFIK_BIN/traefik" "$mod/cmd/traefik")
  log "traefik built: $("$TRAEFIK_BIN/traefik" version | head -1)"
}

# The Gateway API CRDs of the standard channel (all but the
# ValidatingAdmissionPolicy of safe upgrades), from the module.
build_gateway_crds() {
  local moddir
  [ -f "$GATEWAY_CRDS/gateway.networking.k8s.io_httproutes.yaml" ] && {
    log "gateway-api CRDs v$GATEWAY_API_VERSION cached"; return; }
  moddir=$(module_dir "sigs.k8s.io/gateway-api@v$GATEWAY_API_VERSION")
  mkdir -p "$GATEWAY_CRDS"
  cp "$moddir"/config/crd/standard/gateway.networking.k8s.io_*.yaml "$GATEWAY_CRDS/"
  rm -f "$GATEWAY_CRDS"/*vap*
  chmod -R u+w "$GATEWAY_CRDS"
  log "gateway-api CRDs v$GATEWAY_API_VERSION ready"
}

# The Gateway API Inference Extension CRDs, from the module's config/crd/bases:
# InferencePool (inference.networking.k8s.io/v1) and the alpha multi-cluster
# InferencePoolImport (inference.networking.x-k8s.io/v1alpha1) beside it.
build_inference_crds() {
  local moddir
  [ -f "$INFERENCE_CRDS/inference.networking.k8s.io_inferencepools.yaml" ] && {
    log "inference extension CRDs v$INFERENCE_EXTENSION_VERSION cached"; return; }
  moddir=$(module_dir "sigs.k8s.io/gateway-api-inference-extension@v$INFERENCE_EXTENSION_VERSION")
  mkdir -p "$INFERENCE_CRDS"
  cp "$moddir"/config/crd/bases/inference.networking.k8s.io_inferencepools.yaml \
     "$moddir"/config/crd/bases/inference.networking.x-k8s.io_inferencepoolimports.yaml "$INFERENCE_CRDS/"
  chmod -R u+w "$INFERENCE_CRDS"
  log "inference extension CRDs v$INFERENCE_EXTENSION_VERSION ready"
}

# Traefik's own CRDs (IngressRoute and the others its Kubernetes CRD provider
# watches), from the Traefik module: the router of traffic.traefik
# (tests/it/traffic.rs, rollout_through_a_traefik_ingress_route).
build_traefik_crds() {
  local moddir file=kubernetes-crd-definition-v1.yml
  [ -f "$TRAEFIK_CRDS/$file" ] && { log "traefik CRDs v$TRAEFIK_VERSION cached"; return; }
  moddir=$(module_dir "github.com/traefik/traefik/v3@v$TRAEFIK_VERSION")
  mkdir -p "$TRAEFIK_CRDS"
  cp "$moddir/docs/content/reference/dynamic-configuration/$file" "$TRAEFIK_CRDS/"
  chmod -R u+w "$TRAEFIK_CRDS"
  log "traefik CRDs v$TRAEFIK_VERSION ready"
}

# module_dir MODULE@VERSION: the module's directory in the module cache.
module_dir() {
  (cd /tmp && go mod download -json "$1" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
}

# Argo Rollouts (`make bench-compare` only, not part of "all"): a wrapper
# module requiring github.com/argoproj/argo-rollouts with the whole replace
# block of its go.mod copied (a dependency's replaces do not apply, and
# without them its k8s.io modules resolve to other versions), then its
# cmd/rollouts-controller built from that module. Its go.mod asks for a newer
# Go than the local one: GOTOOLCHAIN fetches that toolchain through the module
# proxy. The CRDs ship in the module; a copy is kept beside the binary.
# Cold: about 10 CPU-minutes.
build_argo_rollouts() {
  local dir="$RP_CACHE/argo-rollouts-v$ARGO_ROLLOUTS_VERSION"
  [ -x "$ARGO_BIN/rollouts-controller" ] && [ -s "$dir/crds/rollout-crd.yaml" ] && {
    log "argo-rollouts v$ARGO_ROLLOUTS_VERSION cached in $ARGO_BIN"; return; }
  log "building argo-rollouts v$ARGO_ROLLOUTS_VERSION with $ARGO_GO_TOOLCHAIN (cold build: ~10 CPU-minutes)"
  local mod="github.com/argoproj/argo-rollouts"
  local work="$RP_CACHE/src/argo-rollouts-v$ARGO_ROLLOUTS_VERSION"
  mkdir -p "$work" "$ARGO_BIN" "$dir/crds"
  export GOTOOLCHAIN="$ARGO_GO_TOOLCHAIN"
  local json modfile moddir
  json=$(cd /tmp && go mod download -json "$mod@v$ARGO_ROLLOUTS_VERSION")
  modfile=$(sed -n 's/.*"GoMod": "\(.*\)".*/\1/p' <<<"$json")
  moddir=$(sed -n 's/.*"Dir": "\(.*\)".*/\1/p' <<<"$json")
  { [ -f "$modfile" ] && [ -d "$moddir" ]; } || die "could not download $mod@v$ARGO_ROLLOUTS_VERSION"
  {
    echo "module releaseplan.local/argo-rollouts-build"
    echo
    echo "go $(sed -n 's/^go //p' "$modfile")"
    echo
    echo "require $mod v$ARGO_ROLLOUTS_VERSION"
    echo
    sed -n '/^replace (/,/^)/p' "$modfile"
  } >"$work/go.mod"
  # cmd/rollouts-controller is a main package, which cannot be imported: the
  # build tag keeps this file out of every build, it only makes `go mod tidy`
  # record the command's dependencies in go.sum.
  cat >"$work/tools.go" <<'GO'
//go:build tools

package tools

import _ "github.com/argoproj/argo-rollouts/cmd/rollouts-controller"
GO
  (cd "$work"
   go mod tidy -e >/dev/null 2>&1 || true
   go build -trimpath -ldflags "-s -w -X $mod/utils/version.version=$ARGO_ROLLOUTS_VERSION" \
     -o "$ARGO_BIN/rollouts-controller" "$mod/cmd/rollouts-controller")
  cp "$moddir"/manifests/crds/*-crd.yaml "$dir/crds/"
  chmod -R u+w "$dir/crds"
  log "argo-rollouts built: $("$ARGO_BIN/rollouts-controller" --version 2>/dev/null | head -1)"
}

# krew's own manifest validator (sigs.k8s.io/krew/cmd/validate-krew-manifest)
# and krew itself as the kubectl plugin `kubectl-krew`, which the validator
# runs to install the plugin, for tests/release.rs (make test-release); not
# in "all". Cold: about a minute.
build_krew() {
  if [ -x "$KREW_BIN/validate-krew-manifest" ] && [ -x "$KREW_BIN/kubectl-krew" ]; then
    log "krew v$KREW_VERSION cached"; return
  fi
  log "building krew and validate-krew-manifest v$KREW_VERSION"
  mkdir -p "$KREW_BIN"
  (cd /tmp && GOBIN="$KREW_BIN" go install -trimpath -ldflags "-s -w" \
    "sigs.k8s.io/krew/cmd/validate-krew-manifest@v$KREW_VERSION" \
    "sigs.k8s.io/krew/cmd/krew@v$KREW_VERSION")
  mv "$KREW_BIN/krew" "$KREW_BIN/kubectl-krew"
  log "krew built"
}

# cosign (github.com/sigstore/cosign/v2/cmd/cosign), which signs and attests
# the image in e2e/publish.sh (make publish) and verifies it in
# tests/packaging.rs (make test); not in "all". Cold: about 2 min here (its
# module graph is large: several minutes more to download on a fresh machine).
build_cosign() {
  if [ -x "$COSIGN_BIN/cosign" ]; then
    log "cosign v$COSIGN_VERSION cached"; return
  fi
  log "building cosign v$COSIGN_VERSION"
  mkdir -p "$COSIGN_BIN"
  (cd /tmp && GOBIN="$COSIGN_BIN" go install -trimpath \
    -ldflags "-s -w -X sigs.k8s.io/release-utils/version.gitVersion=v$COSIGN_VERSION" \
    "github.com/sigstore/cosign/v2/cmd/cosign@v$COSIGN_VERSION")
  log "cosign built"
}

# Kyverno's ImageValidatingPolicy CRD, from the module's config/crds (a 77 MB
# module zip; nothing is built): tests/packaging.rs applies the admission
# policy of docs/releasing.md (examples/kyverno-image-policy.yaml) against it.
build_kyverno_crds() {
  local mod=github.com/kyverno/kyverno moddir
  [ -f "$KYVERNO_CRDS/policies.kyverno.io_imagevalidatingpolicies.yaml" ] && {
    log "Kyverno CRDs v$KYVERNO_VERSION cached"; return; }
  log "fetching Kyverno's ImageValidatingPolicy CRD v$KYVERNO_VERSION"
  moddir=$(module_dir "$mod@v$KYVERNO_VERSION")
  [ -d "$moddir" ] || die "go mod download $mod@v$KYVERNO_VERSION gave no module directory"
  mkdir -p "$KYVERNO_CRDS"
  cp "$moddir/config/crds/policies.kyverno.io/policies.kyverno.io_imagevalidatingpolicies.yaml" "$KYVERNO_CRDS/"
  chmod -R u+w "$KYVERNO_CRDS"
}

start=$(date +%s)
case "${1:-all}" in
  all) build_etcd; build_kwok; build_metrics_server; build_helm; build_k8s; build_consumers
    build_monitoring_crds; build_traefik; build_gateway_crds; build_inference_crds; build_traefik_crds ;;
  k8s) build_k8s ;; etcd) build_etcd ;; kwok) build_kwok ;; helm) build_helm ;;
  metrics-server) build_metrics_server ;;
  consumers) build_consumers ;;
  adaptivecards) build_adaptivecards ;;
  monitoring-crds) build_monitoring_crds ;;
  traefik) build_traefik; build_gateway_crds; build_inference_crds; build_traefik_crds ;;
  argo-rollouts) build_argo_rollouts ;;
  krew) build_krew ;;
  cosign) build_cosign ;;
  kyverno-crds) build_kyverno_crds ;;
  packaging) build_krew; build_cosign; build_kyverno_crds ;;
  *) die "usage: $0 [all|k8s|etcd|kwok|metrics-server|helm|consumers|adaptivecards|monitoring-crds|traefik|argo-rollouts|krew|cosign|kyverno-crds|packaging]" ;;
esac
log "control plane binaries ready in $(( $(date +%s) - start ))s"
