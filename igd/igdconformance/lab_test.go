package igdconformance_test

import (
	"testing"

	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/igdconformance"
	"github.com/ccmkit/ccmkit/igd/igdtest"
)

// labClient returns the real client acting from node i of lab.
func labClient(t *testing.T, lab *igdtest.Lab, i int) igd.Client {
	t.Helper()
	cfg := lab.ClientConfig(i)
	// The suite checks behaviour, not speed: on a loaded CI machine under
	// -race a miniupnpd answer can take longer than the default 2 s bound,
	// which would fail a case for the wrong reason.
	cfg.CallTimeout = igdconformance.CallTimeout
	c, err := igd.NewClient(cfg)
	if err != nil {
		t.Fatalf("igd.NewClient: %v", err)
	}
	return c
}

// labBackend runs each case on a fresh lab: a real miniupnpd 2.3.1 in
// network namespaces, with two LAN nodes, talked to by the real client.
func labBackend(opts igdtest.Options, service string) igdconformance.Backend {
	return igdconformance.Backend{
		Start: func(t *testing.T, cfg igdconformance.Config) igdconformance.Router {
			o := opts
			o.Nodes = 2
			o.SecureMode = cfg.SecureMode
			lab := igdtest.Start(t, o)
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("miniupnpd log:\n%s", lab.Log())
				}
			})
			return igdconformance.Router{
				A: labClient(t, lab, 0), B: labClient(t, lab, 1),
				AddrA: lab.Nodes[0].Addr, AddrB: lab.Nodes[1].Addr,
				ExternalIP: lab.ExternalIP,
				Reboot:     lab.Reboot,
			}
		},
		SupportsSecureMode: true,
		CanReboot:          true,
		ListServiceType:    service,
	}
}

// TestConformanceLab runs the router behaviour suite against the real client
// and a real miniupnpd (backend 3), in its default IGD:2 configuration
// (WANIPConnection:2, listed with GetListOfPortMappings) and forced to IGD:1
// (WANIPConnection:1, listed entry by entry). It needs root and the lab's
// programs; see igdtest for when it skips.
func TestConformanceLab(t *testing.T) {
	igdtest.Require(t)
	t.Run("IGDv2", func(t *testing.T) {
		igdconformance.Run(t, labBackend(igdtest.Options{}, "WANIPConnection:2"))
	})
	t.Run("IGDv1", func(t *testing.T) {
		igdconformance.Run(t, labBackend(igdtest.Options{ForceIGDv1: true}, "WANIPConnection:1"))
	})
}
