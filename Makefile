# The two commands that do everything on a fresh machine:
#   make demo   runs the main job
#   make test   runs every check CI runs
GO ?= go
export PATH := $(PATH):/usr/sbin:/usr/local/sbin

.PHONY: demo test fmt-check vet race accuracy bench benchcmp-test driver-suite libtest deps deps-demo

demo: deps-demo
	$(GO) run ./cmd/holdtime demo

test: deps fmt-check vet race accuracy benchcmp-test driver-suite libtest

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

race:
	$(GO) test -race -count=1 -timeout 20m ./...

# The side-by-side suite in interleaved rounds (about 15 minutes on 2 cores;
# BENCH_FLAGS='-rounds 1 -quick' for a smoke run), written to BENCHMARKS.md.
# Not part of make test.
# The live tests that check the collector's figures against the clients'
# own timing run here, without -race: the race detector slows clients,
# collector and poller several times over and skews the timing they check
# (they skip under -race; their code paths stay covered there).
accuracy:
	$(GO) test -count=1 -timeout 10m -run '^(TestLiveProxySQLSetups|TestLiveProxySQLJoinUnderLoad|TestLayersEndToEnd|TestSpansReachOnlyTheProxySQLTheyWentThrough|TestFleetOfTwentyProxySQLsKeepsUp)$$' ./collector

bench: deps-demo # gcc and MariaDB, as the demo
	$(GO) run ./internal/benchrun $(BENCH_FLAGS)

# internal/benchcmp is its own module (it keeps otelsql out of holdtime's
# dependencies); its test checks the comparison is fair.
benchcmp-test:
	cd internal/benchcmp && $(GO) vet ./... && $(GO) test -count=1 ./...

# go-sql-driver/mysql's own test suite (the version in go.mod), run as-is
# and through conntag against a throwaway MariaDB; internal/driversuite is
# its own module (the driver's test files come from the module cache) and
# its test compares the outcomes and the server's general log of both runs.
driver-suite:
	cd internal/driversuite && $(GO) mod download github.com/go-sql-driver/mysql && $(GO) vet ./... && $(GO) test -count=1 -timeout 15m ./...

# conntag with sqlx and gorm on a throwaway MariaDB (the hold profile names
# the user's line); its own module keeps them out of holdtime's go.mod.
libtest:
	cd internal/libtest && $(GO) vet ./... && $(GO) test -race -count=1 ./...

deps-demo:
	.ci/install-deps build mariadb redis # redis-server: the demo's second lesson (the Redis design)

deps:
	.ci/install-deps
