# sfnlimit: build, lint and test with plain go (no sam CLI needed). `make` lists the targets.
#
# sam build runs the build-<LogicalId> targets below (template.yaml: Metadata BuildMethod makefile,
# ContextPath and ProjectRootDirectory "."), with ARTIFACTS_DIR set to the function's artifact directory.

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

GO        ?= go
FUNCTIONS := $(notdir $(patsubst %/,%,$(wildcard functions/*/)))
ASL_FILES := $(wildcard statemachine/*.asl.json)
NODE_BIN  := node_modules/.bin

# Lambda: provided.al2023 on arm64, a static binary named bootstrap, no RPC mode.
GO_LAMBDA_ENV   := GOOS=linux GOARCH=arm64 CGO_ENABLED=0
GO_LAMBDA_FLAGS := -tags lambda.norpc -trimpath -ldflags "-s -w"

.PHONY: help build lint tools test test-unit test-sim test-e2e demo clean \
	build-RouterFunction build-StarterFunction build-ReleaserFunction

help: ## list the targets
	@echo "sfnlimit: make <target>"
	@grep -E '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | \
		awk 'BEGIN {FS = ":.*## "}; {printf "  %-22s %s\n", $$1, $$2}'

build: ## cross-compile every functions/<name> to bin/<name>/bootstrap (linux/arm64)
	@test -n "$(FUNCTIONS)" || { echo "build: no functions/*/ directories" >&2; exit 1; }
	@for fn in $(FUNCTIONS); do \
		echo "go build functions/$$fn -> bin/$$fn/bootstrap"; \
		$(GO_LAMBDA_ENV) $(GO) build $(GO_LAMBDA_FLAGS) -o bin/$$fn/bootstrap ./functions/$$fn; \
	done

# One target per function of template.yaml, run by sam build.
build-RouterFunction: ## (sam build) router bootstrap into $(ARTIFACTS_DIR)
	$(call lambda-build,router)

build-StarterFunction: ## (sam build) starter bootstrap into $(ARTIFACTS_DIR)
	$(call lambda-build,starter)

build-ReleaserFunction: ## (sam build) releaser bootstrap into $(ARTIFACTS_DIR)
	$(call lambda-build,releaser)

define lambda-build
	@test -n "$(ARTIFACTS_DIR)" || { echo "$@: ARTIFACTS_DIR is not set (sam build sets it)" >&2; exit 1; }
	$(GO_LAMBDA_ENV) $(GO) build $(GO_LAMBDA_FLAGS) -o $(ARTIFACTS_DIR)/bootstrap ./functions/$(1)
endef

lint: tools ## gofmt, go vet, cfn-lint template.yaml, asl-validator on statemachine/*.asl.json
	@unformatted="$$(find . -path ./node_modules -prune -o -name '*.go' -print | xargs -r gofmt -l)"; \
	if [ -n "$$unformatted" ]; then echo "gofmt: these files need gofmt -w:" >&2; echo "$$unformatted" >&2; exit 1; fi
	$(GO) vet ./...
	cfn-lint template.yaml
	@test -n "$(ASL_FILES)" || { echo "lint: no statemachine/*.asl.json" >&2; exit 1; }
	@for f in $(ASL_FILES); do $(NODE_BIN)/asl-validator --json-path "$$f"; done

# The pinned npm tools (asl-validator, fauxqs, node 22) are installed when node_modules is missing
# or older than package.json / package-lock.json (npm writes node_modules/.package-lock.json on
# every install). The Python tools come with the machine and are never skipped: a missing one
# fails with its name.
tools: node_modules/.package-lock.json ## install the pinned npm tools; check jq, moto_server, cfn-lint, aws
	@missing=""; \
	for tool in go node npm jq moto_server cfn-lint aws; do \
		command -v "$$tool" >/dev/null 2>&1 || missing="$$missing $$tool"; \
	done; \
	if [ -n "$$missing" ]; then \
		echo "tools: missing from PATH:$$missing (moto_server, cfn-lint and aws are preinstalled Python tools: moto 5.2.1, cfn-lint 1.51.0, awscli; jq is Debian's, apt-get install jq)" >&2; \
		exit 1; \
	fi
	@test -x $(NODE_BIN)/asl-validator || { echo "tools: $(NODE_BIN)/asl-validator is missing after npm install" >&2; exit 1; }

# npm checks every package's "engines" against the Node that runs npm (the machine's, 20), and
# warns that fauxqs and its dependencies want Node 22: they run on the node@22 package installed
# beside them, so those warnings (EBADENGINE) are dropped and one line says so. npm's exit code
# and every other line are kept.
node_modules/.package-lock.json: package.json $(wildcard package-lock.json)
	@command -v npm >/dev/null 2>&1 || { echo "tools: npm is missing from PATH" >&2; exit 1; }
	@echo "tools: installing the pinned npm tools (asl-validator, fauxqs, and the Node 22 fauxqs runs on)"
	@if [ -f package-lock.json ]; then install=ci; else install=install; fi; \
	npm "$$install" --no-audit --no-fund 2>&1 | { grep -v '^npm warn EBADENGINE' || true; }
	@touch $@

# Test timeouts, per test binary (go test's own default of 10 minutes is too short for ./tests/
# on a busy machine). UNIT_TIMEOUT bounds each package but ./tests/; E2E_TIMEOUT the end-to-end
# suite, about 4.5 minutes on a quiet 2-core machine and several times that on a busy one.
# GOTEST_FLAGS adds go test flags to both steps (for example -p 1 or -run).
UNIT_TIMEOUT ?= 45m
E2E_TIMEOUT  ?= 45m
GOTEST_FLAGS ?=

test: tools ## test-unit, then test-sim, then test-e2e, then lint
	$(MAKE) --no-print-directory test-unit
	$(MAKE) --no-print-directory test-sim
	$(MAKE) --no-print-directory test-e2e
	$(MAKE) --no-print-directory lint

# test-unit runs the simulation under the race detector on a smaller seed set (the detector slows
# it about four times) and without its pinned finds (the tests named *SeedHolds and *SeedsHold,
# which search seeds for their paths and took 20 of its 28 minutes); test-sim runs the full fixed
# set and every pinned find without it.
test-sim: ## the deterministic fault simulation's fixed seed set (500 seeds) without the race detector
	$(GO) test -count=1 -timeout 15m $(GOTEST_FLAGS) ./internal/tools/simworld

# The packages run as go test runs them (as many at once as there are CPUs). The end-to-end suite
# is a step of its own, so that its stacks (two at a time on 2 cores) never share the machine with
# another package's emulators.
test-unit: tools ## go test -race every package but the end-to-end suite (UNIT_TIMEOUT each)
	$(GO) test -race -count=1 -timeout $(UNIT_TIMEOUT) $(GOTEST_FLAGS) $$($(GO) list ./... | grep -v -e '/tests$$' -e '/simworld$$')
	$(GO) test -race -count=1 -timeout $(UNIT_TIMEOUT) -skip 'Seeds?Holds?$$' $(GOTEST_FLAGS) ./internal/tools/simworld

test-e2e: tools ## go test -race ./tests/, the end-to-end suite on the local stack (E2E_TIMEOUT)
	$(GO) test -race -count=1 -timeout $(E2E_TIMEOUT) $(GOTEST_FLAGS) ./tests/

demo: tools ## run the demo on the local stack (installs the pinned npm tools first, as test does)
	$(GO) run ./cmd/sfnlimit demo

.PHONY: bench
bench: ## compare lane strategies with an ideal semaphore in virtual time (flags: go run ./cmd/bench --help)
	$(GO) run ./cmd/bench $(BENCH_FLAGS)

.PHONY: bench-keys
bench-keys: ## per-key limits: a noisy key beside quiet keys, keyed scheduler vs FIFO order, in virtual time (BENCH_FLAGS)
	$(GO) run ./cmd/bench --keys $(BENCH_FLAGS)

.PHONY: bench-key-rates
bench-key-rates: ## key rates: a noisy key held to its rate beside quiet keys, the real handlers in the simulated world, figures from Step Functions' start dates
	$(GO) test -count=1 -run 'TestKeyRates$$' -v ./internal/tools/simworld

.PHONY: bench-pools
bench-pools: ## shared pools: a light type beside a heavy type's backlog in one pool, and shares 3:1, the real handlers in the simulated world
	$(GO) test -count=1 -run 'TestPoolFairness$$' -v ./internal/tools/simworld

.PHONY: bench-scale
bench-scale: ## scale: one type, 1,000 types, 100,000 keys at AWS's latencies and quotas, divided by SCALE (default 100), the real handlers in the simulated world (docs/scale.md)
	$(GO) test -count=1 -timeout 30m -run 'TestScale$$' -v ./internal/tools/simworld -args -scale $(or $(SCALE),100)

.PHONY: bench-priority
bench-priority: ## priorities: low jobs then high jobs, the scheduler vs a strict-priority semaphore and FIFO, and starvation, in virtual time (BENCH_FLAGS)
	$(GO) run ./cmd/bench --priority $(BENCH_FLAGS)

.PHONY: bench-rate
bench-rate: ## rate limits: a backlog under a token bucket, the rate or the limit binding, no 1 s window over R + B, in virtual time (BENCH_FLAGS)
	$(GO) run ./cmd/bench --rate $(BENCH_FLAGS)

.PHONY: simulate
SEEDS   ?= 10000
FROM    ?= 1
PROFILE ?= all
simulate: ## the deterministic fault simulation of the real handlers over SEEDS seeds from FROM (PROFILE: fault classes, see internal/tools/simworld)
	$(GO) test -count=1 -v -timeout 12h -run 'TestSurvey$$' ./internal/tools/simworld -args -seeds $(SEEDS) -from $(FROM) -profile $(PROFILE)

# The mutation check is not part of make test: each of its 23 mutants builds the simulation and
# runs up to MUTATE_SEEDS seeds (42 minutes in all on the busy shared 2-core machine; results and
# what each mutant not caught means: docs/simulation.md, "Mutation check").
.PHONY: mutate
MUTATE_SEEDS ?= 300
mutate: ## the mutation check: each condition of the lease, park-record and batch writes removed in turn, the first simulation seed that catches it (MUTATE_SEEDS from FROM, PROFILE)
	$(GO) run ./internal/tools/mutate -seeds $(MUTATE_SEEDS) -from $(FROM) -profile $(PROFILE)

.PHONY: bench-local
bench-local: ## check the simulator against the local stack: measured vs predicted waits (~90 s per strategy; BENCH_FLAGS)
	$(GO) run ./cmd/bench --local $(BENCH_FLAGS)

.PHONY: bench-binds
bench-binds: ## first-free's binds per second beside random's starts, on the local stack with fauxqs (SFNLIMIT_BIND_JOBS, default 400)
	SFNLIMIT_BIND_JOBS=$${SFNLIMIT_BIND_JOBS:-400} $(GO) test -count=1 -v -timeout 30m -run 'TestBindThroughput$$' ./tests/ | grep -E 'starts/s|bind throughput|^(--- |ok|FAIL)'

clean: ## remove build output
	rm -rf bin .aws-sam
