package main

import (
	"bufio"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/ccmkit/ccmkit/examples/internal/gobuild"
)

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// buildCCM builds this command once per test binary and returns its path.
func buildCCM(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		if binDir, buildErr = os.MkdirTemp("", "ccm-test-"); buildErr != nil {
			return
		}
		buildErr = gobuild.Build(t, "-o", filepath.Join(binDir, "ccm"), ".") // with the test binary's own flags
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(binDir, "ccm")
}

// apiServer is an API server that is healthy and serves nothing else: the
// command gets as far as initializing the cloud and starting controllers,
// whose requests fail.
func apiServer(t *testing.T) (kubeconfig string) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			fmt.Fprint(w, "ok")
			return
		}
		http.NotFound(w, r)
	}))
	t.Cleanup(srv.Close)
	kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters: [{name: test, cluster: {server: %q}}]
contexts: [{name: test, context: {cluster: test, user: test}}]
users: [{name: test, user: {token: x}}]
current-context: test
`, srv.URL), 0o600); err != nil {
		t.Fatal(err)
	}
	return kubeconfig
}

// TestStartsTheRegisteredCloud starts the command against an API server:
// it builds the provider from the registry and initializes it.
func TestStartsTheRegisteredCloud(t *testing.T) {
	cmd := exec.CommandContext(t.Context(), buildCCM(t), "--kubeconfig="+apiServer(t),
		"--secure-port=0", "--leader-elect=false", "--v=2")
	out, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = cmd.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	// Read until the provider says it is initialized, or the command
	// exits (the pipe closes), or starts a controller, which it does only
	// after initializing the cloud.
	const want = `"Initialized cloud provider" provider="mycloud"`
	var seen strings.Builder
	lines := bufio.NewScanner(out)
	for lines.Scan() {
		seen.WriteString(lines.Text() + "\n")
		switch {
		case strings.Contains(lines.Text(), want):
			return
		case strings.Contains(lines.Text(), `] Started "`):
			t.Fatalf("the command started a controller without logging %s; output:\n%s", want, seen.String())
		}
	}
	t.Fatalf("the command ended without logging %s; output:\n%s", want, seen.String())
}

// TestRefusesAnUnknownProvider: a provider the registry does not know stops
// the command, with the names it knows.
func TestRefusesAnUnknownProvider(t *testing.T) {
	cmd := exec.CommandContext(t.Context(), buildCCM(t), "--kubeconfig="+apiServer(t),
		"--secure-port=0", "--leader-elect=false", "--cloud-provider=nope")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the command ran with --cloud-provider=nope; output:\n%s", out)
	}
	if !strings.Contains(string(out), `"nope": unknown cloud provider (registered: mycloud)`) {
		t.Errorf("the output does not say the provider is unknown and which are:\n%s", out)
	}
}
