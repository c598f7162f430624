# kiln: the two commands a user needs are `make run` and `make test`.
SHELL := /bin/bash
GO ?= go
IMAGE ?= kiln-python:latest
GOTEST_FLAGS ?= -count=1 -timeout 30m
# staticcheck, pinned; installed into bin/tools through the Go module proxy by `make lint`.
STATICCHECK_VERSION := v0.8.2
STATICCHECK := bin/tools/staticcheck-$(STATICCHECK_VERSION)
# buf, pinned; `make proto` runs it through the Go module proxy.
BUF_VERSION := v1.75.0

# When make test began (epoch seconds), for the steps' times; sub-makes inherit it.
ifndef TEST_STARTED
TEST_STARTED := $(shell date +%s)
endif
export TEST_STARTED

.PHONY: all build run test test-runsc test-k8s test-unit test-image test-mcp-deps test-ptc-deps test-jupyter-deps test-e2b-deps proto image docker redis lint bench bench-before clean chromium compose-up compose-down

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

## s3: make sure versitygw (an S3-compatible server, built from the Go module proxy into .cache) is there for the object store's tests
.PHONY: s3
s3:
	@deploy/ensure-versitygw.sh >/dev/null

## helm: make sure Helm v3 (built from the Go module proxy into .cache) is there for the chart's tests
.PHONY: helm
helm:
	@deploy/ensure-helm.sh >/dev/null

## chromium: make sure headless Chromium is installed (the dashboard test drives it)
chromium:
	@deploy/ensure-chromium.sh

.PHONY: prometheus
## prometheus: make sure Debian's prometheus and promtool are installed (the rules' unit tests and the Prometheus test use them)
prometheus:
	@deploy/ensure-prometheus.sh

## image: build the sandbox images $(IMAGE) and $(POLYGLOT_IMAGE) (default kiln-polyglot:latest, built on kiln-python:latest) if their inputs changed
image: docker
	@images/build.sh python $(IMAGE)
	@images/build.sh polyglot $(or $(POLYGLOT_IMAGE),kiln-polyglot:latest)

## run: start kiln on :8080 with warm pools (python:4,polyglot:1 unless POOLS says), building what is missing: kiln and the Python image side by side, the polyglot image once Python answers (its languages answer 503 until then); each step prints its elapsed time
run:
	@IMAGE=$(IMAGE) deploy/run.sh

## test: everything, against the real Docker daemon and the real images: the images' own tests, every Go package (the short soak, the Prometheus checks and the notebook fidelity suite included, whose figure it prints; nothing may be left in TMPDIR), each fuzz target for FUZZTIME, then the black-box suites under gVisor (test-runsc) and on Kubernetes (test-k8s)
# Each step prints its time and the time since make test began (test/timed.sh). What only
# compiles (versitygw, Helm, the test Kubernetes, the fuzz binaries) builds in the background
# beside the steps that wait on containers (test/prebuild.sh), and its times come last.
test:
	@test/prebuild.sh tools
	@test/timed.sh "daemons, tools, images and lint" $(MAKE) --no-print-directory test-deps
	@test/prebuild.sh later
	@test/timed.sh "the Python image's tests" images/test.sh
	@test/timed.sh "the polyglot image's tests" images/test.sh polyglot kiln-polyglot:latest
	@test/timed.sh "every Go package" test/leftovers.sh $(GO) test $(GOTEST_FLAGS) -p 1 ./...
	@tail -n 1 test/results/fidelity/report.txt
	@test/timed.sh "the fuzz targets" $(MAKE) --no-print-directory fuzz-short
	@test/timed.sh "the suites under gVisor" $(MAKE) --no-print-directory test-runsc
	@test/timed.sh "the suites on Kubernetes" $(MAKE) --no-print-directory test-k8s
	@test/prebuild.sh report

## test-deps: what make test needs before its suites: the daemons and tools it starts or builds, the images, and the lint (versitygw and Helm last: make test builds them in the background meanwhile)
.PHONY: test-deps
test-deps: docker redis chromium prometheus image lint test-mcp-deps test-ptc-deps test-jupyter-deps test-e2b-deps s3 helm

## test-runsc: the sandbox contract, egress, the integration, fault, abuse and E2B suites again with every sandbox under gVisor (runsc); make test ends with it
test-runsc: docker redis image test-e2b-deps
	test/leftovers.sh env KILN_TEST_RUNTIME=runsc $(GO) test $(GOTEST_FLAGS) -p 1 ./test/runtime/ ./test/egress/ ./test/integration/ ./test/fault/ ./test/abuse/ ./test/e2b/

## test-mcp-deps: the MCP TypeScript SDK (pinned in test/mcp/node/package-lock.json) for test/mcp, with this machine's npm
test-mcp-deps: test/mcp/node/node_modules/.installed

test/mcp/node/node_modules/.installed: test/mcp/node/package.json test/mcp/node/package-lock.json
	cd test/mcp/node && npm ci --no-audit --no-fund --loglevel=error
	touch $@

## test-jupyter-deps: JupyterLab's client library and puppeteer-core (pinned in test/jupyter/node/package-lock.json), and Debian's classic Notebook server, nbclient and jupyter_server (its gateway kernel manager), for test/jupyter
test-jupyter-deps: test/jupyter/node/node_modules/.installed

test/jupyter/node/node_modules/.installed: test/jupyter/node/package.json test/jupyter/node/package-lock.json
	deploy/ensure-package.sh jupyter-notebook
	deploy/ensure-package.sh jupyter-execute python3-nbclient
	deploy/ensure-package.sh python3:jupyter_server python3-jupyter-server
	cd test/jupyter/node && npm ci --no-audit --no-fund --loglevel=error
	touch $@

## test-ptc-deps: LibreChat's agents package (pinned in test/ptc/node/package-lock.json) for test/ptc, with this machine's npm
# --ignore-scripts: no package there needs its install script, and one of them (reova) would
# send install analytics out.
test-ptc-deps: test/ptc/node/node_modules/.installed

test/ptc/node/node_modules/.installed: test/ptc/node/package.json test/ptc/node/package-lock.json
	cd test/ptc/node && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error
	touch $@

## test-e2b-deps: E2B's JS SDK, the pinned version and the oldest kiln supports (test/e2b/node/package-lock.json), for test/e2b
test-e2b-deps: test/e2b/node/node_modules/.installed

test/e2b/node/node_modules/.installed: test/e2b/node/package.json test/e2b/node/package-lock.json
	cd test/e2b/node && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error
	touch $@

## proto: regenerate e2b/gen from the .proto files in e2b/proto (buf, pinned, through the Go module proxy)
proto:
	cd e2b && $(GO) run github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION) generate

## test-unit: the tests that need no Docker: every package outside test/
test-unit:
	$(GO) test -count=1 $$($(GO) list ./... | grep -v '^github.com/kilnsh/kiln/test/')

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

## bench: the performance benchmarks, Docker then Kubernetes (the test cluster, started and stopped around it); writes test/results/bench/
bench: docker image build test-jupyter-deps test-e2b-deps
	deploy/k8s/test.sh $(GO) run ./test/bench $(BENCH_FLAGS)

## bench-before: this tree against an older build, side by side (BEFORE=commit; writes test/results/bench-before/)
BEFORE ?= 8ccef92
bench-before: docker image
	test/bench/before.sh $(BEFORE)

clean:
	rm -rf bin test/results

## compose-up: build bin/kiln, kiln:latest and the sandbox image, then start kiln with Docker Compose (deploy/)
compose-up: build image
	@deploy/compose.sh up

## compose-down: stop kiln's Compose stack (its volumes are kept)
compose-down:
	@deploy/compose.sh down

.PHONY: k8s-up k8s-down k8s-smoke test-k8s
# The suites run against kiln on Kubernetes: what does not depend on Docker itself.
K8S_SUITES := ./test/runtime/ ./test/egress/ ./test/integration/ ./test/abuse/ ./test/languages/ ./test/librechat/ ./test/mcp/ ./test/jupyter/ ./test/e2b/
## test-k8s: the sandbox contract, egress, the integration, abuse, language, LibreChat, MCP, Jupyter and E2B suites with every sandbox a Pod of the single-node test Kubernetes (built from the Go module proxy into .cache/k8s on first use), which it starts and stops; make test ends with it
test-k8s: docker helm chromium image test-mcp-deps test-ptc-deps test-jupyter-deps test-e2b-deps
	test/leftovers.sh deploy/k8s/test.sh $(GO) test $(GOTEST_FLAGS) -p 1 $(K8S_SUITES)

## k8s-up: start the single-node Kubernetes for tests (deploy/k8s/cluster.sh up); builds it into .cache/k8s from the Go module proxy on first use (minutes), then starts in seconds
k8s-up: docker
	@deploy/k8s/cluster.sh up

## k8s-down: stop the test Kubernetes and undo every host change it made; the build cache and imported images stay
k8s-down:
	@deploy/k8s/cluster.sh down

## k8s-smoke: a hardened Pod from $(IMAGE), a NetworkPolicy and (with a controller-manager) a Deployment on the test Kubernetes
k8s-smoke: k8s-up
	@IMAGE=$(IMAGE) deploy/k8s/smoke.sh

.PHONY: soak
## soak: the full soak (test/soak, SOAK=full): 1,000+ mixed requests per store (disk, then Redis) with faults injected, reports in test/results/soak/; it restarts the Docker daemon, so it holds the exclusive lock
soak: docker redis image
	SOAK=full flock -x -o /tmp/kiln-dockerd.lock $(GO) test -count=1 -v -timeout 60m -run TestSoak ./test/soak/

.PHONY: fuzz fuzz-short
# The fuzz targets, as package:Target. go test -fuzz takes one target at a time.
FUZZ_TARGETS := protocol:FuzzParser protocol:FuzzParserFrames protocol:FuzzDecode docker:FuzzDemux \
	executor:FuzzCheckState session:FuzzSanitizeName session:FuzzSanitizePath store:FuzzValidIDs api:FuzzUploadName \
	egress:FuzzParseAllow
FUZZTIME ?= 10s
FUZZ_LONG ?= 5m
# Extra go test flags, e.g. -parallel 1 on a shared machine. A new interesting input is
# minimized for at most 5s, so that a short run fuzzes rather than minimizes.
FUZZ_FLAGS ?= -fuzzminimizetime 5s

## fuzz-short: every fuzz target for FUZZTIME (10s) each; a failing input is saved under the package's testdata/fuzz
fuzz-short:
	@GO=$(GO) FUZZ_FLAGS="$(FUZZ_FLAGS)" test/fuzz.sh $(FUZZTIME) $(FUZZ_TARGETS)

## fuzz: every fuzz target for FUZZ_LONG (5m) each
fuzz:
	@$(MAKE) --no-print-directory fuzz-short FUZZTIME=$(FUZZ_LONG)
