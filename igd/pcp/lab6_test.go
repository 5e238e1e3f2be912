package pcp_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/igdtest"
	"github.com/ccmkit/ccmkit/igd/pcp"
	"github.com/ccmkit/ccmkit/igd/pinhole"
	"github.com/ccmkit/ccmkit/internal/pcplab"
)

// IPv6 lab tests: Pinholes against miniupnpd 2.3.1 in igdtest's IPv6 lab
// (forward policy drop; the internet host reaches a node's global address
// only through a pinhole).

// unreachableWithin bounds a dial that should fail: the lab router's
// firewall drops the SYN, so the dial ends only with this bound.
const unreachableWithin = 500 * time.Millisecond

// labPinholes is a Pinholes acting from node i, from its global address,
// to the router's link-local address (the node's IPv6 default router).
func labPinholes(t *testing.T, lab *igdtest.Lab, i int) *pcp.Pinholes {
	t.Helper()
	n := lab.Nodes[i]
	c, err := pcp.NewClient(pcp.Config{
		Server:      netip.AddrPortFrom(lab.IPv6.RouterLinkLocal.WithZone(lab.IPv6.NodeInterface), pcp.Port),
		DialContext: n.DialContextFrom(n.GUA),
	})
	if err != nil {
		t.Fatal(err)
	}
	p, err := pcp.NewPinholes(pcp.PinholesConfig{PCP: c, Secret: backendSecret})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func wantReach(t *testing.T, lab *igdtest.Lab, addr netip.AddrPort, want bool, why string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), unreachableWithin)
	defer cancel()
	err := lab.InternetReaches(ctx, addr)
	if got := err == nil; got != want {
		t.Fatalf("internet reaches %s = %t (%v), want %t: %s", addr, got, err, want, why)
	}
}

// TestLabPinholeOpensTheWayInOnlyWhileOpen: the controller on node 0 opens
// a pinhole to another node on port 443 (THIRD_PARTY; UPnP refuses both)
// and to itself on 8443; the internet host reaches each only while it is
// open. A controller on another node, with the same secret, closes what
// the first opened (a failover).
func TestLabPinholeOpensTheWayInOnlyWhileOpen(t *testing.T) {
	igdtest.Require(t)
	lab := igdtest.Start(t, igdtest.Options{Nodes: 3, IPv6: true, PCPAllowThirdParty: true})
	ccm := labPinholes(t, lab, 0)
	for _, tt := range []struct {
		name string
		node int
		port uint16
	}{
		{"AnotherNodeOn443", 1, 443},
		{"OwnNodeOn8443", 0, 8443},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n := lab.Nodes[tt.node]
			addr := netip.AddrPortFrom(n.GUA, tt.port)
			n.Serve(t, addr)
			ph := pinhole.Pinhole{InternalClient: n.GUA, InternalPort: tt.port, Protocol: igd.TCP, Lease: 10 * time.Minute}
			wantReach(t, lab, addr, false, "before the pinhole")
			if err := ccm.OpenPinhole(pcplab.Context(t), ph); err != nil {
				t.Fatalf("OpenPinhole(%s) = %v", ph, err)
			}
			wantReach(t, lab, addr, true, "while the pinhole is open")
			if err := ccm.ClosePinhole(pcplab.Context(t), ph); err != nil {
				t.Fatalf("ClosePinhole(%s) = %v", ph, err)
			}
			wantReach(t, lab, addr, false, "after ClosePinhole")

			if err := ccm.OpenPinhole(pcplab.Context(t), ph); err != nil {
				t.Fatal(err)
			}
			if err := labPinholes(t, lab, 2).ClosePinhole(pcplab.Context(t), ph); err != nil {
				t.Fatalf("ClosePinhole from node 2 with the same secret = %v", err)
			}
			wantReach(t, lab, addr, false, "after the other controller's ClosePinhole")
		})
	}
}

// TestLabRenewedPinholeCloses: miniupnpd 2.3.1 drops the nonce of a
// pinhole a MAP renews in place (DESIGN.md; pinned on the wire by
// pcpconformance's RenewalDropsTheNonce), after which no close is
// authorized. OpenPinhole deletes before it maps, so a pinhole opened and
// renewed twice still closes, and the internet loses it at once.
func TestLabRenewedPinholeCloses(t *testing.T) {
	igdtest.Require(t)
	lab := igdtest.Start(t, igdtest.Options{Nodes: 2, IPv6: true, PCPAllowThirdParty: true})
	ccm := labPinholes(t, lab, 0)
	n := lab.Nodes[1]
	addr := netip.AddrPortFrom(n.GUA, 8443)
	n.Serve(t, addr)
	ph := pinhole.Pinhole{InternalClient: n.GUA, InternalPort: 8443, Protocol: igd.TCP, Lease: 10 * time.Minute}
	for range 3 {
		if err := ccm.OpenPinhole(pcplab.Context(t), ph); err != nil {
			t.Fatal(err)
		}
		wantReach(t, lab, addr, true, "after OpenPinhole")
	}
	if err := ccm.ClosePinhole(pcplab.Context(t), ph); err != nil {
		t.Fatalf("ClosePinhole after two renewals = %v, want nil", err)
	}
	wantReach(t, lab, addr, false, "after ClosePinhole")
}

// TestLabIPv6ClientFindsTheDefaultRouter: a client with Config.IPv6 and no
// Server finds the PCP server at the node's IPv6 default router
// (fe80::1%eth0, read from the route table of the node's namespace) and
// opens a pinhole through it.
func TestLabIPv6ClientFindsTheDefaultRouter(t *testing.T) {
	igdtest.Require(t)
	lab := igdtest.Start(t, igdtest.Options{Nodes: 2, IPv6: true, PCPAllowThirdParty: true})
	n := lab.Nodes[0]
	c, err := pcp.NewClient(pcp.Config{IPv6: true, DialContext: n.DialContextFrom(n.GUA)})
	if err != nil {
		t.Fatal(err)
	}
	p, err := pcp.NewPinholes(pcp.PinholesConfig{PCP: c, Secret: backendSecret})
	if err != nil {
		t.Fatal(err)
	}
	target := lab.Nodes[1]
	addr := netip.AddrPortFrom(target.GUA, 8443)
	target.Serve(t, addr)
	ph := pinhole.Pinhole{InternalClient: target.GUA, InternalPort: 8443, Protocol: igd.TCP, Lease: time.Minute}
	// The route table read is the calling thread's: call from inside the
	// node's namespace, as a controller runs in its own.
	if err := n.Do(func() error { return p.OpenPinhole(pcplab.Context(t), ph) }); err != nil {
		t.Fatalf("OpenPinhole through the default router = %v", err)
	}
	wantReach(t, lab, addr, true, "after OpenPinhole")
}
