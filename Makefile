# edge — two commands for a new user: `make run` and `make test`.
# Everything else installs itself on first use (Go tools into .tools/,
# Debian and npm packages where a target needs them).

GO              ?= go
BIN             := bin/edge
TOOLS           := $(CURDIR)/.tools
GOLANGCI_LINT_VERSION := v2.15.0
# h2spec: the HTTP/2 conformance suite h2server's tests run (it has no go.mod: its
# dependencies resolve at their latest versions when it is installed).
H2SPEC_VERSION  := v2.2.1+incompatible
VERSION         ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS         := -s -w -X github.com/edgecache/edge/node.Version=$(VERSION)
# Longest one test binary may run (go test -timeout). The end-to-end tests are split over cmd/edge, e2e/disk,
# e2e/acme and lab/chaos so that each takes a few minutes under a loaded -race run; the limit leaves room.
TEST_TIMEOUT    ?= 12m

.PHONY: all build run test test-models coding-memory virtual-time chaos-short conformance two-region two-continents chaos chaos-full bench-cluster bench-cluster-trace bench-storage bench-tls bench-miss dashboards-check test-short vet lint fmt bench bench-compare fuzz clean config-example

all: build

build:
	@echo "building $(BIN) (the first build fetches and compiles the dependencies: a few minutes)"
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/edge

## run: the demo origin and a cluster of three edge nodes in front of it, with metrics and a status page.
run: build
	./$(BIN) demo

## test: vet, then every test (unit, fuzz seed corpora, end-to-end with real processes),
## then the HTTP cache conformance suite against the committed baseline. With EDGE_REQUIRE_PREREQS a
## missing prerequisite (chromium, root for namespaces and tmpfs, the shared traces) fails instead of skipping.
test: vet $(TOOLS)/h2spec
	bash scripts/test-deps.sh
	GO=$(GO) TEST_TIMEOUT=$(TEST_TIMEOUT) GORACE='$(RACE_OPTIONS)' EDGE_H2SPEC=$(TOOLS)/h2spec EDGE_REQUIRE_PREREQS=1 EDGE_VIRTUAL_TIME_TESTS='$(VIRTUAL_TIME_TESTS)' EDGE_CHAOS_APART=1 bash scripts/race-run.sh $(RACE_BESIDE) -- $(filter-out $(RACE_BESIDE),$(RACE_PKGS))
	$(MAKE) --no-print-directory chaos-short
	$(MAKE) --no-print-directory -j2 --output-sync=target conformance test-models

## test-models: the tests that need neither the race detector nor a quiet machine (simulators,
## virtual time, allocation and heap counts, the Kubernetes manifests), run beside the conformance
## suite (one node and npm's client, mostly waiting on each other).
test-models:
	EDGE_REQUIRE_PREREQS=1 $(GO) test -count=1 $(SIM_PKGS)
	$(GO) test -race -count=1 -run '^TestSimulateSmall$$' ./lab/cachesim # its goroutine per policy, with the race detector
	$(MAKE) --no-print-directory virtual-time
	$(GO) test -count=1 -run 'Allocat' ./rules # allocation counts, without the race detector (its sync.Pool drops what it holds)
	cd deploy/k8scheck && $(GO) test -count=1 ./...
	$(MAKE) --no-print-directory coding-memory

## The race detector's shadow memory on huge pages where the kernel offers them (transparent huge
## pages on madvise, as here): a third of the race run's time was the kernel's, faulting in 4 KiB
## pages (proxy's Spool and Slice tests: 72-76 s, 2.3 M page faults, against 49-52 s and 1.6 M
## with it). Detection is the same; only where the shadow lives changes.
RACE_OPTIONS ?= no_huge_pages_for_shadow=0 $(GORACE)

## The simulators are deterministic models, single-goroutine but for cachesim's goroutine per
## policy (raced by TestSimulateSmall): under the race detector they took 150 of the race run's
## package-seconds (cachesim 103 s against 9 s without it), so they run without it.
SIM_PKGS  := ./lab/cachesim ./lab/ringsim ./lab/tiersim ./lab/fdlab ./lab/clustersim
RACE_PKGS = $(RACE_FIRST) $(filter-out $(RACE_FIRST),$(shell $(GO) list ./... | grep -v -E '/lab/(cachesim|ringsim|tiersim|fdlab|clustersim)$$'))
## The longest packages under the race detector first (package-seconds in an idle clean-clone run
## on 2 cores, 2026-12-07: node 241, proxy 236, cmd/edge 152, h2server 56, hitpath 24, e2e/disk
## 23, origin 18, e2e/acme 17, disk 15, coding 12; about 900 in all). go test starts packages in
## the order given, so many at a time (scripts/race-run.sh: -p 3); the largest first keeps them
## from running last side by side. Idle clean-clone runs the same hour at -p 2: import-path order
## 608 s in all (the race run to 539 s), this order 587 s (514 s); at -p 3 the race run takes
## 400 s (the same 674 s of CPU: at -p 2 both cores were only 65 % busy, waiting tests holding
## the slots).
RACE_FIRST = $(shell $(GO) list ./node ./cmd/edge ./proxy ./h2server ./e2e/disk ./hitpath ./origin ./e2e/acme ./disk ./coding)
## Run beside the rest, outside go test's -p slots (scripts/race-run.sh): they mostly wait.
## Import paths, as go list prints them (filter-out takes them from RACE_PKGS).
RACE_BESIDE := $(shell $(GO) list ./cluster)

## virtual-time: the cluster tests that run in virtual time (testing/synctest), without the race
## detector, which synctest bubbles can crash (golang/go#78156; see cluster/virtualtime_test.go).
## The race run fails a virtual-time test that is missing from this list.
VIRTUAL_TIME_TESTS := TestDepartedPeersAreForgotten|TestAForgottenPeerLeavesTheHeartbeatVerifier|TestFlappingNodeIsNotDeclaredDead|TestMembershipTakesTheConfiguredPath|TestOneWayCutDoesNotCycleTrust|TestSeedBehindARelayIsNotUnreached|TestJoinThroughOneSeedAndAgreeOnDeath|TestKeyRotation|TestLocalSuspicionStaysLocal|TestPartitionHeals|TestRegionsTravelInMetadata|TestWrongSecretNeverJoins|TestAPeerNeverHeardIsNoSuspicion|TestReroutesOfAWrongSuspicionAreCounted|TestShadowDetectorsAreRecordedNeverActedOn|TestCrashIsDetectedWhileTheOnlyWitnessLosesHeartbeats|TestHoldLeavesCrashAndIsolationDetected|TestSharedDelaySpikeIsNotACrash|TestConfirmProbeSparesALostHeartbeat|TestConfirmProbeStillDetectsACrash|TestReviewReplayedAsksSilenceTheAnswers|TestATrustedAgainPeerIsLogged|TestAReplayedJoinStreamIsRefusedOnceMemberlistForgotTheNode|TestS22LongPartitionHealsThroughTheSeedsAndThirdParties
virtual-time:
	$(GO) test -count=1 -run '^($(VIRTUAL_TIME_TESTS))$$' ./cluster

## chaos-short: TestChaosShort (five nodes in namespaces through a partition, a one-way cut and loss)
## on its own, after the race run: beside the race-detected packages on two loaded cores its
## nodes were starved into suspecting each other before the partition (lab/chaos/short_test.go).
chaos-short:
	EDGE_REQUIRE_PREREQS=1 $(GO) test -count=1 -run '^TestChaosShort$$' ./lab/chaos

## coding-memory: the coders' memory held to what the edge charges for it (heap measurements, so
## without the race detector, which slows the coders tenfold).
coding-memory:
	$(GO) test -count=1 -run 'TestCoderStateWithinItsCharge|TestStoredCodersWithinTheirCharge' ./coding

## conformance: http-cache-tests (npm) against an edge node; fails below docs/conformance/baseline.json.
conformance: build
	bash scripts/conformance.sh

test-short:
	$(GO) test -short ./...

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...

$(TOOLS)/h2spec:
	GOBIN=$(TOOLS) $(GO) install github.com/summerwind/h2spec/cmd/h2spec@$(H2SPEC_VERSION)

$(TOOLS)/golangci-lint:
	GOBIN=$(TOOLS) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

lint: $(TOOLS)/golangci-lint
	$(TOOLS)/golangci-lint run ./...

fmt:
	gofmt -w $$(git ls-files '*.go')

config-example:
	$(GO) run ./cmd/edge config example > config.yaml

## bench: Go benchmarks of the hot paths.
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./proxy/ ./coding/ ./routing/ ./indicators/ ./fdetect/ ./lab/fdlab/
	cd bench && $(GO) test -run '^$$' -bench . -benchmem

## two-region: six nodes in two regions behind delay relays (0.5 ms RTT inside, 20 ms between, origin +60 ms); the selections and placements of TWO_REGION_CONFIGS,
## with global and per-region homes, on Zipf+flash crowd, a crowd moving between regions and a trace; an advertisement-interval sweep;
## the simulator's prediction for the same costs. Tables on stdout, JSON in docs/tworegion/, plots in docs/img/ (about 40 minutes).
## chaos: the network-fault lab (root: namespaces, nftables): every fault scenario once, ml running the cluster and every other
## detector beside it on the same heartbeats (shadow detectors), tables for docs/cluster.md (about 8 minutes).
chaos: build
	bash scripts/test-deps.sh
	$(GO) run ./scripts/chaos -json docs/chaos/results.json | tee docs/chaos/tables.md
## chaos-full: as chaos, then each other detector running the cluster itself in the detector-sensitive scenarios (about 20 minutes).
chaos-full: build
	bash scripts/test-deps.sh
	$(GO) run ./scripts/chaos -compare -json docs/chaos/results-full.json | tee docs/chaos/tables-full.md

TWO_REGION_CONFIGS ?= hybrid/fna-rate,hybrid/fna-learned,hybrid/fna,hybrid/fno,hybrid/off,ring/fna,tree/fna,hybrid/fna-rate/region,hybrid/fna-learned/region,hybrid/fna/region,hybrid/fno/region,hybrid/off/region
TWO_REGION_RUN     := $(GO) run ./scripts/tworegion -warmup 20s -duration 30s
two-region: build
	mkdir -p docs/tworegion
	$(TWO_REGION_RUN) -workload zipf -configs $(TWO_REGION_CONFIGS) -json docs/tworegion/zipf.json -plot docs/img/tworegion-zipf.png
	$(TWO_REGION_RUN) -workload moving -configs $(TWO_REGION_CONFIGS) -json docs/tworegion/moving.json -plot docs/img/tworegion-moving.png
	$(TWO_REGION_RUN) -workload trace -configs $(TWO_REGION_CONFIGS) -json docs/tworegion/trace.json -plot docs/img/tworegion-trace.png
	$(TWO_REGION_RUN) -workload moving -configs hybrid/fna-rate/region,hybrid/fna-learned/region,hybrid/fna/region,hybrid/fno/region,hybrid/off/region -advertise 10s,3s,1s \
		-json docs/tworegion/advertise.json -plot docs/img/tworegion-advertise.png
	@echo "what edge sim cache predicts for the same costs (an eu ingress: 2 peers at 1, 3 at 40 = 20 ms / 0.5 ms; M = 122):"
	./$(BIN) sim cache --trace ../shared/traces/cache/web07.trace.xz --format int32be --requests 200000 --caches 5 --cache-size 2048 \
		--costs 1,1,40,40,40 --miss-penalty 122 --policies opt,fno,fna --sweep update-interval=28,84,280,1000 \
		--csv docs/tworegion/sim.csv --plot docs/img/tworegion-sim.png

## two-continents: the two-region lab as two continents (80 ms between the regions, the origin +250 ms, 4 MiB per node)
## with per-region homes: fna-rate, fna-learned, fna, fno and off on a trace replayed in us 3 s after eu, on the moving crowd
## and on a crowd of many pages (about 16 minutes; JSON in docs/tworegion/).
TWO_CONTINENT_CONFIGS ?= hybrid/fna-rate/region,hybrid/fna-learned/region,hybrid/fno/region,hybrid/off/region,hybrid/fna/region
two-continents: build
	mkdir -p docs/tworegion
	$(GO) run ./scripts/tworegion -setting continents -warmup 10s -duration 30s -workload lagged -configs $(TWO_CONTINENT_CONFIGS) -json docs/tworegion/continents-lagged.json
	$(GO) run ./scripts/tworegion -setting continents -warmup 10s -duration 30s -workload moving -configs $(TWO_CONTINENT_CONFIGS) -json docs/tworegion/continents-moving.json
	$(GO) run ./scripts/tworegion -setting continents -warmup 10s -duration 30s -workload crowd -configs $(TWO_CONTINENT_CONFIGS) -json docs/tworegion/continents-crowd.json

## bench-compare: edge vs nginx proxy_cache vs Varnish on a cached 4 KiB object (wrk).
bench-compare: build
	bash scripts/bench-compare.sh

## bench-storage: the adaptsize trace against edge RAM+disk, edge RAM only and nginx proxy_cache (hit ratios, disk-hit latency, RSS).
bench-storage: build
	bash scripts/bench-storage.sh

## bench-tls: edge vs nginx (proxy_cache + ssl + http2) over TLS: keep-alive hits, new handshakes, HTTP/2 (h2load).
bench-tls: build
	bash scripts/bench-tls.sh

## bench-miss: the web07 trace replayed through edge and nginx (proxy_cache, gzip on) at rising rates, cold each step:
## the highest rate each sustains with < 1 % failed and p99 < 100 ms, CPU per request, origin requests (about 6 minutes).
bench-miss: build
	bash scripts/bench-miss.sh

## fuzz: a short run of every fuzz target (FUZZTIME each).
FUZZTIME ?= 20s
# Every Fuzz function of the repository (TestMakeFuzzListsEveryTarget keeps the list whole).
FUZZ_TARGETS := cluster/wire:FuzzDecodeHeartbeat cluster/wire:FuzzDecodeTail cluster/wire:FuzzS41DecodeSigned cluster:FuzzCanonicalMatchesReference cluster:FuzzDecodeMeta cluster:FuzzDecodeOwed cluster:FuzzOwedStateLoadsWhatItWrites cluster:FuzzReadStands cluster:FuzzSignHit cluster:FuzzVerifyRequest coding:FuzzDecode coding:FuzzDecoderBytesFor coding:FuzzNegotiate coding:FuzzS44Negotiate \
	config:FuzzLoadBytes disk:FuzzDecode disk:FuzzSnapshot fdetect:FuzzParseParams h2server:FuzzConnFrames hitpath:FuzzHTTP2Fields hitpath:FuzzKeptFieldsAreNetHTTPs hitpath:FuzzParseAgreesWithNetHTTP indicators:FuzzDecode indicators:FuzzNuCalibration indicators:FuzzS41DecodeSealed indicators:FuzzS42EachFlipAgreesWithTheOldDecoder internal/clientaddr:FuzzOfRemote internal/promtext:FuzzParse \
	internal/reqfield:FuzzClassify lab/fdlab:FuzzReadSendTimes lab/fdlab:FuzzReadTrace node:FuzzCombinedLog node:FuzzHitPathAgreesWithServeHTTP proxy:FuzzAnsweredFromStore proxy:FuzzCacheControl proxy:FuzzCacheKeyAndVary \
	proxy:FuzzCanonicalHost proxy:FuzzCoveredSpan proxy:FuzzHTTPDate proxy:FuzzIsolation proxy:FuzzLimitRanges proxy:FuzzMatchesOnlyWeakly proxy:FuzzS8VaryKey proxy:FuzzS9LimitRanges proxy:FuzzTargeted proxy:FuzzWaitOrder rules:FuzzCaseClosed rules:FuzzGlob rules:FuzzKeyQuery rules:FuzzParse trace:FuzzReader trace:FuzzS43Reader
fuzz:
	@for t in $(FUZZ_TARGETS); do \
	  pkg=$${t%%:*}; fn=$${t##*:}; echo "== $$pkg $$fn"; \
	  $(GO) test ./$$pkg/ -run '^$$' -fuzz "^$$fn$$" -fuzztime $(FUZZTIME) || exit 1; \
	done

clean:
	rm -rf bin

## bench-cluster: 5-node demo cluster, flash crowd + Zipf, routing modes and selection policies side by side.
bench-cluster: build
	$(GO) run ./scripts/benchcluster

## bench-cluster-trace: a real trace through 3 and 5 nodes (default mode, routing off) and one node with the combined budget.
bench-cluster-trace: build
	$(GO) run ./scripts/benchcluster -trace $(or $(TRACE),../shared/traces/cache/web07.trace.xz) -format $(or $(FORMAT),int32be) -cache-size $(or $(CACHE),16MiB) -rate 500 -trace-limit 20000

## dashboards-check: Prometheus (Debian package) against a demo cluster under load; every panel query must return data.
dashboards-check: build
	@command -v prometheus >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null; }
	$(GO) run ./scripts/dashcheck
