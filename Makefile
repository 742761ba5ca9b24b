# Sextant — see README.md.
GO ?= go
CONFIG_DIR ?= examples/bookinfo

.PHONY: run test test-race build vet fmt generate generate-check bench

build:
	$(GO) build -o bin/sextant ./cmd/sextant

run: build
	./bin/sextant discovery --config-dir $(CONFIG_DIR)

test:
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) test -race -count=1 ./...

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

generate:
	bash api/generate.sh

generate-check: generate
	git diff --exit-code -- api/
