# Entry points. `make test` is what CI runs (.ci/run); `make cluster-up` gives a local control plane.
SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

# The pinned control-plane binaries. build.sh prints the cached bin folder (building it first on a
# fresh machine, ~14 minutes); evaluated once, and only by targets that use it.
BIN_DIR = $(eval BIN_DIR := $(or $(shell controlplane/build.sh),$(error controlplane/build.sh failed)))$(BIN_DIR)
HELM = $(BIN_DIR)/helm
KUBECTL = $(BIN_DIR)/kubectl

# Integration tests mostly wait on the API server, so more threads than cores pay off.
TEST_THREADS ?= 6
# The control plane `make test` starts for the whole run (one for all test binaries).
TEST_CLUSTER := $(CURDIR)/target/test-cluster

.PHONY: help controlplane cluster-up cluster-down test fmt fmt-check lint crd-check helm-lint cargo-test

help:
	@echo "make test          fmt check, clippy, CRD drift, helm lint, unit + integration tests"
	@echo "make controlplane  build the pinned etcd, kube-apiserver, kubectl, helm (cached)"
	@echo "make cluster-up    start a local control plane in .cluster/ (make cluster-down stops it)"
	@echo "make fmt | lint    rustfmt | clippy -D warnings"

controlplane:
	controlplane/build.sh

cluster-up:
	controlplane/cluster.sh up

cluster-down:
	controlplane/cluster.sh down

fmt:
	cargo fmt --all

fmt-check:
	cargo fmt --all -- --check

lint:
	cargo clippy --workspace --all-targets -- -D warnings

crd-check:
	cargo run -q -p leadergroup-operator -- crd | diff -u crds/leadergroup.yaml -

helm-lint:
	@if [[ -d charts/leadergroup-operator ]]; then \
	  echo "$(HELM) lint --strict charts/leadergroup-operator"; \
	  "$(HELM)" lint --strict charts/leadergroup-operator; \
	else \
	  echo "helm-lint: skipped, charts/leadergroup-operator does not exist yet"; \
	fi

test: fmt-check lint crd-check helm-lint cargo-test

# Compiles first (so the cluster does not idle through a build), then starts one control plane
# for all test binaries. The trap stops it when the tests end; the watchdog (--watch-pid: this
# recipe's shell) when make is killed instead.
cargo-test:
	cargo test --workspace --no-run
	@trap 'controlplane/cluster.sh down --dir "$(TEST_CLUSTER)"' EXIT; \
	controlplane/cluster.sh up --dir "$(TEST_CLUSTER)" --watch-pid $$$$ --bin-dir "$(BIN_DIR)"; \
	start=$$SECONDS; \
	LEADERGROUP_KUBECONFIG="$(TEST_CLUSTER)/kubeconfig" cargo test --workspace -- --test-threads=$(TEST_THREADS); \
	echo "cargo-test: tests ran in $$((SECONDS - start)) s"
