package main

import (
	"bytes"
	"context"
	"net/netip"
	"regexp"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
)

// demoTimeout is the -timeout of the demo runs that must succeed: a hang
// guard, never reached (a run takes a second or two, longer on a busy
// machine).
const demoTimeout = "10m"

// TestDemo runs the demo against the fake router and checks that its output
// tells the whole story, in order.
func TestDemo(t *testing.T) {
	before := runtime.NumGoroutine()
	var out bytes.Buffer
	if err := run(context.Background(), []string{"-timeout", demoTimeout, "-port", "8443"}, &out); err != nil {
		t.Fatalf("demo failed: %v\noutput:\n%s", err, out.String())
	}
	want := []string{
		`(?m)^ccmkit demo: the edge cloud provider on a fake cluster with a fake router$`,
		`(?m)^\[router\]  fake UPnP IGD router .* at http://127\.0\.0\.1:\d+/rootDesc\.xml$`,
		`(?m)^\[router\]  external IP 198\.51\.101\.7$`,
		`(?m)^\[ccm\]     provider "edge" built from this cloud-config:$`,
		`(?m)^\s+url: http://127\.0\.0\.1:\d+/rootDesc\.xml$`,
		`(?m)^\[cluster\] node demo-node registered by kubelet, tainted node\.cloudprovider\.kubernetes\.io/uninitialized$`,
		`(?m)^\[ccm\]     node demo-node initialized: providerID edge://demo-node, addresses \[InternalIP 192\.168\.1\.10, Hostname demo-node\], taint removed$`,
		`(?m)^\[cluster\] Service default/hello created: type LoadBalancer, port 8443 -> nodePort 30080$`,
		`(?m)^\[router\]  mapping TCP/8443 -> 192\.168\.1\.10:30080, description ".*default/hello.*"$`,
		`(?m)^\[ccm\]     Service default/hello has external IP 198\.51\.101\.7: 198\.51\.101\.7:8443 reaches demo-node port 30080$`,
		`(?m)^\[cluster\] Service default/hello deleted`,
		`(?m)^\[router\]  mapping TCP/8443 removed; the router's table is empty$`,
		`(?m)^demo finished in `,
	}
	text := out.String()
	pos := 0
	for _, w := range want {
		loc := regexp.MustCompile(w).FindStringIndex(text[pos:])
		if loc == nil {
			t.Fatalf("output lacks %q after byte %d:\n%s", w, pos, text)
		}
		pos += loc[1]
	}

	// Every goroutine the demo started has returned (the bound stops a
	// leak from hanging the test; they return within milliseconds).
	deadline := time.Now().Add(2 * time.Minute)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines before the demo, %d after:\n%s", before, n, buf[:runtime.Stack(buf, true)])
	}
}

// TestHelp runs the demo's main with -h (and -help): it prints what the demo
// shows and its flags, and exits 0 without running anything.
func TestHelp(t *testing.T) {
	for _, arg := range []string{"-h", "-help", "--help"} {
		t.Run(arg, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := runMain(context.Background(), []string{arg}, &stdout, &stderr); code != 0 {
				t.Errorf("exit code %d, want 0; stderr:\n%s", code, stderr.String())
			}
			if stderr.Len() > 0 {
				t.Errorf("stderr is not empty:\n%s", stderr.String())
			}
			for _, want := range []string{"Usage: go run ./examples/demo", "port mapping on the router", "-router-url", "-timeout", "real router"} {
				if !strings.Contains(stdout.String(), want) {
					t.Errorf("usage lacks %q:\n%s", want, stdout.String())
				}
			}
			if strings.Contains(stdout.String(), "[router]") {
				t.Errorf("-h ran the demo:\n%s", stdout.String())
			}
		})
	}
}

// TestMainExitCode: a failing demo exits 1 and says so on stderr.
func TestMainExitCode(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := runMain(context.Background(), []string{"-bogus"}, &stdout, &stderr); code != 1 {
		t.Errorf("exit code %d, want 1", code)
	}
	if !strings.HasPrefix(stderr.String(), "demo failed: ") || !strings.Contains(stderr.String(), "bogus") {
		t.Errorf("stderr = %q, want a demo failed line naming the flag", stderr.String())
	}
}

// TestDemoFails checks that the demo reports failures instead of printing a
// happy ending: bad flags, and a router that does not answer.
func TestDemoFails(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		contains string
	}{
		{name: "unknown flag", args: []string{"-bogus"}, contains: "bogus"},
		{name: "bad port", args: []string{"-port", "0"}, contains: "-port 0"},
		{name: "argument", args: []string{"extra"}, contains: "unexpected arguments"},
		{name: "router not answering", args: []string{"-router-url", "http://127.0.0.1:1/rootDesc.xml", "-timeout", "10s"}, contains: "external IP"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			err := run(context.Background(), tt.args, &out)
			if err == nil {
				t.Fatalf("demo %v succeeded; output:\n%s", tt.args, out.String())
			}
			if !strings.Contains(err.Error(), tt.contains) {
				t.Errorf("error %q does not contain %q", err, tt.contains)
			}
			if strings.Contains(out.String(), "demo finished") {
				t.Errorf("a failed demo printed its happy ending:\n%s", out.String())
			}
		})
	}
}

// TestDemoRouterURL runs the demo with -router-url, the path taken for a real
// router, against a fake router in secure mode served over HTTP: the demo
// node must be this host (its address toward the router), and the mapping
// must be made and removed.
func TestDemoRouterURL(t *testing.T) {
	// A public-looking address: the load balancer never reports a
	// non-public one (see TestDemoWaitsForAPublicExternalIP).
	router := fake.NewRouter(fake.RouterConfig{SecureMode: true, ExternalIP: netip.MustParseAddr("198.51.101.9")})
	srv := fake.NewServer(router, fake.ServerOptions{})
	t.Cleanup(srv.Close)
	// Another host's mapping, which the demo must leave alone.
	foreign := igd.Mapping{Protocol: igd.TCP, ExternalPort: 22, InternalClient: netip.MustParseAddr("192.168.1.50"), InternalPort: 22, Description: "ssh", Enabled: true}
	router.Put(foreign)

	var out bytes.Buffer
	if err := run(context.Background(), []string{"-router-url", srv.RootDescURL, "-timeout", demoTimeout}, &out); err != nil {
		t.Fatalf("demo failed: %v\noutput:\n%s", err, out.String())
	}
	for _, want := range []string{
		"ccmkit demo: the edge cloud provider on a fake cluster with a REAL router at " + srv.RootDescURL,
		"[router]  real router at " + srv.RootDescURL,
		"[router]  external IP 198.51.101.9",
		"[router]  this host is 127.0.0.1 on the router's LAN",
		"secureMode: true",
		"[router]  mapping TCP/8080 -> 127.0.0.1:30080",
		"[ccm]     Service default/hello has external IP 198.51.101.9",
		"[router]  mapping TCP/8080 removed; other mappings left untouched: 1",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if got := router.Mappings(); len(got) != 1 || got[0].Key() != foreign.Key() || got[0].InternalClient != foreign.InternalClient {
		t.Errorf("router table after the demo = %v, want only the foreign mapping %v", got, foreign)
	}
}

// A router whose external IP is not public (here a documentation range, as
// behind another NAT) gets no Service status: the demo fails saying why, and
// removes the mapping it made.
func TestDemoWaitsForAPublicExternalIP(t *testing.T) {
	router := fake.NewRouter(fake.RouterConfig{SecureMode: true, ExternalIP: netip.MustParseAddr("203.0.113.9")})
	srv := fake.NewServer(router, fake.ServerOptions{})
	t.Cleanup(srv.Close)
	var out bytes.Buffer
	// The demo waits out its -timeout for an address it never gets, then
	// shows the Warning event that says why: the bound must leave a busy
	// machine time to map the port and sync the Service first.
	err := run(context.Background(), []string{"-router-url", srv.RootDescURL, "-timeout", "20s"}, &out)
	if err == nil || !strings.Contains(err.Error(), "203.0.113.9") || !strings.Contains(err.Error(), "not a public address") {
		t.Errorf("demo = %v, want a failure naming the external IP as not public\noutput:\n%s", err, out.String())
	}
	if got := router.Mappings(); len(got) != 0 {
		t.Errorf("router table after the failed demo = %v, want empty", got)
	}
}

// TestDemoCleansUpAfterFailure makes the demo fail after the provider has
// mapped the Service's port on a "real" router: the router tells the demo's
// own client a wrong external IP (every answer before the demo starts
// looking for the mapping), so the Service's IP, which the provider asks
// for later, does not match. The demo must report the failure and leave no
// mapping of its own behind, while another host's mapping stays.
func TestDemoCleansUpAfterFailure(t *testing.T) {
	router := fake.NewRouter(fake.RouterConfig{})
	var looking atomic.Bool
	router.Intercept(fake.RouterHooks{
		GetPortMapping: func(ctx context.Context, _ netip.Addr, k igd.Key, next fake.GetFunc) (igd.Mapping, error) {
			looking.Store(true)
			return next(ctx, k)
		},
		ExternalIP: func(ctx context.Context, _ netip.Addr, next fake.AddrFunc) (netip.Addr, error) {
			if looking.Load() {
				return next(ctx)
			}
			return netip.MustParseAddr("203.0.113.250"), nil
		},
	})
	srv := fake.NewServer(router, fake.ServerOptions{})
	t.Cleanup(srv.Close)
	foreign := igd.Mapping{Protocol: igd.TCP, ExternalPort: 22, InternalClient: netip.MustParseAddr("192.168.1.50"), InternalPort: 22, Description: "ssh", Enabled: true}
	router.Put(foreign)

	var out bytes.Buffer
	err := run(context.Background(), []string{"-router-url", srv.RootDescURL, "-timeout", demoTimeout}, &out)
	if err == nil || !strings.Contains(err.Error(), "external IP") {
		t.Fatalf("demo = %v, want a failure about the external IP; output:\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "[router]  mapping TCP/8080 -> 127.0.0.1:30080") {
		t.Fatalf("the demo failed before the mapping was made, so this test proves nothing; output:\n%s", out.String())
	}
	if got := router.Mappings(); len(got) != 1 || got[0].Key() != foreign.Key() {
		t.Errorf("router table after the failed demo = %v, want only the foreign mapping %v", got, foreign)
	}
}
