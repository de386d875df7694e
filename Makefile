# Local development and CI entry points. See docs/control-plane.md.
SHELL := bash
.SHELLFLAGS := -euo pipefail -c

# Cluster for cluster-up / cluster-down, and the ones `make test` and
# `make test-oldest` start (two names: they never stop each other's).
NAME ?= dev
TEST_CLUSTER ?= test
TEST_OLDEST_CLUSTER ?= test-oldest
# Kubernetes of the control plane: K8S_VERSION, e2e/versions.env's default
# (the newest supported minor) unless given on the command line (`make test
# K8S_VERSION=1.33.13`) or in the environment; make passes either to the
# scripts' environment. The oldest supported minor, for `make test-oldest`:
K8S_OLDEST_VERSION ?= $(shell . e2e/versions.env && echo "$$K8S_OLDEST_VERSION")
# Shared build cache for cargo, outside the repo.
export CARGO_TARGET_DIR ?= $(HOME)/.cache/releaseplan/cargo-target

.PHONY: tools cluster-up cluster-down test test-oldest

# Targets that need system commands (openssl, curl, prometheus, shellcheck...)
# run e2e/ensure-deps.sh first, before any build: it installs the missing
# Debian packages, or fails at once with the command to run. It is a recipe
# line rather than a prerequisite so that it also comes first under make -j.

## tools: build (or reuse) the pinned etcd, kubernetes, kwok, metrics-server, helm, rp-health and Traefik
## binaries, and fetch the prometheus-operator and Gateway API CRDs
tools:
	e2e/build-control-plane.sh all

## cluster-up: start the local cluster $(NAME); then `. .e2e-run/$(NAME)/env`
cluster-up:
	e2e/ensure-deps.sh cluster
	e2e/build-control-plane.sh all
	e2e/cluster-up.sh $(NAME)

## cluster-down: stop the local cluster $(NAME)
cluster-down:
	e2e/cluster-down.sh $(NAME)

## test: run all cargo tests against a fresh cluster $(TEST_CLUSTER), stopped after
## (set RP_KUBECONFIG to test against an already running cluster instead); builds each
## earlier release first (e2e/build-release.sh all, cached) for tests/upgrade_release.rs,
## and cosign and krew (cached) for tests/packaging.rs, which packages, signs, publishes
## and installs the test build as a release
test:
	e2e/ensure-deps.sh test
	e2e/build-control-plane.sh all
	e2e/build-control-plane.sh adaptivecards
	e2e/build-control-plane.sh packaging
	e2e/build-release.sh all >/dev/null
	e2e/with-cluster.sh $(TEST_CLUSTER) -- cargo test --all-targets

## test-oldest: the cluster tests (tests/it, apiserver_restart, upgrade) against a fresh
## cluster $(TEST_OLDEST_CLUSTER) of the oldest supported Kubernetes (K8S_OLDEST_VERSION),
## stopped after; its control plane is built (or reused) first, in its own cache folder
test-oldest:
	e2e/ensure-deps.sh test
	K8S_VERSION=$(K8S_OLDEST_VERSION) e2e/build-control-plane.sh all
	e2e/build-control-plane.sh adaptivecards
	K8S_VERSION=$(K8S_OLDEST_VERSION) e2e/with-cluster.sh $(TEST_OLDEST_CLUSTER) -- \
	  cargo test --test it --test apiserver_restart --test upgrade

.PHONY: crds crds-check

## crds: regenerate crds/releaseplan.yaml, crds/gatetemplates.yaml, crds/componentscales.yaml and crds/gatepolicies.yaml from the Rust types (crates/core/src/api), and the chart's copies
crds:
	@tmp=$$(mktemp); trap 'rm -f "$$tmp"' EXIT; \
	mkdir -p crds; \
	cargo run --quiet --bin crdgen > "$$tmp"; cp "$$tmp" crds/releaseplan.yaml; \
	cargo run --quiet --bin crdgen templates > "$$tmp"; cp "$$tmp" crds/gatetemplates.yaml; \
	cargo run --quiet --bin crdgen scales > "$$tmp"; cp "$$tmp" crds/componentscales.yaml; \
	cargo run --quiet --bin crdgen policies > "$$tmp"; cp "$$tmp" crds/gatepolicies.yaml; \
	cargo run --quiet --bin crdgen freezes > "$$tmp"; cp "$$tmp" crds/releasefreezes.yaml; \
	echo "wrote crds/releaseplan.yaml crds/gatetemplates.yaml crds/componentscales.yaml crds/gatepolicies.yaml crds/releasefreezes.yaml"
	@$(MAKE) --no-print-directory chart-crd

## crds-check: fail when crds/releaseplan.yaml, crds/gatetemplates.yaml, crds/componentscales.yaml, crds/gatepolicies.yaml or crds/releasefreezes.yaml is not what crdgen prints now
crds-check:
	@tmp=$$(mktemp); trap 'rm -f "$$tmp"' EXIT; \
	for pair in releaseplan.yaml: gatetemplates.yaml:templates componentscales.yaml:scales gatepolicies.yaml:policies releasefreezes.yaml:freezes; do \
	  file=$${pair%%:*}; arg=$${pair#*:}; \
	  cargo run --quiet --bin crdgen $$arg > "$$tmp"; \
	  if ! diff -u "crds/$$file" "$$tmp" | head -n 60; then \
	    echo "crds-check: crds/$$file is stale or missing (diff above:" \
	      "committed vs generated); run 'make crds' and commit it" >&2; \
	    exit 1; \
	  fi; \
	  echo "crds/$$file is current"; \
	done

.PHONY: bench
## bench: operator benchmarks on a fresh cluster (latency, writes per rollout, RSS with 100 plans)
bench:
	e2e/ensure-deps.sh cluster
	e2e/build-control-plane.sh all
	cargo build --release --bin releaseplan
	e2e/with-cluster.sh bench -- env RP_OPERATOR_BIN=$(CARGO_TARGET_DIR)/release/releaseplan cargo bench --bench operator

.PHONY: bench-dashboard
## bench-dashboard: the plugin's dashboard with N plans (RP_DASH_PLANS=1000) in headless
## Chromium on a fresh cluster: page weight, time to draw the overview, change -> DOM latency
bench-dashboard:
	e2e/ensure-deps.sh test
	e2e/build-control-plane.sh all
	e2e/with-cluster.sh bench-dash -- cargo bench --bench dashboard

.PHONY: bench-soak
# Length of bench-soak in minutes; unset, the bench's own default (60).
MINUTES ?=

## bench-soak: the operator kept busy for an hour (MINUTES=60; RP_SOAK_PLANS=10 plans at a
## time: create, roll out, roll back, delete, again) on a fresh cluster; fails when RSS or fds
## grow, or when its caches are not empty once every plan is deleted
bench-soak:
	e2e/ensure-deps.sh cluster
	e2e/build-control-plane.sh all
	cargo build --release --bin releaseplan
	e2e/with-cluster.sh soak -- env RP_OPERATOR_BIN=$(CARGO_TARGET_DIR)/release/releaseplan \
	  $(if $(MINUTES),RP_SOAK_MINUTES=$(MINUTES)) cargo bench --bench soak

.PHONY: bench-scale bench-compare argo-rollouts
# Objects of bench-scale and bench-compare; where bench-compare keeps its figures.
N ?= 500
BENCH_OUT ?= target/bench-scale

## bench-scale: N plans (N=500) on a fresh cluster sized for them: cold start, CPU,
## RSS, writes, conflicts, Events, idle writes, a 10% rollout and the cluster's floor
bench-scale:
	e2e/ensure-deps.sh cluster
	e2e/build-control-plane.sh all
	cargo build --release --bin releaseplan
	RP_OPERATOR_BIN=$(CARGO_TARGET_DIR)/release/releaseplan \
	  e2e/bench-scale.sh releaseplan $(N) $(BENCH_OUT)/releaseplan-$(N).json

## argo-rollouts: build (or reuse) Argo Rollouts from the Go module proxy (~10 CPU-minutes cold)
argo-rollouts:
	e2e/build-control-plane.sh argo-rollouts

## bench-compare: the bench-scale workload through Argo Rollouts, then ours, each on a
## fresh cluster, one after the other; prints both tables and ours/Argo ratios
bench-compare:
	e2e/ensure-deps.sh cluster
	e2e/build-control-plane.sh all
	e2e/build-control-plane.sh argo-rollouts
	cargo build --release --bin releaseplan
	e2e/bench-scale.sh argo $(N) $(BENCH_OUT)/argo-$(N).json
	RP_OPERATOR_BIN=$(CARGO_TARGET_DIR)/release/releaseplan \
	  e2e/bench-scale.sh releaseplan $(N) $(BENCH_OUT)/releaseplan-$(N).json
	cargo bench --bench scale -- --compare $(BENCH_OUT)/releaseplan-$(N).json $(BENCH_OUT)/argo-$(N).json

.PHONY: demo
## demo: local cluster + operator; a two-component plan rolled out, then a broken version rolled back;
## then a weighted canary with real requests through Traefik (a live count per revision), rolled back;
## then an HPA scaling a component from 2 to 6 in the middle of a paused canary, the split printed each second
demo:
	e2e/ensure-deps.sh demo
	e2e/build-control-plane.sh traefik
	e2e/demo.sh
	e2e/demo-traffic.sh
	e2e/demo-autoscale.sh
	e2e/demo-model-server.sh

.PHONY: chart-crd chart-lint

## chart-crd: copy crds/releaseplan.yaml into the Helm chart (tests/it/chart.rs checks they are equal)
chart-crd:
	cp crds/releaseplan.yaml charts/releaseplan/crds/releaseplan.yaml
	cp crds/gatetemplates.yaml charts/releaseplan/crds/gatetemplates.yaml
	cp crds/componentscales.yaml charts/releaseplan/crds/componentscales.yaml
	cp crds/gatepolicies.yaml charts/releaseplan/crds/gatepolicies.yaml
	cp crds/releasefreezes.yaml charts/releaseplan/crds/releasefreezes.yaml
	@echo "wrote charts/releaseplan/crds/releaseplan.yaml charts/releaseplan/crds/gatetemplates.yaml charts/releaseplan/crds/componentscales.yaml charts/releaseplan/crds/gatepolicies.yaml charts/releaseplan/crds/releasefreezes.yaml"

## chart-lint: helm lint the chart and check its CRD copy is current
chart-lint: tools
	@for f in $$(cd crds && ls *.yaml) $$(cd charts/releaseplan/crds && ls *.yaml); do \
	  cmp -s "crds/$$f" "charts/releaseplan/crds/$$f" || { \
	    echo "chart-lint: charts/releaseplan/crds/$$f differs from" \
	      "crds/$$f; run 'make chart-crd' and commit it" >&2; exit 1; }; \
	done
	"$${RP_CACHE:-$$HOME/.cache/releaseplan}/helm-v$$(sed -n 's/^HELM_VERSION=//p' e2e/versions.env)/bin/helm" \
	  lint --strict charts/releaseplan

.PHONY: lint shellcheck core-purity supply-chain
## lint: shellcheck, formatting, clippy with warnings as errors, the committed CRD is
## current, the Helm chart lints with a current copy of it, and the dependencies
## follow deny.toml (supply-chain)
lint:
	e2e/ensure-deps.sh lint
	@$(MAKE) --no-print-directory shellcheck crds-check chart-lint core-purity supply-chain
	cargo fmt --all -- --check
	cargo clippy --all-targets -- -D warnings
	cargo clippy --test release --test fleet -- -D warnings

## core-purity: the pure core (crates/core) depends on no async runtime, Kubernetes
## client or HTTP client, so an I/O call there cannot compile; built alone (features
## of the operator's dependencies not unified in), with its tests
core-purity:
	cargo clippy -p releaseplan-core --all-targets -- -D warnings
	@deps=$$(cargo tree -p releaseplan-core -e normal --prefix none --quiet | sed 's/ .*//' | sort -u); \
	bad=$$(echo "$$deps" | grep -xE 'tokio|reqwest|hyper|hyper-util|kube-client|kube-runtime|tower|mio' || true); \
	if [ -n "$$bad" ]; then \
	  echo "core-purity: releaseplan-core depends on $$bad (see cargo tree -p releaseplan-core -e normal -i <crate>)" >&2; \
	  exit 1; \
	fi; \
	echo "core-purity: releaseplan-core depends on none of tokio, reqwest, hyper, kube-client, kube-runtime, tower, mio"

## supply-chain: licenses, banned and duplicate crates and allowed sources of every
## dependency against deny.toml, by cargo-deny (built once into the cache); not the
## advisories, whose database cannot be fetched here (e2e/supply-chain.sh says why)
supply-chain:
	e2e/supply-chain.sh

## shellcheck: the shell scripts (-x follows the files they source)
shellcheck:
	e2e/ensure-deps.sh lint
	shellcheck -x e2e/*.sh .ci/run

.PHONY: dist dist-check test-release dist-run-image publish
# Where make dist writes; dist-check's second build goes to $(DIST)-check.
DIST ?= dist

## dist: the release artifacts in $(DIST)/ without a container engine: static amd64 and
## arm64 binaries (tarballs), the operator's OCI image layout (from scratch), the chart,
## the krew manifest, an SBOM and SHA256SUMS (docs/releasing.md). Slow: not part of test
dist:
	e2e/ensure-deps.sh dist
	e2e/build-control-plane.sh helm
	e2e/dist.sh $(DIST)

## dist-check: make dist twice, the second time with its own cargo target dir (a full
## rebuild; cold the first time), and compare the two SHA256SUMS
dist-check: dist
	CARGO_TARGET_DIR=$(CARGO_TARGET_DIR)/dist-check e2e/dist.sh $(DIST)-check
	@if diff -u $(DIST)/SHA256SUMS $(DIST)-check/SHA256SUMS; then \
	  echo "dist-check: $(DIST)/ and $(DIST)-check/ are the same, byte for byte"; \
	else \
	  echo "dist-check: the two builds differ (diff above)" >&2; exit 1; \
	fi

## test-release: make dist, then tests/release.rs against a fresh cluster: SHA256SUMS signed
## and verified with a throwaway key, the image and the chart pushed to a registry on
## 127.0.0.1 and the chart installed from there with the pushed digest, and krew's
## validator installing the plugin from the manifest
test-release:
	e2e/ensure-deps.sh cluster release
	e2e/build-control-plane.sh all
	e2e/build-control-plane.sh krew
	@$(MAKE) --no-print-directory dist
	RP_DIST_DIR=$(abspath $(DIST)) e2e/with-cluster.sh release -- cargo test --test release

## publish: push $(DIST)'s image and chart to REGISTRY (host[:port][/path]), then sign
## them and attest the image's SBOM and provenance with cosign and COSIGN_KEY
## (e2e/publish.sh; docs/releasing.md, "Publishing")
publish:
	@test -n "$(REGISTRY)" || { echo "publish: set REGISTRY=host[:port][/path]" >&2; exit 1; }
	@test -n "$${COSIGN_KEY:-}" || { echo "publish: set COSIGN_KEY (a cosign key file or KMS URI)" >&2; exit 1; }
	e2e/ensure-deps.sh release
	e2e/build-control-plane.sh helm
	e2e/build-control-plane.sh cosign
	e2e/publish.sh $(DIST) $(REGISTRY)

## test-fleet: the fleet hub's read path (tests/fleet.rs) against two member clusters it
## starts and stops itself, plus a closed and a silent one (docs/fleets.md; not in test yet)
.PHONY: test-fleet
test-fleet:
	e2e/ensure-deps.sh cluster
	e2e/build-control-plane.sh all
	cargo test --test fleet

## dist-run-image: the operator unpacked from $(DIST)/oci's amd64 image, run with leader
## election against a fresh local cluster (dist, stopped after) until it holds its Lease
dist-run-image:
	e2e/ensure-deps.sh cluster
	e2e/build-control-plane.sh all
	e2e/dist-run-image.sh $(DIST)
