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

.PHONY: help demo controlplane cluster-up cluster-down demo-stop test fmt fmt-check lint crds crd-check helm-lint chart-static cargo-test

help:
	@echo "make demo          start the local control plane, run the operator, show an election, handovers and a GC pause"
	@echo "make test          fmt check, clippy, CRD drift, helm lint, unit + integration tests"
	@echo "make controlplane  build the pinned etcd, kube-apiserver, kubectl, helm (cached)"
	@echo "make cluster-up    start a local control plane in .cluster/ (make cluster-down stops it)"
	@echo "make fmt | lint    rustfmt | clippy -D warnings"

controlplane:
	controlplane/build.sh

cluster-up:
	controlplane/cluster.sh up

cluster-down: demo-stop
	controlplane/cluster.sh down

# The demo leaves its operator running for exploring; its pid is in .cluster/.
DEMO_PID := .cluster/demo-operator.pid
demo-stop:
	@if [[ -f $(DEMO_PID) ]]; then kill "$$(cat $(DEMO_PID))" 2>/dev/null || true; rm -f $(DEMO_PID); fi

demo: demo-stop
	controlplane/cluster.sh up
	controlplane/postgres-deps.sh
	cargo build --bin leadergroup-operator --example demo --example ledger
	LEADERGROUP_KUBECONFIG="$(CURDIR)/.cluster/kubeconfig" target/debug/examples/demo

# Regenerates the CRD from the Rust types, and the chart's template of it.
CHART_CRD := charts/leadergroup-operator/templates/crd.yaml
crds:
	cargo run -q -- crd > crds/leadergroup.yaml
	charts/crd-template.sh < crds/leadergroup.yaml > $(CHART_CRD)

fmt:
	cargo fmt --all

fmt-check:
	cargo fmt --all -- --check

lint:
	cargo clippy --workspace --all-targets -- -D warnings

crd-check:
	cargo run -q -- crd | diff -u crds/leadergroup.yaml - || { echo "crds/leadergroup.yaml is stale: run make crds"; exit 1; }
	charts/crd-template.sh < crds/leadergroup.yaml | diff -u $(CHART_CRD) - || { echo "$(CHART_CRD) is stale: run make crds"; exit 1; }

# The chart without a cluster: helm lint --strict (both RBAC modes), renders with assertions on
# the objects (the rendered CRD against crds/leadergroup.yaml among them), schema refusals (needs
# python3 with PyYAML).
chart-static:
	charts/tests/static.sh
helm-lint: chart-static

test: fmt-check lint crd-check chart-static cargo-test

# Compiles first (so the cluster does not idle through a build), then starts one control plane
# for all test binaries. The trap stops it when the tests end; the watchdog (--watch-pid: this
# recipe's shell) when make is killed instead.
cargo-test:
	cargo test --workspace --no-run
	# The ledger example's unit tests (cargo only builds examples; the GC-pause test runs its binary).
	cargo test --example ledger
	@trap 'controlplane/cluster.sh down --dir "$(TEST_CLUSTER)"' EXIT; \
	controlplane/cluster.sh up --dir "$(TEST_CLUSTER)" --watch-pid $$$$ --bin-dir "$(BIN_DIR)"; \
	start=$$SECONDS; \
	LEADERGROUP_KUBECONFIG="$(TEST_CLUSTER)/kubeconfig" cargo test --workspace -- --test-threads=$(TEST_THREADS); \
	echo "cargo-test: tests ran in $$((SECONDS - start)) s"

# Benchmarks (issue 5; not part of `make test`, about 20 minutes): every scenario against a control
# plane of its own, then docs/benchmarks.md, bench/results/*.json and the plot. BENCH_ARGS=--quick
# runs each scenario a few times only (a smoke test of the harness).
BENCH_VENV := $(CURDIR)/target/bench-venv
.PHONY: bench
bench:
	nice -n 10 cargo build --release -p leadergroup-operator -p leadergroup-bench -p leadergroup-agent
	CARGO_TARGET_DIR=$(CURDIR)/target/bench-peers nice -n 10 cargo build --release --locked --manifest-path bench/peers/rust/Cargo.toml
	nice -n 10 bench/peers/client-go/build.sh >/dev/null
	[[ -x $(BENCH_VENV)/bin/python ]] || python3 -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -c 'import matplotlib' 2>/dev/null || $(BENCH_VENV)/bin/pip install -q 'matplotlib==3.10.*'
	env -u LEADERGROUP_KUBECONFIG target/release/leadergroup-bench $(BENCH_ARGS)
	$(BENCH_VENV)/bin/python bench/plot.py $(CURDIR)
