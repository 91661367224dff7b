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

.PHONY: help build lint tools test demo clean \
	build-RouterFunction build-StarterFunction build-ReleaserFunction

help: ## list the targets
	@echo "sfnlimit: make <target>"
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | \
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
tools: node_modules/.package-lock.json ## install the pinned npm tools; check moto_server, cfn-lint, aws
	@missing=""; \
	for tool in go node npm moto_server cfn-lint aws; do \
		command -v "$$tool" >/dev/null 2>&1 || missing="$$missing $$tool"; \
	done; \
	if [ -n "$$missing" ]; then \
		echo "tools: missing from PATH:$$missing (moto_server, cfn-lint and aws are preinstalled Python tools: moto 5.2.1, cfn-lint 1.51.0, awscli)" >&2; \
		exit 1; \
	fi
	@test -x $(NODE_BIN)/asl-validator || { echo "tools: $(NODE_BIN)/asl-validator is missing after npm install" >&2; exit 1; }

node_modules/.package-lock.json: package.json $(wildcard package-lock.json)
	@command -v npm >/dev/null 2>&1 || { echo "tools: npm is missing from PATH" >&2; exit 1; }
	@if [ -f package-lock.json ]; then npm ci --no-audit --no-fund; else npm install --no-audit --no-fund; fi
	@touch $@

test: tools ## go test -race ./..., then lint
	$(GO) test -race -count=1 ./...
	$(MAKE) --no-print-directory lint

demo: ## run the demo against the local stack
	$(GO) run ./cmd/sfnlimit demo

.PHONY: bench
bench: ## compare lane strategies with an ideal semaphore in virtual time (flags: go run ./cmd/bench --help)
	$(GO) run ./cmd/bench $(BENCH_FLAGS)

.PHONY: bench-local
bench-local: ## check the simulator against the local stack: measured vs predicted waits (~90 s per strategy; BENCH_FLAGS)
	$(GO) run ./cmd/bench --local $(BENCH_FLAGS)

clean: ## remove build output
	rm -rf bin .aws-sam
