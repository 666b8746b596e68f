# riftflow — the two commands that matter are `make run` and `make test`.
SHELL := /bin/bash
GO ?= go
BIN := bin
SERVICES := resolver matchid-lister match-fetcher persister retry-sweeper
# Every module of the go.work workspace.
MODULES := pkg internal streams migrations deploy $(addprefix services/,$(SERVICES) riftflow) e2e
# Per module: e2e holds the short chaos suite and the 3-minute soak.
TEST_TIMEOUT ?= 45m
FUZZTIME ?= 10s
# make test fuzzes each target for a count of executions, not a duration:
# Go 1.26's fuzz coordinator can fail a duration run with a bare "context
# deadline exceeded" at the -fuzztime boundary on a loaded machine
# (go.dev/issue/75804, fixed in Go 1.27); a count has no deadline to race.
FUZZTIME_TEST ?= 20000x

.PHONY: kube-build kube-up kube-down kube-e2e all version build run test test-short bench bench-baseline bench-pipeline bench-limit bench-limit-fetchers fuzz chaos check vulncheck lint vet fmt clean tools images

all: build

# The version stamped into every binary (`riftflow version`, the
# riftflow_build_info metric, service.version on spans): the git tag or
# commit, or VERSION=... on the command line.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
# Reproducible: no build ID, no paths, no VCS stamping (the revision is
# passed explicitly), so the same commit gives the same bytes.
LDFLAGS := -s -w -buildid= -X github.com/riftflow/riftflow/pkg/telemetry.Version=$(VERSION) \
	-X github.com/riftflow/riftflow/pkg/telemetry.Revision=$(REVISION)
GOBUILD := CGO_ENABLED=0 $(GO) build -trimpath -buildvcs=false -ldflags "$(LDFLAGS)"

## build: compile every binary into bin/ (bin/riftflow is the CLI), static, version-stamped
build:
	@mkdir -p $(BIN)
	$(GOBUILD) -o $(BIN)/riftflow ./services/riftflow/cmd/riftflow
	@for s in $(SERVICES); do $(GOBUILD) -o $(BIN)/$$s ./services/$$s/cmd/$$s || exit 1; done

## version: print the version make build stamps
version:
	@echo $(VERSION)

## run: the main job on a fresh clone — embedded NATS, DATABASE_URL (or,
## when it is unset, a throwaway Postgres: --ephemeral-db), the Riot API
## simulator (or RIOT_API_KEY), the five services; ingests one real recorded
## player, prints a summary, exits 0.
run: build
	$(BIN)/riftflow up --demo $(if $(DATABASE_URL),,--ephemeral-db)

## test: unit + integration tests (embedded nats-server, real Postgres) of
## every module, plus short fuzz runs of every target, as TEST_JOBS jobs at
## a time (default 1): one log per module and one for the fuzz runs in
## TEST_LOGS, each printed as it ends.
## Fails when any of them fails. Starts Postgres itself when DATABASE_URL is unset.
TEST_LOGS ?= $(CURDIR)/.data/test
# e2e's go test is two jobs: the tests matching APART_TESTS
# (the chaos cases, the soak and the secrets check: separate service
# processes, t.Parallel, APART_PARALLEL at once) and every other test
# (-skip of the same pattern), so the slow half runs beside the rest. The
# longest jobs start first: these two, the fuzz runs, then SLOW_MODULES,
# then every other module. (The per-match Riot call bounds that once
# failed with two chaos cases at once on a loaded machine were FETCH
# redeliveries after a NATS restart, since fixed in the fetcher.)
APART_MODULE := e2e
APART_TESTS := ^Test(Chaos|Soak|SecretsNeverLeak)
APART_PARALLEL ?= 2
SLOW_MODULES := services/riftflow deploy pkg services/retry-sweeper
# test-short's longest modules, started first.
SHORT_SLOW_MODULES := pkg services/retry-sweeper services/riftflow services/resolver services/persister services/matchid-lister
test:
	@$(JOBS_INIT); \
	gotest() { echo "cd $$1 && $(GO) test -count=1 -timeout $(TEST_TIMEOUT)"; }; \
	start "go test $(APART_MODULE) (chaos, soak)" "$$(gotest $(APART_MODULE)) -run '$(APART_TESTS)' -parallel $(APART_PARALLEL) ./..."; \
	start "go test $(APART_MODULE) (the rest)" "$$(gotest $(APART_MODULE)) -skip '$(APART_TESTS)' ./..."; \
	$(call FUZZ_START,$(FUZZTIME_TEST),1); \
	for m in $(SLOW_MODULES) $(filter-out $(SLOW_MODULES) $(APART_MODULE),$(MODULES)); do \
		[ -f $$m/go.mod ] || continue; \
		start "go test $$m" "$$(gotest $$m) ./..."; \
	done; \
	finish

## test-short: the edit loop (under 2 minutes): `go test -short` of every
## module, TEST_JOBS at once, the longest first; the chaos suite, the soak, the rendered workloads and
## other slow tests skip under -short. No fuzzing (the seed corpora run as tests).
test-short:
	@$(JOBS_INIT); \
	for m in $(SHORT_SLOW_MODULES) $(filter-out $(SHORT_SLOW_MODULES),$(MODULES)); do \
		[ -f $$m/go.mod ] || continue; \
		start "go test -short $$m" "cd $$m && $(GO) test -short -count=1 -timeout 10m ./..."; \
	done; \
	finish

# JOBS_INIT defines, in the recipe's bash, `start NAME COMMAND`, which runs
# COMMAND in the background with its output in TEST_LOGS/<NAME>.log, once
# fewer than TEST_JOBS started jobs are still running, and `finish`, which
# waits for every started job. Each job's log is printed when it ends (ok or
# FAIL, with its seconds); finish fails when any job failed. TEST_JOBS bounds
# the CPU contention that the timing tests (pkg/ratelimit, the chaos call
# bounds) feel on 2 cores. The default, 3, keeps the load of a 2-core
# machine running nothing else near 4 (the tests mostly wait on NATS,
# Postgres and their own timers); TEST_JOBS=1 runs the jobs in turn.
TEST_JOBS ?= 3
define JOBS_INIT
set -u; logs=$(TEST_LOGS); rm -rf "$$logs"; mkdir -p "$$logs"; declare -A job=(); fails=(); \
reap() { local p rc n f t; \
	for p in "$${!job[@]}"; do \
		kill -0 $$p 2>/dev/null && continue; \
		rc=0; wait $$p || rc=$$?; IFS='|' read -r n f t <<<"$${job[$$p]}"; unset "job[$$p]"; \
		if [ $$rc -eq 0 ]; then echo "=== ok   $$n ($$((SECONDS - t)) s)"; else echo "=== FAIL $$n (exit $$rc, $$((SECONDS - t)) s)"; fails+=("$$n"); fi; \
		cat "$$f"; \
	done; }; \
start() { local f="$$logs/$$(echo "$$1" | tr -c 'A-Za-z0-9.\n-' _).log"; \
	while [ $${#job[@]} -ge $(TEST_JOBS) ]; do sleep 1; reap; done; \
	echo "=== start $$1 (at $$SECONDS s)"; (eval "$$2") > "$$f" 2>&1 & job[$$!]="$$1|$$f|$$SECONDS"; }; \
finish() { \
	while [ $${#job[@]} -gt 0 ]; do sleep 1; reap; done; \
	if [ $${#fails[@]} -gt 0 ]; then printf '=== FAILED: %s\n' "$${fails[@]}"; return 1; fi; \
	echo "=== all passed ($$SECONDS s)"; }
endef

## bench: the package micro-benchmarks (persister store, rate limiter, Riot
## document scan) with a fixed -benchtime and -count, compared by benchstat
## with the committed baseline docs/bench/baseline.txt (bench-baseline
## rewrites it). The pipeline rate-limit benchmarks are `make bench-budget`.
BENCHSTAT := $(CURDIR)/$(BIN)/tools/benchstat
BENCHSTAT_VERSION ?= v0.0.0-20260908200009-22c9c6c9d4da
# Fixed iteration counts: the persister and the document scan per op, the
# limiter scenario (3 s of traffic per iteration) once per count.
BENCH_COUNT ?= 6
define bench_run
	cd pkg && $(GO) test -run NONE -bench 'Persist|DocScan' -benchtime 1000x -count $(BENCH_COUNT) ./store/ ./riot/ > $(1)
	cd pkg && $(GO) test -run NONE -bench SharedBudget -benchtime 1x -count $(BENCH_COUNT) ./ratelimit/ >> $(1)
endef
bench: $(BENCHSTAT)
	$(call bench_run,$(CURDIR)/bench.out)
	$(BENCHSTAT) docs/bench/baseline.txt bench.out

bench-baseline:
	@mkdir -p docs/bench
	$(call bench_run,$(CURDIR)/docs/bench/baseline.txt)

$(BENCHSTAT):
	@mkdir -p $(TOOLS)
	GOBIN=$(TOOLS) $(GO) install golang.org/x/perf/cmd/benchstat@$(BENCHSTAT_VERSION)

## bench-budget: the pipeline rate-limit benchmarks against the simulator (≈ 15 min)
bench-budget:
	cd e2e && $(GO) test -run '^$$' -bench PipelineBudget -benchtime 1x -timeout 30m . | grep -v harness_test | tee ../bench-budget.out

## bench-pipeline: the pipeline as separate processes (bin/natsnode and the
## five service binaries, Postgres on DATABASE admin URL
## BENCH_DATABASE_ADMIN_URL) against the simulator without limits, over
## BENCH_PIPELINE_PLAYERS × BENCH_PIPELINE_MATCHES matches with timelines,
## and in the same run the reference (decode once, COPY); prints pairs/s,
## the ratio, the CPU split, peak RSS and heap; CSV + SVG in BENCH_PIPELINE_OUT.
BENCH_PIPELINE_OUT ?= $(CURDIR)/.data/bench-pipeline
BENCH_PIPELINE_PLAYERS ?= 40
BENCH_PIPELINE_MATCHES ?= 500
bench-pipeline: build
	$(GOBUILD) -o $(BIN)/natsnode ./internal/cmd/natsnode
	mkdir -p $(BENCH_PIPELINE_OUT)
	cd e2e && BENCH_BIN=$(CURDIR)/$(BIN) BENCH_PIPELINE_OUT=$(BENCH_PIPELINE_OUT) \
		BENCH_PIPELINE_PLAYERS=$(BENCH_PIPELINE_PLAYERS) BENCH_PIPELINE_MATCHES=$(BENCH_PIPELINE_MATCHES) \
		$(GO) test -run '^$$' -bench PipelineProcesses -benchtime 1x -timeout 90m -v . 2>&1 | grep -v 'harness_test' | tee $(BENCH_PIPELINE_OUT)/bench.out

## bench-limit: the shared limiter with SEPARATE fetcher processes
## (internal/benchlimit): N = BENCH_LIMIT_N (1,2,4,8) limitfetcher processes
## share one key through the KV bucket of a separate nats-server process,
## against the simulator (app + method limits, escalating blacklist), over
## BENCH_LIMIT_WINDOWS (5) whole long windows. Cases BENCH_LIMIT_CASES:
## dev (20:1,100:120), prod (50:1,2500:60), skew (prod, clocks ±BENCH_LIMIT_SKEW_MS
## = 500 ms), natskill (prod, nats-server kill -9 for BENCH_LIMIT_KILL_S = 30 s);
## cold only when named (BENCH_LIMIT_CASES=cold: a BENCH_LIMIT_COLD_S = 30 s cold start on
## 30:1,1200:60 against a perfect client, SVG of its first and last 10 s).
## BENCH_LIMIT_PARALLEL cases at once (default 8, dev first: ~17 min; 15 = every
## cell at once). BENCH_LIMIT_CPU_QUOTA_US=20000 puts each case's fetchers in a
## cgroup v1 cpu group of 20 % of one core (root), BENCH_LIMIT_HOGS=2 runs two
## busy loops beside them. Table on stdout (with load average and throttled
## periods), CSV + SVG per case in BENCH_LIMIT_OUT.
BENCH_LIMIT_OUT ?= $(CURDIR)/.data/bench-limit
BENCH_LIMIT_WINDOWS ?= 5
bench-limit:
	mkdir -p $(BENCH_LIMIT_OUT)
	cd e2e && BENCH_LIMIT_WINDOWS=$(BENCH_LIMIT_WINDOWS) BENCH_LIMIT_OUT=$(BENCH_LIMIT_OUT) $(GO) test -run '^$$' -bench LimitProcesses -benchtime 1x -timeout 2h . | tee $(BENCH_LIMIT_OUT)/bench.out

## bench-limit-fetchers: the real match-fetcher binary, BENCH_LIMIT_N (2,8)
## processes, in the whole pipeline as OS processes against the simulator on
## a production-shaped key (50:1,2500:60, escalating blacklist), over
## BENCH_LIMIT_WINDOWS (5) whole 60 s windows; BENCH_LIMIT_CPU_QUOTA_US and
## BENCH_LIMIT_HOGS as for bench-limit (~8 min per N).
bench-limit-fetchers:
	mkdir -p $(BENCH_LIMIT_OUT)
	cd e2e && BENCH_LIMIT_WINDOWS=$(BENCH_LIMIT_WINDOWS) BENCH_LIMIT_OUT=$(BENCH_LIMIT_OUT) $(GO) test -run '^$$' -bench LimitMatchFetchers -benchtime 1x -timeout 2h . | tee $(BENCH_LIMIT_OUT)/fetchers.out

## fuzz: every fuzz target in turn for FUZZTIME (make test runs 20000x each beside the tests; try FUZZTIME=5m);
## a spec is <dir under pkg/>:<target>, so ../services/riftflow/api names the HTTP API's package
FUZZ_TARGETS := bus:FuzzDecodeIngestRequest riot:FuzzDecodeMatch riot:FuzzDecodeTimeline \
	riot:FuzzParseRiotID riot:FuzzDocScanEquivalent ratelimit:FuzzParseLimits ../services/riftflow/api:FuzzAPIRequest
# FUZZ_START starts one job (JOBS_INIT) that fuzzes every target in turn
# for $(1) with $(2) workers each; a missing target fails before it
# starts. One job, not one per target: each -fuzz build instruments every
# package it links, and concurrent builds would each compile them again.
define FUZZ_START
for spec in $(FUZZ_TARGETS); do \
	grep -qs "func $${spec##*:}(" pkg/$${spec%%:*}/*_test.go || { echo "missing fuzz target $$spec" >&2; exit 1; }; \
done; \
start "fuzz" "set -e; cd pkg; for spec in $(FUZZ_TARGETS); do \
	echo \"=== fuzz \$$spec\"; $(GO) test -run '^\$$' -fuzz \"^\$${spec##*:}\\$$\" -fuzztime $(1) -parallel $(2) ./\$${spec%%:*}/; done"
endef
# make fuzz: workers per target (make test: 1, beside the tests)
FUZZ_PARALLEL ?= $(shell nproc 2>/dev/null || echo 1)
fuzz:
	@$(JOBS_INIT); $(call FUZZ_START,$(FUZZTIME),$(FUZZ_PARALLEL)); finish

## chaos: the full fault-injection suite (a short version runs in make test)
chaos:
	set -o pipefail; cd e2e && RIFTFLOW_CHAOS=full $(GO) test -count=1 -timeout 180m -run Chaos -v . | grep -v -E "^\s+time=|^\s+harness_test"

## soak: the whole pipeline as separate processes (2 of each service, a
## 3-node NATS cluster, a private Postgres) on the simulator with Riot
## faults, a steady stream of ingests and a nemesis (kill -9 of a service,
## a NATS node, Postgres; NATS and Postgres outages; partitions; a full
## disk) for SOAK (default 60m), then the end-state check and the RSS,
## goroutine and open-file slopes of every process. Table on stdout, CSV in
## SOAK_OUT. make test runs a 3-minute version (docs/chaos.md, "The soak").
SOAK ?= 60m
SOAK_OUT ?= $(CURDIR)/.data/soak
SOAK_TIMEOUT ?= 4h
.PHONY: soak
soak:
	mkdir -p $(SOAK_OUT)
	set -o pipefail; cd e2e && SOAK=$(SOAK) SOAK_OUT=$(SOAK_OUT) $(GO) test -count=1 -timeout $(SOAK_TIMEOUT) \
		-run '^TestSoak$$' -v . 2>&1 | grep -v -E "^\s+time=|^\s+harness_test" | tee $(SOAK_OUT)/soak.out

## images: one container image per binary (riftflow/<binary>:$(VERSION)) from the
## single Dockerfile: static binaries built here, FROM scratch, so no registry is needed
IMAGE_PREFIX ?= riftflow
CA_BUNDLE ?= /etc/ssl/certs/ca-certificates.crt
# Image timestamps follow the commit, for reproducible images with BuildKit.
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
images:
	@set -e; rm -rf $(BIN)/image; mkdir -p $(BIN)/image; cp $(CA_BUNDLE) $(BIN)/image/ca-certificates.crt; \
	for s in $(SERVICES) riftflow; do \
		echo "=== image $(IMAGE_PREFIX)/$$s:$(VERSION)"; \
		$(GOBUILD) -o $(BIN)/image/$$s/app ./services/$$s/cmd/$$s; \
		touch -d @$(SOURCE_DATE_EPOCH) $(BIN)/image/$$s/app $(BIN)/image/ca-certificates.crt; \
		SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) docker build -q --build-arg SERVICE=$$s \
			-t $(IMAGE_PREFIX)/$$s:$(VERSION) -t $(IMAGE_PREFIX)/$$s:latest -f Dockerfile $(BIN)/image; \
	done

## vet: go vet over every module; fails on any finding
vet:
	@set -e; for m in $(MODULES); do echo "=== go vet $$m"; (cd $$m && $(GO) vet ./...); done

# Pinned tool versions, installed into bin/tools by `make tools`.
TOOLS := $(CURDIR)/$(BIN)/tools
STATICCHECK_VERSION ?= v0.8.2
GOVULNCHECK_VERSION ?= v1.9.0
# govulncheck reads the Go vulnerability database at GOVULNDB (a URL, or
# file:///path to a local copy of it for an offline machine). VULNCHECK says
# what make check does when that database cannot be read:
#   auto     (default) run govulncheck when the database answers; otherwise
#            say loudly that it was NOT run, and pass on the other checks;
#   require  fail (use where the database is reachable, or mirrored);
#   off      do not run it, and say so.
GOVULNDB ?= https://vuln.go.dev
VULNCHECK ?= auto

## tools: install the pinned checkers into bin/tools (from the Go module proxy)
tools:
	@mkdir -p $(TOOLS)
	@[ -x $(TOOLS)/staticcheck ] || GOBIN=$(TOOLS) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	@[ -x $(TOOLS)/govulncheck ] || GOBIN=$(TOOLS) $(GO) install golang.org/x/vuln/cmd/govulncheck@$(GOVULNCHECK_VERSION)

## check: gofmt, go vet, staticcheck and govulncheck over every module; fails on findings
check: tools
	@echo "=== gofmt"; out=$$(gofmt -l pkg internal services streams deploy migrations e2e); \
		if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	@$(MAKE) --no-print-directory vet
	@set -e; for m in $(MODULES); do echo "=== staticcheck $$m"; (cd $$m && $(TOOLS)/staticcheck ./...); done
	@$(MAKE) --no-print-directory vulncheck

## vulncheck: govulncheck over every module (see VULNCHECK above)
vulncheck: tools
	@set -e; case "$(VULNCHECK)" in auto|require|off) ;; *) echo "VULNCHECK=$(VULNCHECK): want auto, require or off" >&2; exit 2;; esac; \
	if [ "$(VULNCHECK)" = off ]; then echo "=== govulncheck NOT RUN (VULNCHECK=off)"; exit 0; fi; \
	if ! curl -fsS -m 5 -o /dev/null "$(GOVULNDB)/index/db.json" 2>/dev/null; then \
		if [ "$(VULNCHECK)" = require ]; then echo "=== govulncheck FAILED: the vulnerability database $(GOVULNDB) cannot be read" >&2; exit 1; fi; \
		echo "=== govulncheck NOT RUN: the vulnerability database $(GOVULNDB) cannot be read from this machine;"; \
		echo "    it checked nothing. Run 'make check VULNCHECK=require' where the database can be read,"; \
		echo "    or point GOVULNDB at a local copy (file:///...)."; exit 0; \
	fi; \
	for m in $(MODULES); do echo "=== govulncheck $$m"; (cd $$m && GOVULNDB=$(GOVULNDB) $(TOOLS)/govulncheck ./...); done

## lint: the same as check
lint: check

fmt:
	gofmt -l -w pkg internal services streams deploy migrations e2e

clean:
	rm -rf $(BIN) .data bench.out

## kube-build: build, or take from the cache in .data/kube, everything the
## one-node cluster runs: Kubernetes 1.34 and etcd from the Go module proxy,
## kube-router, and the images (FROM scratch) of CoreDNS, NATS, KEDA, Jaeger,
## a pause binary and riftflow. Cold: the better part of an hour on 2 cores.
kube-build:
	nice -n 19 deploy/kube/build.sh all

## kube-up: a one-node Kubernetes cluster on this machine (root, and
## KUBE_UP_CONFIRM=1: it changes sysctls, a bridge and iptables);
## kubeconfig .data/kube/kubeconfig, kubectl bin/kubectl. Safe to run twice.
kube-up: kube-build
	deploy/kube/up.sh

## kube-down: removes everything kube-up made (the build cache stays)
kube-down:
	deploy/kube/down.sh

## kube-e2e: applies deploy/overlays/local to the cluster of kube-up and
## checks it step by step (docs/runbook.md follows the same steps)
kube-e2e:
	deploy/kube/e2e.sh
