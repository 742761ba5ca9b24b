# Sextant — see README.md.
GO ?= go
CONFIG_DIR ?= examples/bookinfo

.PHONY: run test test-deps build generate generate-check bench

build:
	$(GO) build -o bin/sextant ./cmd/sextant

run: build
	./bin/sextant discovery --config-dir $(CONFIG_DIR)

test: test-deps
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) test -race -count=1 ./...

# What the tests need from the system (Chromium for the dashboard's browser test); tolerates failure.
test-deps:
	sh scripts/install-test-deps.sh

# The transport's property test (tests/xdsclient) at length: make test runs 4 sequences of 12 steps.
.PHONY: test-property
PROPERTY_ARGS ?= -xdsclient.sequences=40 -xdsclient.steps=30

test-property:
	$(GO) test -race -count=1 -timeout 30m -run '^TestClientsEndWhereTheServerSays$$' ./tests/xdsclient/ $(PROPERTY_ARGS)

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

generate:
	bash api/generate.sh

generate-check: generate
	git diff --exit-code -- api/

# --- Integration tests against a real kube-apiserver and etcd (tests/integration, and the load harness's
# -source kube run in tests/load) ---
# test-env builds both from the versions pinned in tools/ into a cache outside the repository
# (~13 minutes cold on 2 cores; instant when cached). test-integration starts them on loopback.
.PHONY: test-env test-integration

test-env:
	bash scripts/test-env.sh

test-integration:
	$(GO) test -tags integration -count=1 -v -timeout 30m ./tests/integration/
	$(GO) test -tags integration -count=1 -v -timeout 5m -run '^TestKubeSource$$' ./tests/load/

# --- Load harness (tests/load): generated mesh, simulated sidecars and ztunnels, per-change latency, bytes,
# server CPU and memory. Defaults: 300 services × 3 ports, 10 pods each, 300 delta sidecars, all scenarios.
# E.g. make load LOAD_ARGS="-services 100 -sidecars 100 -reps 20 -json load.json". See docs/benchmarks.md.
.PHONY: load
LOAD_ARGS ?=

load:
	$(GO) run ./tests/load $(LOAD_ARGS)

# --- Conformance against istiod (tests/conformance, a module of its own so the product never depends on
# istio.io/istio): each case's YAML rendered by istiod's in-process generator and by Sextant, compared by
# behaviour; differences must be in tests/conformance/allowlist.txt. The cold build is ~10 minutes on 2 cores
# (Go's build cache keeps it for the next run).
.PHONY: test-conformance

test-conformance:
	cd tests/conformance && $(GO) vet ./... && $(GO) test -count=1 -timeout 40m ./...
