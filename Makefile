# kiln: the two commands a user needs are `make run` and `make test`.
SHELL := /bin/bash
GO ?= go
IMAGE ?= kiln-python:latest
GOTEST_FLAGS ?= -count=1 -timeout 30m
# staticcheck, pinned; installed into bin/tools through the Go module proxy by `make lint`.
STATICCHECK_VERSION := v0.8.2
STATICCHECK := bin/tools/staticcheck-$(STATICCHECK_VERSION)

.PHONY: all build run test test-runsc test-unit test-image test-mcp-deps test-ptc-deps image docker redis lint bench clean chromium compose-up compose-down

all: build

## build: compile bin/kiln
build:
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/kiln ./cmd/kiln

## docker: make sure a Docker daemon answers (installs and starts Debian's docker.io as root on Debian)
docker:
	@deploy/ensure-docker.sh

## redis: make sure redis-server is installed (the store tests start their own on loopback)
redis:
	@deploy/ensure-redis.sh

## chromium: make sure headless Chromium is installed (the dashboard test drives it)
chromium:
	@deploy/ensure-chromium.sh

## image: build the sandbox images $(IMAGE) and $(POLYGLOT_IMAGE) (default kiln-polyglot:latest, built on kiln-python:latest) if their inputs changed
image: docker
	@images/build.sh python $(IMAGE)
	@images/build.sh polyglot $(or $(POLYGLOT_IMAGE),kiln-polyglot:latest)

## run: start kiln on :8080 with warm pools (python:4,polyglot:1 unless POOLS says), building what is missing
run: build image
	POOLS=$${POOLS:-python:4,polyglot:1} SANDBOX_IMAGE=$(IMAGE) ./bin/kiln

## test: everything, against the real Docker daemon and the real image
test: docker redis chromium image lint test-mcp-deps test-ptc-deps
	images/test.sh
	images/test.sh polyglot kiln-polyglot:latest
	$(GO) test $(GOTEST_FLAGS) -p 1 ./...

## test-runsc: the black-box and fault suites again with every sandbox under gVisor (runsc)
test-runsc: docker redis image
	KILN_TEST_RUNTIME=runsc $(GO) test $(GOTEST_FLAGS) -p 1 ./test/integration/ ./test/fault/

## test-mcp-deps: the MCP TypeScript SDK (pinned in test/mcp/node/package-lock.json) for test/mcp, with this machine's npm
test-mcp-deps: test/mcp/node/node_modules/.installed

test/mcp/node/node_modules/.installed: test/mcp/node/package.json test/mcp/node/package-lock.json
	cd test/mcp/node && npm ci --no-audit --no-fund --loglevel=error
	touch $@

## test-ptc-deps: LibreChat's agents package (pinned in test/ptc/node/package-lock.json) for test/ptc, with this machine's npm
# --ignore-scripts: no package there needs its install script, and one of them (reova) would
# send install analytics out.
test-ptc-deps: test/ptc/node/node_modules/.installed

test/ptc/node/node_modules/.installed: test/ptc/node/package.json test/ptc/node/package-lock.json
	cd test/ptc/node && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error
	touch $@

## test-unit: the tests that need no Docker
test-unit:
	$(GO) test -count=1 . ./protocol/... ./docker/... ./pool/... ./executor/... ./session/... ./api/... ./metrics/... ./cmd/... ./store/... ./health/... ./mcp/...

## lint: gofmt, go vet, staticcheck (pinned) and the REPL's mypy --strict; all must be clean
lint: $(STATICCHECK)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(STATICCHECK) ./...
	images/lint.sh

$(STATICCHECK):
	@mkdir -p bin/tools
	GOBIN=$(CURDIR)/bin/tools $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	mv bin/tools/staticcheck $@

## bench: the performance benchmarks (writes test/results/bench/)
bench: docker image build
	$(GO) run ./test/bench

clean:
	rm -rf bin test/results

## compose-up: build bin/kiln, kiln:latest and the sandbox image, then start kiln with Docker Compose (deploy/)
compose-up: build image
	@deploy/compose.sh up

## compose-down: stop kiln's Compose stack (its volumes are kept)
compose-down:
	@deploy/compose.sh down
