package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/ccmkit/ccmkit/examples/internal/gobuild"
	"github.com/ccmkit/ccmkit/igd/igdtest"
)

// TestDemoAgainstMiniupnpd runs the demo binary with -router-url inside a
// lab node's network namespace, against a real miniupnpd, with and without
// secure mode. Another host's mapping must survive. Needs root and
// miniupnpd (skipped otherwise, mandatory when CI=true). The demo is built
// like this test binary (gobuild.Build), so the build only links.
func TestDemoAgainstMiniupnpd(t *testing.T) {
	igdtest.Require(t)
	bin := filepath.Join(t.TempDir(), "demo")
	if err := gobuild.Build(t, "-o", bin, "."); err != nil {
		t.Fatal(err)
	}
	for _, secure := range []bool{false, true} {
		name := "open"
		if secure {
			name = "secure mode"
		}
		t.Run(name, func(t *testing.T) {
			lab := igdtest.Start(t, igdtest.Options{SecureMode: secure, Nodes: 2})
			ctx := gobuild.Context(t)
			// Another host's mapping, made with the peer client.
			foreignHost := lab.Nodes[1].Addr.String()
			if out, err := lab.Upnpc(ctx, 1, "-e", "someone else", "-a", foreignHost, "45022", "45022", "TCP"); err != nil || !strings.Contains(out, "is redirected to internal") {
				t.Fatalf("upnpc -a: %v\n%s", err, out)
			}

			out, err := lab.ExecNode(ctx, 0, bin, "-router-url", lab.RootDescURL, "-timeout", demoTimeout)
			if err != nil {
				t.Fatalf("demo failed: %v\noutput:\n%s\nminiupnpd log:\n%s", err, out, lab.Log())
			}
			t.Logf("demo output:\n%s", out)
			node := lab.Nodes[0].Addr.String()
			for _, want := range []string{
				"[router]  external IP " + lab.ExternalIP.String(),
				"[router]  this host is " + node + " on the router's LAN",
				"[router]  mapping TCP/8080 -> " + node + ":30080",
				"[ccm]     Service default/hello has external IP " + lab.ExternalIP.String(),
				"[router]  mapping TCP/8080 removed; other mappings left untouched: 1",
				"demo finished in",
			} {
				if !strings.Contains(out, want) {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
			list, err := lab.Upnpc(ctx, 0, "-l")
			if err != nil {
				t.Fatalf("upnpc -l: %v\n%s", err, list)
			}
			if !strings.Contains(list, "45022->"+foreignHost+":45022") {
				t.Errorf("the other host's mapping is gone:\n%s", list)
			}
			if strings.Contains(list, "8080->") {
				t.Errorf("the demo's mapping is still on the router:\n%s", list)
			}
		})
	}
}
