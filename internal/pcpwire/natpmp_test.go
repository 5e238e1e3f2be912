package pcpwire_test

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/internal/pcpwire"
)

// fakeEnv is a fake router speaking UPnP and PCP (THIRD_PARTY allowed) on
// a fake clock.
type fakeEnv struct {
	router *fake.Router
	server *fake.PCPServer
	clock  *clocktesting.FakeClock
}

func newFakeEnv(t *testing.T) *fakeEnv {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	r := fake.NewRouter(fake.RouterConfig{Clock: clk})
	s, err := fake.NewPCPServer(fake.PCPConfig{Router: r, AllowThirdParty: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return &fakeEnv{router: r, server: s, clock: clk}
}

func TestExternalAddr(t *testing.T) {
	e := newFakeEnv(t)
	c, err := pcpwire.NewClient(pcpwire.Config{Server: e.server.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.ExternalAddr(context.Background())
	if want := e.router.ExternalIP(); err != nil || got != want {
		t.Errorf("ExternalAddr = %v, %v; want %v", got, err, want)
	}
	e.router.SetExternalIP(netip.IPv4Unspecified()) // the WAN link is down
	if _, err := c.ExternalAddr(context.Background()); !errors.As(err, new(*pcpwire.ResultError)) {
		t.Errorf("ExternalAddr with the WAN down = %v, want a *pcpwire.ResultError", err)
	}
}

// A client that never maps between renewals (a blind load balancer asks
// only the external address, by NAT-PMP, on every pass) still learns of
// an unannounced restart: the NAT-PMP answer carries the server's epoch
// (miniupnpd 2.3.1: the same epoch_origin as PCP's), and one that went
// back signals Restarts.
func TestExternalAddrSeesAnUnannouncedRestart(t *testing.T) {
	e := newFakeEnv(t)
	c, err := pcpwire.NewClient(pcpwire.Config{Server: e.server.Addr()})
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
