package main

import (
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"errors"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ccmkit/ccmkit/examples/internal/gobuild"
)

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
)

// TestMain removes the binary built by buildCCM.
func TestMain(m *testing.M) {
	code := m.Run()
	if binary != "" {
		_ = os.RemoveAll(filepath.Dir(binary))
	}
	os.Exit(code)
}

// The version the test binary is stamped with, through the variables the
// Makefile and the Dockerfile set (versionVars).
const (
	testVersion   = "v0.3.1-test+0123abc"
	testCommit    = "0123abcdef0123abcdef0123abcdef0123abcdef"
	testBuildDate = "2026-01-02T03:04:05Z"
)

// versionVars are the -X flags that stamp the version, as the Makefile and
// the Dockerfile pass them (TestBuildFilesStampVersion checks they do: go
// build ignores -X for a variable that does not exist).
var versionVars = map[string]string{
	"k8s.io/component-base/version.gitVersion":          testVersion,
	"k8s.io/component-base/version.gitCommit":           testCommit,
	"k8s.io/component-base/version.buildDate":           testBuildDate,
	"k8s.io/component-base/version/verflag.programName": "edge-ccm",
}

// buildCCM builds this command once per test binary, with the test
// binary's own build flags (gobuild.Build: under make test, -race with cgo,
// so it only links what the test build compiled) and the version stamped
// with -ldflags as the Makefile and the Dockerfile stamp it, and returns the
// binary's path. The static build the image ships is checked by
// TestStaticBinary on what `make cross` builds. Every test that needs the
// binary reports the build's error.
func buildCCM(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "edge-ccm-test-")
		if err != nil {
			buildErr = err
			return
		}
		binary = filepath.Join(dir, "edge-ccm")
		var ldflags []string
		for _, name := range slices.Sorted(maps.Keys(versionVars)) {
			ldflags = append(ldflags, "-X", name+"="+versionVars[name])
		}
		buildErr = gobuild.Build(t, "-ldflags", strings.Join(ldflags, " "), "-o", binary, ".")
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binary
}

// runCCM runs the binary with args and returns its standard output, its
// standard error and its exit code, failing the test if it does not exit
// before the test binary's deadline (gobuild.Context). Built with -race, the
// binary logs a line saying so on standard error.
func runCCM(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	bin := buildCCM(t)
	ctx := gobuild.Context(t)
	cmd := exec.CommandContext(ctx, bin, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("edge-ccm %v did not exit before the test binary's deadline: %v; output:\n%s%s", args, err, out.String(), errOut.String())
	}
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("running %v: %v", args, err)
	}
	return out.String(), errOut.String(), cmd.ProcessState.ExitCode()
}

// TestHelp runs the built command with --help: it exits 0 and lists the
// standard cloud-controller-manager flags, with edge as the default provider.
func TestHelp(t *testing.T) {
	stdout, stderr, code := runCCM(t, "--help")
	out := stdout + stderr
	if code != 0 {
		t.Fatalf("edge-ccm --help exited %d; output:\n%s", code, out)
	}
	for _, flag := range []string{
		"--cloud-provider string", "--cloud-config string", "--cluster-name string",
		"--leader-elect", "--controllers strings", "--kubeconfig string",
		"--secure-port int", "--concurrent-service-syncs",
		"--node-status-update-frequency", "-v, --v Level",
	} {
		if !strings.Contains(out, flag) {
			t.Errorf("--help does not list %q", flag)
		}
	}
	if !strings.Contains(out, `(default "edge")`) {
		t.Error(`--help does not show --cloud-provider defaulting to "edge"`)
	}
	// The controller names and aliases of k8s.io/cloud-provider/names.
	for _, ctrl := range []string{"cloud-node-controller", "service-lb-controller"} {
		if !strings.Contains(out, ctrl) {
			t.Errorf("--help does not mention controller %s", ctrl)
		}
	}
}

// TestVersion runs the built command with --version and --version=raw: they
// print the version, commit and build date stamped with -ldflags.
func TestVersion(t *testing.T) {
	out, stderr, code := runCCM(t, "--version")
	if code != 0 {
		t.Fatalf("edge-ccm --version exited %d; output:\n%s%s", code, out, stderr)
	}
	if got, want := strings.TrimSpace(out), "edge-ccm "+testVersion; got != want {
		t.Errorf("edge-ccm --version printed %q, want %q", got, want)
	}
	raw, _, code := runCCM(t, "--version=raw")
	if code != 0 {
		t.Fatalf("edge-ccm --version=raw exited %d; output:\n%s", code, raw)
	}
	for _, want := range []string{`GitVersion:"` + testVersion + `"`, `GitCommit:"` + testCommit + `"`, `BuildDate:"` + testBuildDate + `"`} {
		if !strings.Contains(raw, want) {
			t.Errorf("edge-ccm --version=raw does not show %s:\n%s", want, raw)
		}
	}
}

// TestBuildFilesStampVersion checks that the Makefile and the Dockerfile
// stamp every variable the version test stamps, spelled the same: go build
// silently ignores -X for a variable that does not exist.
func TestBuildFilesStampVersion(t *testing.T) {
	for _, file := range []string{"../../Makefile", "Dockerfile"} {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		// The Makefile names the package through $(VERSION_PKG).
		text := strings.ReplaceAll(string(data), "$(VERSION_PKG)", "k8s.io/component-base/version")
		for name := range versionVars {
			if !strings.Contains(text, "-X "+name+"=") {
				t.Errorf("%s does not stamp %s with -ldflags -X", file, name)
			}
		}
	}
}

// TestDockerfileCrossCompiles checks that the Dockerfile builds on the
// builder's platform for BuildKit's target platform, statically, so one
// `docker buildx build --platform linux/amd64,linux/arm64` needs no
// emulation and gives images for distroless/static. (CI has no Docker
// engine; `make cross` builds the same binaries with go alone.)
func TestDockerfileCrossCompiles(t *testing.T) {
	data, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	for _, want := range []string{
		"FROM --platform=$BUILDPLATFORM ",
		"ARG TARGETOS\n", "ARG TARGETARCH\n",
		"CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath",
		"FROM gcr.io/distroless/static",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
}

// releaseBinaries names, separated by spaces, the release binaries
// TestStaticBinary checks; `make cross` sets it to the ones it built.
const releaseBinaries = "EDGE_CCM_BINARIES"

// TestStaticBinary checks that the binaries built like the Dockerfile's
// (by `make cross`, which runs this test on them) were built with
// CGO_ENABLED=0 and -trimpath and need no dynamic loader, so they run on a
// distroless/static image. make test builds no release binary (the
// commands its tests run are built like the test binaries, see buildCCM),
// so there it skips.
func TestStaticBinary(t *testing.T) {
	paths := strings.Fields(os.Getenv(releaseBinaries))
	if len(paths) == 0 {
		t.Skipf("%s is not set: `make cross` runs this test on the binaries it builds", releaseBinaries)
	}
	for _, path := range paths {
		t.Run(filepath.Base(path), func(t *testing.T) {
			info, err := buildinfo.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			settings := map[string]string{}
			for _, s := range info.Settings {
				settings[s.Key] = s.Value
			}
			if settings["CGO_ENABLED"] != "0" || settings["-trimpath"] != "true" {
				t.Errorf("built with CGO_ENABLED=%q -trimpath=%q, want 0 and true", settings["CGO_ENABLED"], settings["-trimpath"])
			}
			f, err := elf.Open(path)
			if err != nil {
				t.Fatalf("not an ELF binary: %v", err)
			}
			t.Cleanup(func() { _ = f.Close() })
			for _, p := range f.Progs {
				if p.Type == elf.PT_INTERP {
					t.Fatal("the binary has a program interpreter: it is dynamically linked")
				}
			}
		})
	}
}

// TestBadCloudConfigStops runs the command with a mistyped cloud-config: it
// must stop with a non-zero exit code and a message naming the key, before
// contacting any API server (the kubeconfig points at a closed port).
func TestBadCloudConfigStops(t *testing.T) {
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: none, cluster: {server: "https://127.0.0.1:1"}}]
contexts: [{name: none, context: {cluster: none, user: none}}]
users: [{name: none, user: {token: x}}]
current-context: none
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cloudConfig := filepath.Join(dir, "cloud-config.yaml")
	if err := os.WriteFile(cloudConfig, []byte("loadBalancer:\n  lease: 1 hour\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := runCCM(t, "--kubeconfig="+kubeconfig, "--secure-port=0", "--leader-elect=false", "--cloud-config="+cloudConfig)
	out := stdout + stderr
	if code == 0 {
		t.Fatalf("edge-ccm with a bad cloud-config exited 0; output:\n%s", out)
	}
	if !strings.Contains(out, "loadBalancer.lease") || !strings.Contains(out, "not a Go duration") {
		t.Errorf("output does not name the bad key and why:\n%s", out)
	}
}
