# Entry points. `make test` is what CI runs (.ci/run): the three layers of tests, each needing more
# than the one before: `make check` no cluster, `make it` the light cluster (a local control plane,
# etcd + kube-apiserver), `make e2e` the real one (root). `make cluster-up` starts a real two-node
# cluster, `make light-cluster-up` a light one.
SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

# Integration tests mostly wait on the API server, so more threads than cores pay off.
TEST_THREADS ?= 6
# The control plane `make test` starts for the whole run (one for all test binaries).
TEST_CLUSTER := $(CURDIR)/target/test-cluster
OLDEST_TEST_CLUSTER := $(CURDIR)/target/test-cluster-oldest

.PHONY: help demo light-demo controlplane light-cluster-up light-cluster-down demo-stop test fmt fmt-check lint crds crd-check helm-lint chart-static cargo-test
.PHONY: check unit it clippy shellcheck check-deps docs docs-gen docs-check
.PHONY: node-deps node-binaries images cluster-up cluster-down e2e profile-heap

help:
	@echo "make demo              (root) the real cluster: chart, ledger + agent, handovers by deletion, freeze, rollout, the GC pause refused"
	@echo "make light-demo        the light cluster: the operator, an election, handovers and a GC pause (make demo without root)"
	@echo "make test              make check, make it, make it-oldest, make e2e, make dist (what CI runs)"
	@echo "make check             no cluster: fmt check, clippy, shellcheck, cargo deny, CRD drift, the chart's static checks, the docs, unit tests"
	@echo "make docs              the docs book (docs/, mdBook) into target/book; make docs-gen rewrites its generated pages"
	@echo "make it                the integration tests on a light cluster it starts and always stops (newest supported Kubernetes)"
	@echo "make it-oldest         the same on the oldest supported Kubernetes minor's kube-apiserver (controlplane/build-oldest.sh)"
	@echo "make e2e               (root) the end-to-end tests on a real cluster it starts and always stops"
	@echo "make e2e-traffic       (root) the traffic tests alone (Label, EndpointSlice, the agent's proxy; make e2e runs them too)"
	@echo "make e2e-traffic-timings (root) the leader deleted or its container killed, again and again: the time to the new leader's first answer through the ClusterIP (bench/results/traffic.json)"
	@echo "make model             the model checker's larger configuration, 15 minutes at most, release build: docs/model.md"
	@echo "make proptest          PROPTEST_CASES (1000) generated LeaderGroups on a light cluster: refused, led or explained"
	@echo "make chaos             11,000 seeded faults against two operator replicas and the pods' Memberships and applications (~0.3-0.5 s a fault with the machine's load): chaos/results/latest.json, docs/chaos.md"
	@echo "make controlplane      build the pinned etcd, kube-apiserver, kubectl, helm (cached)"
	@echo "make dist              a release in target/dist/: chart, CRD, images (OCI archives), kubectl plugin, checksums"
	@echo "make cluster-up        (root) a real two-node cluster in .realcluster/: kubelets, containerd, kube-proxy (make cluster-down)"
	@echo "make light-cluster-up  etcd + kube-apiserver in .cluster/, no nodes (make light-cluster-down; also stops the demo's operator)"
	@echo "make images            build the OCI images (pause, busybox, webapp, operator, agent, ledger, client-go, agent-clients); imports them when .realcluster/ runs"
	@echo "make bench             (root for the first part) bench-e2e, then bench-api: docs/benchmarks.md, bench/results/*.json, plots"
	@echo "make profile-heap      the operator's heap at its peak at PROFILE_GROUPS (1000) groups, by allocation site (dhat-rs; the light cluster)"
	@echo "make bench-e2e         (root) end-to-end benchmarks on a real cluster it starts and always stops (~8 min plus the release build), then the traffic timings per kube-proxy setting"
	@echo "make fmt | lint        rustfmt | clippy -D warnings and shellcheck on every shell script"
	@echo "make unit              the unit tests (make check runs them): libraries, binaries, doc tests, the ledger example"
	@echo "make check-deps        install what make check needs beyond Rust (shellcheck, PyYAML; root or sudo)"

controlplane:
	controlplane/build.sh

# The light cluster: etcd + kube-apiserver, no nodes (the fast tests simulate the kubelet).
light-cluster-up:
	controlplane/cluster.sh up

light-cluster-down: demo-stop
	controlplane/cluster.sh down

# The real cluster: containerd, runc, CNI plugins and iptables from Debian (node-deps,
# as root), kubelet, kube-proxy, kube-scheduler and kube-controller-manager built and cached like
# the control plane (node-binaries), images built here with no registry.
node-deps:
	controlplane/node-deps.sh

node-binaries:
	controlplane/node-build.sh

cluster-up:
	controlplane/realcluster.sh up

cluster-down:
	examples/realdemo.sh stop-db
	controlplane/realcluster.sh down

images:
	if [[ -d .realcluster ]]; then images/build.sh --import .realcluster; else images/build.sh; fi

# A release in target/dist/: the chart packaged, the CRD, the images as OCI archives, the kubectl
# plugin, SHA256SUMS (images/dist.sh).
.PHONY: dist
dist:
	images/dist.sh

# The demo leaves its operator running for exploring; its pid is in .cluster/.
DEMO_PID := .cluster/demo-operator.pid
demo-stop:
	@if [[ -f $(DEMO_PID) ]]; then kill "$$(cat $(DEMO_PID))" 2>/dev/null || true; rm -f $(DEMO_PID); fi

# make demo: the real cluster as root (examples/realdemo.sh; it stays up: make cluster-down), else the
# light one.
demo:
	@if [[ $$(id -u) == 0 ]]; then examples/realdemo.sh; else \
	  echo "make demo: not root, and the real cluster needs root: running the light demo (make light-demo)"; \
	  $(MAKE) --no-print-directory light-demo; fi

light-demo: demo-stop
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

lint: clippy shellcheck

# --all-targets leaves out the end-to-end tests (`test = false`): linted by name.
clippy:
	cargo clippy --workspace --all-targets -- -D warnings
	cargo clippy --test e2e -- -D warnings

# Every shell script of the repository (tracked or new, not ignored) and .ci/run. -x -P SCRIPTDIR:
# follow `source` into lib.sh, pki.sh and versions.env, found beside the script.
SHELL_SCRIPTS = $(or $(shell git ls-files --cached --others --exclude-standard '*.sh'),\
  $(error no *.sh found by git ls-files: make lint needs the git checkout)) .ci/run
shellcheck:
	@command -v shellcheck >/dev/null || { echo "shellcheck missing: run make check-deps (Debian's shellcheck)"; exit 1; }
	shellcheck -x -P SCRIPTDIR $(SHELL_SCRIPTS)

check-deps:
	controlplane/check-deps.sh

crd-check: docs-binaries
	target/debug/leadergroup-operator crd | diff -u crds/leadergroup.yaml - || { echo "crds/leadergroup.yaml is stale: run make crds"; exit 1; }
	charts/crd-template.sh < crds/leadergroup.yaml | diff -u $(CHART_CRD) - || { echo "$(CHART_CRD) is stale: run make crds"; exit 1; }

# The chart without a cluster: helm lint --strict (both RBAC modes), renders with assertions on
# the objects (the rendered CRD against crds/leadergroup.yaml among them), schema refusals (needs
# python3 with PyYAML).
chart-static:
	charts/tests/static.sh
helm-lint: chart-static

# make dist last: it takes the images make e2e built, and proves the release can be written.
# make it-oldest after make it: the range's oldest end, once the newest has passed.
test: check it it-oldest e2e dist

# Layer 1, no cluster: what a change must pass before any cluster is started.
check: fmt-check lint deny crd-check chart-static docs-check unit

# The docs book: docs/ (its table of contents docs/SUMMARY.md, book.toml at the root), built with
# the pinned mdbook (doctools/mdbook.sh, built once into the project's cache) into target/book.
docs:
	"$$(doctools/mdbook.sh)" build

# The generated pages (doctools/reference.py): the LeaderGroup fields from the CRD, the chart's
# values from its schema, both binaries' flags from their --help, the README's headline table
# from docs/benchmarks.md. docs-gen rewrites them; docs-check fails naming each one that differs,
# checks every link and anchor of the Markdown (doctools/links.py, no network), that the status
# page lists every condition type and reason (doctools/conditions.py), that every page gives the
# tested Kubernetes range (doctools/versions.py), that every published figure is what the JSON
# its marker names gives (doctools/figures.py: bench/results), that a newcomer's first commands are
# the install page's, with the images' built tags and bounded waits (doctools/newcomer.py), and
# builds the book.
# docs-binaries: both in one command that names an example, which brings in the dev-dependencies:
# cargo resolves the features the unit tests' build does, and the binaries are the ones it made
# (after .ci/run's workspace build, nothing to compile). The agent alone (-p leadergroup-agent), or
# the operator without an example, asks other features of kube, serde and the client: 33 and 4
# crates compiled again.
.PHONY: docs-binaries
DOCS_BINARIES := --operator target/debug/leadergroup-operator --agent target/debug/leadergroup-agent
docs-binaries:
	cargo build -q --bin leadergroup-operator --bin leadergroup-agent --example ledger

docs-gen: docs-binaries
	doctools/reference.py write $(DOCS_BINARIES)

docs-check: docs-binaries
	doctools/reference.py check $(DOCS_BINARIES)
	doctools/links.py
	doctools/member_role.py
	doctools/conditions.py
	doctools/versions.py
	doctools/figures.py
	doctools/newcomer.py
	@out=$$("$$(doctools/mdbook.sh)" build 2>&1); echo "$$out"; \
	  if grep -q WARN <<<"$$out"; then echo "docs-check: mdbook warns (above)"; exit 1; fi

# Licenses, bans and sources of every dependency (deny.toml), with the pinned cargo-deny.
.PHONY: deny
deny:
	"$$(controlplane/cargo-tool.sh deny)" check licenses bans sources

# The tests that need no cluster: every crate's library and binary unit tests, the doc tests (all
# no_run: compiled, not run) and the ledger example's unit tests (cargo only builds examples
# unless named).
unit:
	cargo test --workspace --lib --bins
	cargo test --workspace --doc
	cargo test --example ledger

# The integration test targets: every [[test]] cargo runs by default (tests/it, testenv's,
# client's, agent's), named one by one so that neither the unit tests run again nor tests/e2e
# (test = false) runs here: a `--test '*'` glob would take it too. From cargo metadata, so a new
# integration target is never left out.
IT_TESTS = $(eval IT_TESTS := $(or $(shell cargo metadata --no-deps --format-version 1 | python3 -c \
  'import json, sys; m = json.load(sys.stdin); print(" ".join(sorted({"--test " + t["name"] for p in m["packages"] for t in p["targets"] if "test" in t["kind"] and t.get("test", True)})))'),\
  $(error no integration test targets found in cargo metadata)))$(IT_TESTS)

# Layer 2, the light cluster, at both ends of the supported Kubernetes range (README, "Supported
# Kubernetes versions"): `make it` against the newest minor's kube-apiserver (the pinned control
# plane), `make it-oldest` against the oldest's (controlplane/build-oldest.sh; LEADERGROUP_BIN_DIR
# points the clusters a test starts for itself at it too). Compiles first (so the cluster does not
# idle through a build; the whole workspace, as `cargo test` would: the GC-pause test runs the
# ledger example's binary), then starts one control plane for all test binaries. The trap stops it
# when the tests end; the watchdog (--watch-pid: this recipe's shell) when make is killed instead.
# The build scripts print their cached bin folder (building it first on a fresh machine); called
# in the recipe, not by make, so that `make -n` builds nothing. Helm 3 too (charts/tests/helm3.sh,
# cached): tests/it/chart.rs runs the chart's release with it as well as with the control plane's
# Helm 4.
# it-recipe BUILD_SCRIPT CLUSTER_DIR
define it-recipe
	cargo test --workspace --no-run
	charts/tests/helm3.sh >/dev/null
	@bin=$$($(1)); \
	trap 'controlplane/cluster.sh down --dir "$(2)"' EXIT; \
	controlplane/cluster.sh up --dir "$(2)" --watch-pid $$$$ --bin-dir "$$bin"; \
	start=$$SECONDS; \
	LEADERGROUP_KUBECONFIG="$(2)/kubeconfig" LEADERGROUP_BIN_DIR="$$bin" cargo test --workspace $(IT_TESTS) -- --test-threads=$(TEST_THREADS); \
	echo "it: tests ran in $$((SECONDS - start)) s against kube-apiserver $$("$$bin/kube-apiserver" --version | cut -d' ' -f2)"
endef
.PHONY: it-oldest
it:
	$(call it-recipe,controlplane/build.sh,$(TEST_CLUSTER))
it-oldest:
	$(call it-recipe,controlplane/build-oldest.sh,$(OLDEST_TEST_CLUSTER))

# Every cargo test but the end-to-end ones (what this target ran before the layers had names).
cargo-test: unit it

# Benchmarks (not part of `make test`): bench-e2e first (as root: the end-to-end scenarios
# on a real cluster of their own, about 8 minutes plus the release build), then bench-api (every API-to-API scenario
# against a control plane of its own, about 14 minutes), which writes docs/benchmarks.md with the
# end-to-end section from bench/results/e2e.json, the JSON and the plots. BENCH_ARGS=--quick runs
# each scenario a few times only (a smoke test of the harness).
BENCH_VENV := $(CURDIR)/target/bench-venv
.PHONY: bench bench-api bench-e2e bench-venv
bench: bench-e2e bench-api

bench-venv:
	[[ -x $(BENCH_VENV)/bin/python ]] || python3 -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -c 'import matplotlib' 2>/dev/null || $(BENCH_VENV)/bin/pip install -q 'matplotlib==3.10.*'

bench-api: bench-venv
	nice -n 10 cargo build --release -p leadergroup-operator -p leadergroup-bench -p leadergroup-agent
	CARGO_TARGET_DIR=$(CURDIR)/target/bench-peers nice -n 10 cargo build --release --locked --manifest-path bench/peers/rust/Cargo.toml
	nice -n 10 bench/peers/client-go/build.sh >/dev/null
	env -u LEADERGROUP_KUBECONFIG target/release/leadergroup-bench $(BENCH_ARGS)
	$(BENCH_VENV)/bin/python bench/plot.py $(CURDIR)

# The operator's heap at its peak: the scale scenario at PROFILE_GROUPS groups with the operator
# built with dhat-rs in place of jemalloc (slower: its figures go to target/dhat/repo, not the
# page), then the allocation sites that held the most at the peak (bench/dhat_top.py).
PROFILE_GROUPS ?= 1000
profile-heap:
	CARGO_TARGET_DIR=$(CURDIR)/target/dhat nice -n 10 cargo build --release --locked --features leadergroup-operator/dhat-heap -p leadergroup-operator -p leadergroup-bench
	rm -rf target/dhat/repo && mkdir -p target/dhat/repo/bench target/dhat/repo/docs
	cp -r bench/results target/dhat/repo/bench/ && cp docs/benchmarks.md target/dhat/repo/docs/
	cd target/dhat/repo && env -u LEADERGROUP_KUBECONFIG $(CURDIR)/target/dhat/release/leadergroup-bench --only scale --scale $(PROFILE_GROUPS) --repo .
	for f in target/dhat/repo/dhat-heap-*.json; do bench/dhat_top.py "$$f" 15; done

# The end-to-end benchmark: graceful, crash, frozen and node loss, from the fault to the
# new leader's application acting, ours and the peers with their candidates in pods. The harness
# starts a real cluster in target/bench-e2e-cluster (Kubernetes' default 50 s
# node-monitor-grace-period; E2E_BENCH_GRACE to change it) and always stops it (its own guard, and
# this trap should the harness be killed). Writes bench/results/e2e.json, target/bench-logs/e2e.md,
# the end-to-end section of docs/benchmarks.md and docs/benchmarks-e2e.png. Then the traffic
# path: make e2e-traffic-timings once per kube-proxy setting of TRAFFIC_PROXY_SETTINGS (each a
# cluster of its own), which writes bench/results/traffic.json, and its table into the page.
# Without root it is skipped with a message (the page keeps the last end-to-end run).
E2E_BENCH_CLUSTER := $(CURDIR)/target/bench-e2e-cluster
E2E_BENCH_GRACE ?= 50
# The kube-proxy settings of the traffic timings, as `realcluster.sh up` arguments, one per line
# of the table: iptables default, nftables default, iptables with a 100 ms minSyncPeriod.
TRAFFIC_PROXY_SETTINGS := '' '--proxy-mode nftables' '--proxy-min-sync-period 100ms'
bench-e2e: bench-venv
	@if [[ $$(id -u) != 0 ]]; then echo "bench-e2e: skipped: the real cluster needs root (the page keeps bench/results/e2e.json's run)"; exit 0; fi; \
	controlplane/node-deps.sh; controlplane/node-build.sh >/dev/null; \
	nice -n 10 cargo build --release --locked -p leadergroup-bench -p leadergroup-operator -p leadergroup-agent; \
	nice -n 10 images/build.sh webapp operator agent client-go rust-peer; \
	trap 'controlplane/realcluster.sh down --dir "$(E2E_BENCH_CLUSTER)"' EXIT; \
	env -u LEADERGROUP_KUBECONFIG target/release/leadergroup-bench --only e2e --grace $(E2E_BENCH_GRACE) $(BENCH_ARGS); \
	$(BENCH_VENV)/bin/python bench/plot.py $(CURDIR) e2e
	@# Lines of their own: make runs a line that calls $$(MAKE) even under -n.
	@if [[ $$(id -u) == 0 ]]; then for args in $(TRAFFIC_PROXY_SETTINGS); do \
	  $(MAKE) --no-print-directory e2e-traffic-timings E2E_CLUSTER_ARGS="$$args"; done; fi
	@if [[ $$(id -u) == 0 ]]; then target/release/leadergroup-bench --only page; fi

# The model checker's larger configuration (docs/model.md), explored depth first in a release
# build for 15 minutes at most (it is too large to exhaust in that time: the report says so);
# `make check` explores a smaller one exhaustively through the unit tests. MODEL_ARGS: --config NAME,
# --threads N, --timeout SECS, --first (breadth first, to the first counterexample), --replay (the
# counterexamples kept as regression cases).
.PHONY: model
MODEL_ARGS ?= --config large --timeout 900
model:
	nice -n 10 cargo build --release --locked -p leadergroup-model
	target/release/leadergroup-model $(MODEL_ARGS)

# The input space at length (tests/it/inputs.rs): PROPTEST_CASES generated LeaderGroups (make test
# runs 240) on a light cluster of its own, always stopped. INPUTS_SEED replays a random half.
PROPTEST_CASES ?= 1000
PROPTEST_CLUSTER := $(CURDIR)/target/proptest-cluster
.PHONY: proptest
proptest:
	cargo test --test it --no-run
	@bin=$$(controlplane/build.sh); \
	trap 'controlplane/cluster.sh down --dir "$(PROPTEST_CLUSTER)"' EXIT; \
	controlplane/cluster.sh up --dir "$(PROPTEST_CLUSTER)" --watch-pid $$$$ --bin-dir "$$bin"; \
	LEADERGROUP_KUBECONFIG="$(PROPTEST_CLUSTER)/kubeconfig" PROPTEST_CASES=$(PROPTEST_CASES) \
	  cargo test --test it inputs:: -- --nocapture

# The published chaos run: 11,000 seeded faults against two operator replicas and every pod's
# Membership and application on a control plane of its own (0.3-0.5 s a fault on 2 cores, with the
# machine's load): its result chaos/results/latest.json (the commit measured, dirty or not), then
# docs/chaos.md rendered from it (`leadergroup-chaos --render-only chaos/results/latest.json`
# renders it again without a run). CHAOS_ARGS: --seed N, --faults N, --groups N. `make test`
# runs a short one (tests/it/chaos.rs).
.PHONY: chaos
chaos:
	nice -n 10 cargo build --release --locked -p leadergroup-operator -p leadergroup-chaos
	target/release/leadergroup-chaos --operator target/release/leadergroup-operator --results chaos/results/latest.json --out docs/chaos.md $(CHAOS_ARGS)

# The end-to-end tests on a real cluster of their own in target/e2e-cluster, started with
# a 10 s node-monitor-grace-period (the node-loss test; Kubernetes' default is 50 s) and ALWAYS
# stopped again (trap), whatever failed. As root. Prints each phase's time. The tests take the
# cluster one at a time; E2E_THREADS only changes how libtest schedules them.
E2E_CLUSTER := $(CURDIR)/target/e2e-cluster
# The cluster's logs (kubelets, containerd, control plane) of the last run, kept after the teardown.
E2E_LOGS := $(CURDIR)/target/e2e-logs
E2E_GRACE := 10
E2E_THREADS ?= 1
# E2E_FILTER: libtest's arguments (a test name filter, --skip, --ignored). E2E_CLUSTER_ARGS: more
# arguments of `realcluster.sh up` (--proxy-mode nftables, --proxy-min-sync-period 0s).
E2E_FILTER ?=
E2E_CLUSTER_ARGS ?=
# The traffic tests alone (tests/e2e/traffic.rs: Label, EndpointSlice, the agent's proxy; part of
# make e2e too), and the pod-deleted and container-killed faults measured (traffic::timings_*,
# ignored by make e2e: LEADERGROUP_TRAFFIC_ROUNDS rounds per route and fault, 5 by default; with
# E2E_CLUSTER_ARGS, under kube-proxy's other settings). The timings replace their kube-proxy
# setting's entries in bench/results/traffic.json (make bench-e2e runs every setting, then
# rewrites the page's table).
.PHONY: e2e-traffic e2e-traffic-timings
e2e-traffic: E2E_FILTER = traffic::
e2e-traffic: e2e
e2e-traffic-timings: E2E_FILTER = --ignored traffic::timings_
e2e-traffic-timings: e2e
e2e:
	@t_all=$$SECONDS; \
	phase() { t=$$SECONDS; echo "e2e: == $$1"; }; \
	took() { echo "e2e: == $$1: $$((SECONDS - t)) s"; }; \
	phase "node packages (node-deps.sh)"; controlplane/node-deps.sh; took "node packages"; \
	phase "node binaries (node-build.sh)"; controlplane/node-build.sh >/dev/null; took "node binaries"; \
	phase "release build (images/release-build.sh; .ci/run built it before)"; images/release-build.sh; took "release build"; \
	phase "images"; images/build.sh; took "images"; \
	phase "previous release (images/previous-release.sh, cached)"; images/previous-release.sh >/dev/null; took "previous release"; \
	phase "prometheus build"; prometheus=$$(charts/tests/prometheus-build.sh prometheus); took "prometheus build"; \
	phase "test build"; cargo test --test e2e --no-run; took "test build"; \
	keep_logs() { rm -rf "$(E2E_LOGS)"; mkdir -p "$(E2E_LOGS)"; \
	  for f in "$(E2E_CLUSTER)"/*.log "$(E2E_CLUSTER)"/control/*.log; do [[ -f $$f ]] && cp "$$f" "$(E2E_LOGS)/"; done; \
	  echo "e2e: the cluster's logs are in $(E2E_LOGS)"; }; \
	trap 'keep_logs; phase "cluster down"; controlplane/realcluster.sh down --dir "$(E2E_CLUSTER)"; took "cluster down"; echo "e2e: total $$((SECONDS - t_all)) s"' EXIT; \
	phase "cluster up"; controlplane/realcluster.sh up --dir "$(E2E_CLUSTER)" --node-monitor-grace-period $(E2E_GRACE) $(E2E_CLUSTER_ARGS); took "cluster up"; \
	phase "image import"; images/build.sh --import "$(E2E_CLUSTER)" --no-build; took "image import"; \
	phase "tests"; LEADERGROUP_E2E_KUBECONFIG="$(E2E_CLUSTER)/kubeconfig" LEADERGROUP_PROMETHEUS="$$prometheus" cargo test --test e2e -- --test-threads=$(E2E_THREADS) --nocapture $(E2E_FILTER); took "tests"
