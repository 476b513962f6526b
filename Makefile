# The two commands that do everything on a fresh machine:
#   make demo   runs the main job
#   make test   runs every check CI runs
GO ?= go
export PATH := $(PATH):/usr/sbin:/usr/local/sbin

.PHONY: demo test fmt-check vet race bench deps deps-mariadb

demo: deps-mariadb
	$(GO) run ./cmd/holdtime demo

test: fmt-check vet race

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

race:
	$(GO) test -race -count=1 -timeout 20m ./...

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

deps-mariadb:
	.ci/install-deps mariadb

deps:
	.ci/install-deps
