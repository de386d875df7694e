# Local development and CI entry points. See docs/control-plane.md.
SHELL := bash
.SHELLFLAGS := -euo pipefail -c

# Cluster for cluster-up / cluster-down, and the one `make test` starts.
NAME ?= dev
TEST_CLUSTER ?= test
# Shared build cache for cargo, outside the repo.
export CARGO_TARGET_DIR ?= $(HOME)/.cache/releaseplan/cargo-target

.PHONY: tools cluster-up cluster-down test

## tools: build (or reuse) the pinned etcd, kubernetes, kwok and helm binaries
tools:
	e2e/build-control-plane.sh all

## cluster-up: start the local cluster $(NAME); then `. .e2e-run/$(NAME)/env`
cluster-up: tools
	e2e/cluster-up.sh $(NAME)

## cluster-down: stop the local cluster $(NAME)
cluster-down:
	e2e/cluster-down.sh $(NAME)

## test: run all cargo tests against a fresh cluster $(TEST_CLUSTER), stopped after
## (set RP_KUBECONFIG to test against an already running cluster instead)
test: tools
	e2e/with-cluster.sh $(TEST_CLUSTER) -- cargo test --all-targets

.PHONY: crds crds-check

## crds: regenerate crds/releaseplan.yaml from the Rust types (src/api)
crds:
	@tmp=$$(mktemp); trap 'rm -f "$$tmp"' EXIT; \
	cargo run --quiet --bin crdgen > "$$tmp"; \
	mkdir -p crds; cp "$$tmp" crds/releaseplan.yaml; \
	echo "wrote crds/releaseplan.yaml"

## crds-check: fail when crds/releaseplan.yaml is not what crdgen prints now
crds-check:
	@tmp=$$(mktemp); trap 'rm -f "$$tmp"' EXIT; \
	cargo run --quiet --bin crdgen > "$$tmp"; \
	if ! diff -u crds/releaseplan.yaml "$$tmp" | head -n 60; then \
	  echo "crds-check: crds/releaseplan.yaml is stale or missing (diff above:" \
	    "committed vs generated); run 'make crds' and commit it" >&2; \
	  exit 1; \
	fi; \
	echo "crds/releaseplan.yaml is current"
