# ccmkit developer targets. `make test` is the README's test command.
GO ?= go
STATICCHECK_VERSION ?= v0.8.2

.PHONY: test demo build cross image-tar lint vet fmt staticcheck files bench bench-smoke fuzz-smoke tools soak

## Version stamped into edge-ccm through k8s.io/component-base/version (what
## --version prints and the CCM logs at start). It must parse as a semantic
## version: the CCM derives its binary version from it.
VERSION ?= $(shell git describe --tags --match 'v*' --dirty 2>/dev/null || echo v0.0.0-dev+$$(git rev-parse --short HEAD 2>/dev/null || echo unknown))
GIT_COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null)
BUILD_DATE ?= $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
VERSION_PKG := k8s.io/component-base/version
LDFLAGS := -s -w -X $(VERSION_PKG).gitVersion=$(VERSION) -X $(VERSION_PKG).gitCommit=$(GIT_COMMIT) \
	-X $(VERSION_PKG).buildDate=$(BUILD_DATE) -X $(VERSION_PKG)/verflag.programName=edge-ccm
## The image's platforms; `cross` builds each of them with go alone (no Docker engine needed).
CROSS_ARCHES ?= amd64 arm64

## test: the whole test suite, race detector on (real-router tests need root and miniupnpd).
## The commands tests run (edge-ccm, the demo) are built with the test binaries' own flags
## (examples/internal/gobuild), so a cold run compiles the Kubernetes tree once, with -race:
## 23 CPU-minutes from a fresh clone with an empty build cache (41 min of wall time measured on
## 2 cores with a CPU hog and other builds beside it; see README). -timeout bounds each test
## binary; it is not a speed target.
test:
	$(GO) test -race -count=1 -timeout 60m ./...

## demo: the README's main job.
demo:
	$(GO) run ./examples/demo

## build: bin/edge-ccm, static and version-stamped, as the Dockerfile builds it.
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o bin/edge-ccm ./examples/edge-ccm

## cross: bin/edge-ccm-linux-ARCH for each of CROSS_ARCHES (the image's platforms), then
## examples/edge-ccm's TestStaticBinary on them (static, as distroless/static needs).
cross:
	@set -e; for arch in $(CROSS_ARCHES); do \
		echo "GOOS=linux GOARCH=$$arch go build ./examples/edge-ccm"; \
		CGO_ENABLED=0 GOOS=linux GOARCH=$$arch $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o bin/edge-ccm-linux-$$arch ./examples/edge-ccm; \
	done
	EDGE_CCM_BINARIES="$(foreach arch,$(CROSS_ARCHES),$(CURDIR)/bin/edge-ccm-linux-$(arch))" \
		$(GO) test -count=1 -run '^TestStaticBinary$$' -v ./examples/edge-ccm

## image-tar: bin/edge-ccm-linux-ARCH.tar for each of CROSS_ARCHES: an image tarball (the static
## binary on an empty base) for `k3s ctr images import` / `docker load`, built without a Docker engine.
## Each architecture is a full build (both: about 20 min on a loaded 2-core machine); a cluster of
## one architecture needs only its own: `make image-tar CROSS_ARCHES=arm64` (Raspberry Pi).
IMAGE_REF ?= localhost/edge-ccm:dev
image-tar: cross
	@set -e; for arch in $(CROSS_ARCHES); do \
		$(GO) run ./examples/edge-ccm/image-tar -binary bin/edge-ccm-linux-$$arch -arch $$arch -ref $(IMAGE_REF) -o bin/edge-ccm-linux-$$arch.tar; \
		echo "bin/edge-ccm-linux-$$arch.tar ($(IMAGE_REF))"; \
	done

## lint: go vet, gofmt, staticcheck and the tracked-files check, as CI runs them.
lint: vet fmt staticcheck files

## files: no tracked file over 1 MB or built binary (hack/check-files.sh names it), and the
## module zip every importer downloads, built from the work tree, under 5 MB (printed).
files:
	bash hack/check-files.sh
	$(GO) test -count=1 -run '^TestModuleZipIsSmall$$' -v . | grep -E 'module zip|FAIL|ok'

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

## fuzz-smoke: each fuzz target (the fake IGD and PCP servers', the igd and pcp clients' decoders of router answers, the edge cloud-config parser) for FUZZTIME (hack/fuzz.sh: a run Go's fuzzing deadline race failed, with no input written, runs once more).
FUZZTIME ?= 15s
fuzz-smoke:
	GO=$(GO) hack/fuzz.sh FuzzParseSOAPRequest ./fake/ $(FUZZTIME)
	GO=$(GO) hack/fuzz.sh FuzzServeControl ./fake/ $(FUZZTIME)
	GO=$(GO) hack/fuzz.sh FuzzParseRootDescription ./igd/ $(FUZZTIME)
	GO=$(GO) hack/fuzz.sh FuzzSOAPAnswer ./igd/ $(FUZZTIME)
	GO=$(GO) hack/fuzz.sh FuzzParsePortListing ./igd/ $(FUZZTIME)
	GO=$(GO) hack/fuzz.sh FuzzParseExternalIP ./igd/ $(FUZZTIME)
	GO=$(GO) hack/fuzz.sh FuzzParseSSDPAnswer ./igd/ $(FUZZTIME)
	GO=$(GO) hack/fuzz.sh FuzzPCPServerRequest ./fake/ $(FUZZTIME)
	GO=$(GO) hack/fuzz.sh FuzzDecodeMapAnswer ./internal/pcpwire/ $(FUZZTIME)
	GO=$(GO) hack/fuzz.sh FuzzDecodeNATPMPAddress ./internal/pcpwire/ $(FUZZTIME)
	GO=$(GO) hack/fuzz.sh FuzzDecodeAnnounce ./internal/pcpwire/ $(FUZZTIME)
	GO=$(GO) hack/fuzz.sh FuzzParseConfig ./provider/edge/ $(FUZZTIME) -fuzzminimizetime 100x

## soak: the real controllers over the load balancer, against the fake router (BACKEND=fake) or
## miniupnpd (BACKEND=lab, as root) in MODE upnp, igd1, secure, pcp or pcp-only, under a random
## schedule of cluster changes and router faults drawn from SEED (unset: a random one, printed;
## on the fake a seed replays its schedule) for DURATION, its invariants checked all along and at
## each quiet point. A violation prints the seed, the schedule so far and the router's table; the
## last line is the summary (soak: N operations, M faults, K checks, V violations, converged ...).
## Each CCM process runs one load balancer as a deployment of edge-ccm does: DEPLOY=ccm (upstream's
## service controller, classless Services) or standalone (the class controller, Services of its
## class and classless ones); unset: by the seed, ccm when odd. FAMILIES=dual (MODE upnp, secure, pcp
## or pcp-only; BACKEND=fake) adds IPv6: IPv6-only and dual-stack Services in either order, their
## second family added and dropped, nodes given, moved to another prefix and losing a global IPv6
## address, IPv6 pinholes (UPnP: node-0's own; PCP: any node) and other hosts' pinholes that must never
## be closed or changed; a quiet point also wants one ingress per family served in spec.ipFamilies
## order and no pinhole open that no live Service holds. FAMILIES=ipv4 (the default) is the soak as before.
BACKEND ?= fake
MODE ?= upnp
DURATION ?= 90s
SEED ?= 0
DEPLOY ?=
FAMILIES ?= ipv4
## RACE=-race runs it under the race detector: upstream's service controller (v0.37) then reports
## its own race between a node sync and a Service sync (serviceCache.allServices), which node changes
## during Service syncs hit.
RACE ?=
soak:
	@mkdir -p bin
	@{ $(GO) test $(RACE) -v -count=1 -timeout 0 -run '^TestSoak$$' ./loadbalancer/ -args -soak \
		-soak.backend=$(BACKEND) -soak.mode=$(MODE) -soak.duration=$(DURATION) -soak.seed=$(SEED) -soak.deploy=$(DEPLOY) -soak.families=$(FAMILIES) 2>&1; \
		echo $$? >bin/soak.rc; } | tee bin/soak.log | grep -v '^soak: [0-9]* operations'; \
		grep '^soak: [0-9]* operations' bin/soak.log | tail -1; exit $$(cat bin/soak.rc)

## tools: install the Debian packages and Go tools the tests need (as root).
tools:
	bash hack/install-deps.sh
