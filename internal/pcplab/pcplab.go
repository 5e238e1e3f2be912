// Package pcplab holds what ccmkit's lab tests against miniupnpd in
// igdtest's namespaces share: a bounded context, the PCP client's
// configuration acting from a node, and igd's UPnP client acting from a
// node (a peer's view of the router's table, or the load balancer's
// client), with a check of one mapping. Only tests import it; it is not in
// igdtest because igd/pcp is built on pcpwire, whose internal tests import
// igdtest.
package pcplab

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/igdtest"
	"github.com/ccmkit/ccmkit/internal/pcpwire"
)

// Context bounds a lab test: the lab answers in milliseconds, the bound
// only stops a hung test. It is cancelled when the test ends.
func Context(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// Config is a PCP client's configuration acting from lab's node i and
// talking to the router's LAN address: its sockets are made in the node's
// namespace. igd/pcp's tests convert it (pcp.Config(Config(lab, i))).
func Config(lab *igdtest.Lab, i int) pcpwire.Config {
	n := lab.Nodes[i]
	return pcpwire.Config{
		Gateway:      func(context.Context) (netip.Addr, error) { return lab.RouterLAN, nil },
		DialContext:  n.DialContext,
		ListenPacket: n.ListenPacket,
	}
}

// UPnPClient is igd's UPnP client acting from lab's node i: the peer's
// view of the router's table. It fails the test if the client cannot be
// made.
func UPnPClient(t testing.TB, lab *igdtest.Lab, i int) *igd.UPnPClient {
	t.Helper()
	c, err := igd.NewClient(lab.ClientConfig(i))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// WantMapping fails the test unless the router u reads holds key -> want
// with description d.
func WantMapping(t testing.TB, ctx context.Context, u *igd.UPnPClient, key igd.Key, want netip.AddrPort, d string) {
	t.Helper()
	m, err := u.GetPortMapping(ctx, key.Protocol, key.ExternalPort)
	if err != nil {
		t.Fatalf("GetPortMapping(%s) = %v, want %s %q", key, err, want, d)
	}
	if got := netip.AddrPortFrom(m.InternalClient, m.InternalPort); got != want || m.Description != d {
		t.Fatalf("router holds %s -> %s %q, want %s %q", key, got, m.Description, want, d)
	}
}
