package pcp_test

import (
	"context"
	"testing"
	"time"

	"github.com/ccmkit/ccmkit/igd/pcp"
)

// A client that never maps between renewals (a blind load balancer asks
// only the external address, by NAT-PMP, on every pass) still learns of
// an unannounced restart: the NAT-PMP answer carries the server's epoch
// (miniupnpd 2.3.1: the same epoch_origin as PCP's), and one that went
// back signals Restarts.
func TestExternalAddrSeesAnUnannouncedRestart(t *testing.T) {
	e := newBackendEnv(t, true)
	c, err := pcp.NewClient(pcp.Config{Server: e.server.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	ask := func() {
		t.Helper()
		if _, err := c.ExternalAddr(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	e.clock.Step(10 * time.Minute)
	ask()
	ask()
	select {
	case <-c.Restarts():
		t.Fatal("Restarts fired for a steady epoch")
	default:
	}
	e.server.Restart() // its ANNOUNCE reaches no listener: lost
	ask()
	select {
	case <-c.Restarts():
	default:
		t.Fatal("Restarts did not fire when the NAT-PMP epoch went back")
	}
}
