# The two set-up commands are `make run` and `make test`; see README.md.
SHELL := bash
CARGO ?= cargo
# Incremental compilation keeps a second copy of every workspace crate per build variant: about
# 15 GB for a cold `make test`, against 3.2 GB without. It only pays off when editing and
# rebuilding one crate over and over; `CARGO_INCREMENTAL=1 make ...` turns it back on.
CARGO_INCREMENTAL ?= 0
export CARGO_INCREMENTAL

.PHONY: all build test lint deny fmt unit upstream-compat disk-check testenv-bins prometheus-bins prometheus-checks dashboards-picture run crds deploy bench-webhook bench-webhook-abuse bench-controller bench-kubeconfig bench-convert fuzz-reviews mutants mutants-diff soak

all: build

build:
	$(CARGO) build --workspace

## Builds (once, cached outside the repository) etcd, kube-apiserver, kubectl and gardener-apiserver.
testenv-bins:
	@tests/bins/build.sh >/dev/null

## Local environment: control plane, real Gardener API + simulator, our programs, sample Runtime.
## Prints `kim-dev: ready`, runs until Ctrl-C. Flags: make run RUN_ARGS="--step-delay 5s".
run: testenv-bins
	$(CARGO) build --workspace --bins
	$(CARGO) run -q -p kim-tests --bin kim-dev -- $(RUN_ARGS)

# The end-to-end tests need the control-plane binaries (built once, cached) and Prometheus.
test unit: testenv-bins prometheus-bins

## Prometheus and promtool from Debian's `prometheus` package, unpacked once (no root, no
## service started) into the cache outside the repository; the e2e tests `deploy::prometheus`
## scrape the controller and webhook with it and run `promtool check rules`, `promtool test
## rules` and `promtool check metrics` (docs/testing.md). KIM_PROMETHEUS_DIR points the tests
## at another folder holding both binaries.
PROMETHEUS_CACHE := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/kim-tools/prometheus
KIM_PROMETHEUS_DIR ?= $(PROMETHEUS_CACHE)/usr/bin
export KIM_PROMETHEUS_DIR
prometheus-bins:
	@[ -x "$(KIM_PROMETHEUS_DIR)/prometheus" ] && [ -x "$(KIM_PROMETHEUS_DIR)/promtool" ] || { \
	  [ "$(KIM_PROMETHEUS_DIR)" = "$(PROMETHEUS_CACHE)/usr/bin" ] || { echo "kim: KIM_PROMETHEUS_DIR=$(KIM_PROMETHEUS_DIR) holds no prometheus and promtool"; exit 1; }; \
	  command -v apt-get >/dev/null 2>&1 || { echo "kim: Prometheus is missing and there is no apt-get to fetch Debian's package: set KIM_PROMETHEUS_DIR to a folder with prometheus and promtool (2.42 or later)"; exit 1; }; \
	  echo "kim: unpacking Debian's prometheus package into $(PROMETHEUS_CACHE) (once)"; \
	  tmp=$$(mktemp -d) && chmod 755 "$$tmp" && \
	  { (cd "$$tmp" && apt-get download -q prometheus) >"$$tmp/apt.log" 2>&1 || \
	    { [ "$$(id -u)" = 0 ] && apt-get update -q >>"$$tmp/apt.log" 2>&1 && (cd "$$tmp" && apt-get download -q prometheus) >>"$$tmp/apt.log" 2>&1; } || \
	    { cat "$$tmp/apt.log"; echo "kim: apt-get download prometheus failed (as root, run apt-get update first)"; rm -rf "$$tmp"; exit 1; }; } && \
	  rm -rf "$(PROMETHEUS_CACHE)" && mkdir -p "$(PROMETHEUS_CACHE)" && \
	  dpkg -x "$$tmp"/prometheus_*.deb "$(PROMETHEUS_CACHE)" && rm -rf "$$tmp" && \
	  "$(KIM_PROMETHEUS_DIR)/promtool" --version | head -n 1; }

## Only the Prometheus checks: alerts (`promtool check rules`, `promtool test rules` with
## tests/prometheus/*.yaml), the dashboards' ConfigMaps, and a real Prometheus scraping the
## controller and webhook while Runtimes, GardenerClusters, RuntimeAccesses and admissions
## happen (every dashboard query and alert expression returns series; `promtool check metrics`
## on both /metrics). `make test` runs them with everything else.
prometheus-checks: testenv-bins prometheus-bins
	$(CARGO) build -p kim-webhook --bins
	$(CARGO) test -p kim-tests --test e2e deploy::prometheus

## The dashboards as pictures (docs/img/dashboard-*.png, docs/operations.md): the e2e test
## `deploy::prometheus` writes every dashboard query's series from its real Prometheus
## (KIM_DASHBOARD_DATA), and tests/prometheus/render.py draws them with matplotlib (pip install
## matplotlib, or Debian's python3-matplotlib). Not part of `make test`.
DASHBOARD_DATA := $(abspath $(or $(CARGO_TARGET_DIR),target))/dashboard-series.json
dashboards-picture: testenv-bins prometheus-bins
	@python3 -c 'import matplotlib' 2>/dev/null || { echo "kim: python3 has no matplotlib: pip install matplotlib, or apt-get install python3-matplotlib"; exit 1; }
	$(CARGO) build -p kim-webhook --bins
	KIM_DASHBOARD_DATA=$(DASHBOARD_DATA) $(CARGO) test -p kim-tests --test e2e deploy::prometheus::dashboards_and_alerts
	python3 tests/prometheus/render.py $(DASHBOARD_DATA) docs/img

# A full disk shows up as a compiler or linker I/O error minutes into the build; say it first.
# A cold `make test` writes about 3.2 GB to the target directory (and the first control-plane
# build about 5 GB of temporary Go caches, removed afterwards). Warns only: a warm target
# directory needs far less.
disk-check:
	@dir="$${CARGO_TARGET_DIR:-target}"; [ -d "$$dir" ] || dir=.; \
	free_kb=$$(df -Pk "$$dir" | awk 'NR==2 {print $$4}'); \
	if [ -n "$$free_kb" ] && [ "$$free_kb" -lt 6000000 ]; then \
	  echo "kim: warning: only $$((free_kb / 1024)) MiB free for $$dir; a cold build needs about 6 GB (docs/testing.md)" >&2; \
	fi

testenv-bins run unit: disk-check
upstream-compat: testenv-bins

fmt:
	$(CARGO) fmt --all

# `--all-targets` leaves out targets with `test = false`: both halves of the upstream suite are
# named so that they are compiled and linted even where KIM_UPSTREAM_DIR is not set.
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) clippy -p kim-tests --test upstream_compat_e2e -- -D warnings
	$(CARGO) clippy -p kim-shared --test upstream_compat -- -D warnings

# Panics print their message without a backtrace: a failing end-to-end test's message says what
# failed, and its frames are the async runtime's, forty lines each that push the other failures'
# messages out of a CI log's tail. `RUST_BACKTRACE=1 cargo test ...` for one test.
unit upstream-compat: export RUST_BACKTRACE = 0

# kim-dev's end-to-end test starts the kim-webhook and kim-controller binaries: build them first
# (cargo test builds a package's binaries only for that package's own integration tests).
unit:
	$(CARGO) build --workspace --bins
	$(CARGO) test --workspace
	@$(MAKE) --no-print-directory upstream-compat

## The upstream-compatibility suite: our CRDs, types, validation, conversion and controller against
## upstream KIM's own files, read from $(KIM_UPSTREAM_DIR), a folder holding upstream/ (the 2025
## baseline) and upstream-2026-07/ (.ci/run sets it to the shared folder beside the checkout). Without it, says that it did not
## run; with it set and a folder missing, the suite fails naming the path.
upstream-compat:
	@if [ -z "$$KIM_UPSTREAM_DIR" ]; then \
	  echo "kim: the upstream-compatibility suite did NOT run: KIM_UPSTREAM_DIR is not set."; \
	  echo "kim: to run it: KIM_UPSTREAM_DIR=/path/to/folder-with-upstream make upstream-compat (docs/testing.md)"; \
	else \
	  echo "kim: upstream-compatibility suite with KIM_UPSTREAM_DIR=$$KIM_UPSTREAM_DIR"; \
	  $(CARGO) build --workspace --bins && \
	  $(CARGO) test -p kim-shared --test upstream_compat && \
	  $(CARGO) test -p kim-tests --test upstream_compat_e2e; \
	fi

## Supply chain (deny.toml): licences, banned and duplicate crates, crate sources; RustSec
## advisories when a copy of the database is on this machine (the build machine cannot fetch it:
## `cargo deny fetch` on one that can, or copy it to $(ADVISORY_DBS)). cargo-deny is installed
## once into the cache outside the repository (about 5 minutes).
CARGO_DENY_VERSION := 0.20.2
CARGO_DENY := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/kim-tools/cargo-deny-$(CARGO_DENY_VERSION)/bin/cargo-deny
ADVISORY_DBS := $(or $(CARGO_HOME),$(HOME)/.cargo)/advisory-dbs
deny:
	@[ -x "$(CARGO_DENY)" ] || { echo "kim: installing cargo-deny $(CARGO_DENY_VERSION) (once)"; \
	  $(CARGO) install --quiet --locked cargo-deny --version $(CARGO_DENY_VERSION) \
	    --root "$(dir $(patsubst %/,%,$(dir $(CARGO_DENY))))"; }
	@# cargo-deny reads `cargo metadata` offline, which needs every platform's crates of
	@# Cargo.lock in the local registry, not only the ones this machine builds.
	$(CARGO) fetch --locked --quiet
	"$(CARGO_DENY)" --offline check licenses bans sources
	@if ls -d "$(ADVISORY_DBS)"/advisory-db-*/.git >/dev/null 2>&1; then \
	  "$(CARGO_DENY)" --offline check advisories; \
	else \
	  echo "kim: RustSec advisories NOT checked: no advisory database in $(ADVISORY_DBS) (this machine cannot fetch it; see the deny target in the Makefile)"; \
	fi

## Mutation testing of the pure core (docs/testing.md#mutation-testing-make-mutants): every
## mutant cargo-mutants makes in MUTANTS_FILES is built and tested with the unit and property
## tests of its crate; survivors are listed in target/mutants/mutants.out/missed.txt. Not part
## of `make test` (about 15 s per kim-shared mutant with `--in-place`, hours for all of them on
## 2 cores: narrow MUTANTS_FILES). Incremental compilation is on here: each mutant rebuilds the
## same crate, 6 s instead of 33 s. MUTANTS_ARGS passes further flags to cargo-mutants
## (`--baseline skip --timeout 120`, `--re NAME`). cargo-mutants is installed once into the
## cache outside the repository (about 10 minutes).
CARGO_MUTANTS_VERSION := 27.1.0
CARGO_MUTANTS := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/kim-tools/cargo-mutants-$(CARGO_MUTANTS_VERSION)/bin/cargo-mutants
MUTANTS_FILES ?= certs/src/plan.rs controller/src/runtime/classify.rs \
	controller/src/gardener_cluster/rotation.rs 'shared/src/validation/**' \
	shared/src/validation.rs 'shared/src/convert/**' shared/src/convert.rs \
	shared/src/defaults.rs shared/src/config.rs 'shared/src/config/**'
MUTANTS_ARGS ?=
mutants:
	@[ -x "$(CARGO_MUTANTS)" ] || { echo "kim: installing cargo-mutants $(CARGO_MUTANTS_VERSION) (once)"; \
	  $(CARGO) install --quiet --locked cargo-mutants --version $(CARGO_MUTANTS_VERSION) \
	    --root "$(dir $(patsubst %/,%,$(dir $(CARGO_MUTANTS))))"; }
	@mkdir -p target
	CARGO_INCREMENTAL=1 "$(CARGO_MUTANTS)" mutants --output target/mutants $(foreach f,$(MUTANTS_FILES),--file $(f)) $(MUTANTS_ARGS)

## The mutants of `make mutants` on the lines changed since MUTANTS_BASE (HEAD~1: the last
## commit, with what is not committed yet; MUTANTS_BASE=origin/main for a branch; any
## `git diff` arguments, e.g. MUTANTS_BASE="C~1 C" for commit C alone): minutes for a change
## to the rules instead of days for all of them.
MUTANTS_BASE ?= HEAD~1
mutants-diff:
	@mkdir -p target
	git diff $(MUTANTS_BASE) > target/mutants.diff
	@$(MAKE) --no-print-directory mutants MUTANTS_ARGS="$(MUTANTS_ARGS) --in-diff target/mutants.diff"

## Everything CI runs: format, lint, supply chain, all unit and end-to-end tests (and the
## upstream-compatibility suite when KIM_UPSTREAM_DIR is set).
test: lint deny unit

KUBECTL ?= kubectl

## Installs the CRDs and the whole manager (namespace kcp-system) into the cluster of the current
## KUBECONFIG. The images are built from deploy/Containerfile (see its header).
# --force-conflicts: over CRDs applied client-side (upstream KIM's), `spec.versions` is an
# atomic list owned by kubectl-client-side-apply (docs/upgrade-from-upstream.md, step 3).
deploy:
	$(KUBECTL) apply --server-side --force-conflicts -f crds/
	$(KUBECTL) apply -k deploy/

## Regenerates crds/*.yaml from the Rust types.
crds:
	$(CARGO) run -q -p kim-shared --bin kim-crdgen -- crds

## Criterion benchmark of one Runtime -> Shoot conversion (create and patch); prints the time
## per conversion (microseconds).
bench-convert:
	$(CARGO) bench -p kim-shared --bench convert

## Randomised AdmissionReviews (KIM_FUZZ_CASES, default 1,000,000; KIM_FUZZ_SEED, default fixed)
## through the mutating and validating webhooks and the Runtime -> Shoot conversion: no panic, no
## case over 1 s, every admitted Runtime converts. Prints the counts (docs/benchmarks.md); a
## failing case is replayed with `--case N`. `cargo test` runs 2,000 of them.
fuzz-reviews:
	$(CARGO) bench -p kim-webhook --bench random_reviews

## Load on kim-webhook over TLS keep-alive (16 connections): /validate/runtime and
## /mutate/runtime against the bench's own no-op and generic-decode reference server, a paced
## 5k req/s run, RSS. Prints the figures and the verdicts on the targets and writes
## docs/benchmarks.md. The same endpoints once more with wrk (installed from the Debian archive
## when missing and possible, else the cross-check says it was not run). Then Runtime creates
## through the real apiserver with and without the webhooks (p50/p99 and the p99 verdict).
bench-webhook:
	@command -v wrk >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
		&& apt-get install -y -q wrk >/dev/null 2>&1; } || echo "bench-webhook: wrk is not installed and could not be; the wrk cross-check will say so"
	$(CARGO) build --release -p kim-webhook --bins
	$(CARGO) bench -p kim-webhook --bench admission_load
	$(CARGO) bench -p kim-tests --bench webhook_latency

## kim-webhook under attack with its default limits: slow header and body senders, an HTTP/2
## stream flood, concurrent maximum-size malformed bodies, Runtimes with 100,000 administrators;
## peak RSS against the 128 MiB limit, health-check and well-formed admission latencies per
## phase against a baseline of the same run (docs/benchmarks.md).
bench-webhook-abuse:
	$(CARGO) build --release -p kim-webhook --bins
	$(CARGO) bench -p kim-webhook --bench admission_abuse

## GardenerCluster reconciler at scale: creation wave, Gardener calls at steady state, forced
## rotation wave of KIM_BENCH_CLUSTERS (10000) vs a baseline of writing as many Secrets directly.
## adminkubeconfig answered by the signing stand-in (KIM_BENCH_GARDENER=sim, default); the real
## gardener-apiserver signs with KIM_BENCH_GARDENER=real (1000 clusters: ~370 ms per call).
## Prints the figures (docs/benchmarks.md).
bench-kubeconfig: testenv-bins
	$(CARGO) bench -p kim-tests --bench kubeconfig

## Runtime controller at scale: KIM_BENCH_SIZES (1000,10000) Runtimes until all are Ready, with
## the release kim-controller as its own process, next to a baseline that writes the same objects
## straight to the apiservers; peak RSS, Gardener requests per Runtime, a steady window.
## Prints the figures and writes them into docs/benchmarks.md.
bench-controller: testenv-bins
	$(CARGO) build --release -p kim-controller
	$(CARGO) bench -p kim-tests --bench controller

## Soak: KIM_SOAK_SECS (3600) of steady churn (Runtimes created through the webhooks, changed,
## hibernated and woken, deleted; admin kubeconfig and RuntimeAccess token rotations at short
## periods; RuntimeAccesses issued and deleted) with kim-controller and kim-webhook as processes
## of their own; samples their RSS, fds and threads every 30 s and, after KIM_SOAK_WARMUP_SECS
## (600), checks RSS growth <= 5 %, flat fds and threads, and that everything converged once the
## churn stops. Prints the figures, writes docs/benchmarks.md, fails when a verdict fails.
## SOAK_PROFILE=dev runs the debug build (no release compile).
SOAK_PROFILE ?= release
soak: testenv-bins
	$(CARGO) build --profile $(SOAK_PROFILE) -p kim-controller -p kim-webhook --bins
	$(CARGO) bench --profile $(SOAK_PROFILE) -p kim-tests --bench soak
