# Sextant — see README.md.
GO ?= go
CONFIG_DIR ?= examples/bookinfo

.PHONY: run test test-short test-deps build generate generate-check bench

# A cold build prints the modules it downloads, then nothing for minutes while it compiles: say so first.
# -buildvcs=auto: the binary names its commit (sextant version) even where GOFLAGS turns vcs stamping off.
build:
	@echo "building bin/sextant (the first build downloads modules and takes a few minutes)..."
	$(GO) build -buildvcs=auto -o bin/sextant ./cmd/sextant

# The server on CONFIG_DIR and the demo proxy (sextant demo-proxy) beside it; Ctrl-C stops both.
run: build
	@bash scripts/run.sh $(CONFIG_DIR)

# tests/testlog prints go test's usual output from its -json stream, then lists the skipped tests with their
# reasons and the failed ones; its exit status is go test's.
test: test-deps
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) run ./tests/testlog $(GO) test -json -race -count=1 -timeout 20m ./...

# The contributors' inner loop: vet, gofmt and the tests without -race, less what -short skips; CI runs make test.
test-short:
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) test -short -count=1 ./...

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
# (a cold build takes minutes: scripts/test-env.sh says how long; instant when cached). test-integration starts them on loopback.
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
# behaviour; differences must be in tests/conformance/allowlist.txt. Cold (empty build cache) it took 17 minutes
# on 2 busy cores; warm, under 30 s (Go's build cache keeps the istiod build between runs).
.PHONY: test-conformance

test-conformance:
	cd tests/conformance && $(GO) vet ./... && $(GO) test -count=1 -timeout 40m ./...

# --- Fuzzing: each target for FUZZTIME, one after the other (go test takes one -fuzz target at a time).
# FUZZ_PARALLEL limits the fuzzing processes (default: one per core). Inputs that fail land in the package's
# testdata/fuzz/ and become seeds of plain go test once committed. E.g. make fuzz FUZZTIME=10m FUZZ_PARALLEL=1
# -timeout 0: go test's default 10m would end a run of FUZZTIME=10m; -fuzztime bounds it. FUZZ_MINIMIZE bounds
# the minimizing of each new input, in runs of the target: with Go's default, 60s, minimizing took most of a
# 1-minute run (FuzzADS: 2,600 inputs a minute with 2s, 4,800 with 100x).
.PHONY: fuzz
FUZZTIME ?= 30s
FUZZ_PARALLEL ?=
FUZZ_MINIMIZE ?= 100x
FUZZ_TARGETS = FuzzParse:./pilot/config/ FuzzParse:./pilot/mesh/ FuzzADS:./pilot/xds/

fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		name=$${t%%:*}; pkg=$${t#*:}; \
		echo "== $$name $$pkg ($(FUZZTIME))"; \
		$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZ_MINIMIZE) -timeout 0 $(if $(FUZZ_PARALLEL),-parallel $(FUZZ_PARALLEL)) $$pkg; \
	done
