# ccmkit developer targets. `make test` is the README's test command.
GO ?= go
STATICCHECK_VERSION ?= v0.8.2

.PHONY: test demo lint vet fmt staticcheck bench bench-smoke fuzz-smoke tools

## test: the whole test suite, race detector on (real-router tests need root and miniupnpd).
## -timeout bounds each test binary, and examples/edge-ccm's includes a cold static build of the
## Kubernetes tree: over half an hour on 2 cores shared with other work.
test:
	$(GO) test -race -count=1 -timeout 60m ./...

## demo: the README's main job.
demo:
	$(GO) run ./examples/demo

## lint: go vet, gofmt and staticcheck, as CI runs them.
lint: vet fmt staticcheck

vet:
	$(GO) vet ./...

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

staticcheck:
	@command -v staticcheck >/dev/null 2>&1 || $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	"$$($(GO) env GOPATH)/bin/staticcheck" ./...

## bench: the benchmarks that check the speed targets (real-router ones need root).
bench:
	$(GO) test -run '^$$' -bench . -benchtime 5x ./...

## bench-smoke: every benchmark once (CI: they keep compiling and running; numbers need `make bench`).
bench-smoke:
	$(GO) test -run '^$$' -bench . -benchtime 1x ./...

## fuzz-smoke: each fuzz target (the fake IGD server's, the igd client's parsers of router answers) for FUZZTIME.
FUZZTIME ?= 15s
fuzz-smoke:
	$(GO) test -run '^$$' -fuzz '^FuzzParseSOAPRequest$$' -fuzztime $(FUZZTIME) ./fake/
	$(GO) test -run '^$$' -fuzz '^FuzzServeControl$$' -fuzztime $(FUZZTIME) ./fake/
	$(GO) test -run '^$$' -fuzz '^FuzzParseRootDescription$$' -fuzztime $(FUZZTIME) ./igd/
	$(GO) test -run '^$$' -fuzz '^FuzzSOAPAnswer$$' -fuzztime $(FUZZTIME) ./igd/
	$(GO) test -run '^$$' -fuzz '^FuzzParsePortListing$$' -fuzztime $(FUZZTIME) ./igd/
	$(GO) test -run '^$$' -fuzz '^FuzzParseExternalIP$$' -fuzztime $(FUZZTIME) ./igd/
	$(GO) test -run '^$$' -fuzz '^FuzzParseSSDPAnswer$$' -fuzztime $(FUZZTIME) ./igd/

## tools: install the Debian packages and Go tools the tests need (as root).
tools:
	bash hack/install-deps.sh
