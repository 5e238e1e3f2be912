package loadbalancer

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/pinhole"
)

// Global IPv6 addresses of the test nodes, and addresses that are not global.
var (
	guaA  = netip.MustParseAddr("2001:db8:1::10")
	guaB  = netip.MustParseAddr("2001:db8:1::11")
	guaA2 = netip.MustParseAddr("2001:db8:2::10") // node-a after its prefix changed
	ulaB  = netip.MustParseAddr("fd00:1::11")
	llC   = netip.MustParseAddr("fe80::12")
)

// withIPv6 adds InternalIP addresses to a node.
func withIPv6(addrs ...netip.Addr) nodeOpt {
	return func(n *v1.Node) {
		for _, a := range addrs {
			n.Status.Addresses = append(n.Status.Addresses, v1.NodeAddress{Type: v1.NodeInternalIP, Address: a.String()})
		}
	}
}

// dualNodes returns node-a (GUA), node-b (ULA only), node-c (link-local only).
func dualNodes() []*v1.Node {
	return []*v1.Node{newNode("node-a", addrA, withIPv6(guaA)), newNode("node-b", addrB, withIPv6(ulaB)), newNode("node-c", addrC, withIPv6(llC))}
}

// withFamilies sets spec.ipFamilies.
func withFamilies(fams ...v1.IPFamily) svcOpt {
	return func(s *v1.Service) { s.Spec.IPFamilies = fams }
}

// fakePinholes is a router's IPv6 firewall as a PinholeClient: it records
// the pinholes open with when their lease ends, and every call; it can fail
// every call (fail) and lose every pinhole (wipe, as a router restart does).
// Like miniupnpd over UPnP it opens pinholes only for self, from port 1024;
// anyHostPinholes (PCP with THIRD_PARTY) opens any.
type fakePinholes struct {
	clock clock.Clock
	self  netip.Addr

	mu    sync.Mutex
	open  map[pinholeKey]time.Time // to when its lease ends
	calls []string
	fail  error
}

type anyHostPinholes struct{ *fakePinholes }

func (anyHostPinholes) PinholesForAnyHost() bool { return true }

func newFakePinholes(clk clock.Clock, self netip.Addr) *fakePinholes {
	return &fakePinholes{clock: clk, self: self, open: make(map[pinholeKey]time.Time)}
}

func (f *fakePinholes) OpenPinhole(_ context.Context, p pinhole.Pinhole) error {
	return f.openFor(p, false)
}

func (a anyHostPinholes) OpenPinhole(_ context.Context, p pinhole.Pinhole) error {
	return a.openFor(p, true)
}

func (f *fakePinholes) openFor(p pinhole.Pinhole, anyHost bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "open "+pinholeRow(p))
	switch {
	case f.fail != nil:
		return f.fail
	case !anyHost && (p.InternalClient != f.self || p.InternalPort < 1024):
		return fmt.Errorf("open pinhole %s: %w", pinholeRow(p), igd.ErrNotAuthorized)
	case p.Lease <= 0 || p.Lease > MaxPinholeLease:
		return fmt.Errorf("open pinhole %s: lease %s out of range", pinholeRow(p), p.Lease)
	}
	f.open[keyOf(p)] = f.clock.Now().Add(p.Lease)
	return nil
}

func (f *fakePinholes) ClosePinhole(_ context.Context, p pinhole.Pinhole) error {
	return f.closeFor(p, false)
}

func (a anyHostPinholes) ClosePinhole(_ context.Context, p pinhole.Pinhole) error {
	return a.closeFor(p, true)
}

func (f *fakePinholes) closeFor(p pinhole.Pinhole, anyHost bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "close "+pinholeRow(p))
	switch {
	case f.fail != nil:
		return f.fail
	case !anyHost && p.InternalClient != f.self:
		return fmt.Errorf("close pinhole %s: %w", pinholeRow(p), igd.ErrNotAuthorized)
	}
	delete(f.open, keyOf(p))
	return nil
}

// LocalAddrs returns self, the host's global address (UPnP: the address its
// requests come from), or fails as every call does.
func (f *fakePinholes) LocalAddrs(context.Context) ([]netip.Addr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return nil, f.fail
	}
	return []netip.Addr{f.self}, nil
}

func keyOf(p pinhole.Pinhole) pinholeKey {
	return pinholeKey{Protocol: p.Protocol, Addr: p.InternalClient, Port: p.InternalPort}
}

// pinholeRow is "TCP [2001:db8::1]:8080".
func pinholeRow(p pinhole.Pinhole) string {
	return fmt.Sprintf("%s %s", p.Protocol, netip.AddrPortFrom(p.InternalClient, p.InternalPort))
}

// checkingPinholes is a fakePinholes that answers PinholeHeld (UPnP's
// GetPinholePackets by the pinhole's ID).
type checkingPinholes struct{ anyHostPinholes }

func (c checkingPinholes) PinholeHeld(_ context.Context, p pinhole.Pinhole) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, "check "+pinholeRow(p))
	if c.fail != nil {
		return false, c.fail
	}
	end, ok := c.open[keyOf(p)]
	return ok && c.clock.Now().Before(end), nil
}

// Open returns the pinholes whose lease has not ended, sorted.
func (f *fakePinholes) Open() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := []string{}
	for k, end := range f.open {
		if f.clock.Now().Before(end) {
			out = append(out, pinholeRow(pinhole.Pinhole{Protocol: k.Protocol, InternalClient: k.Addr, InternalPort: k.Port}))
		}
	}
	slices.Sort(out)
	return out
}

// Calls returns the calls made since the last Calls, in order.
func (f *fakePinholes) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.calls
	f.calls = nil
	if out == nil {
		out = []string{}
	}
	return out
}

// Wipe loses every pinhole, as a router restart does.
func (f *fakePinholes) Wipe() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.open)
}

// Fail makes every call fail with err (nil: succeed again).
func (f *fakePinholes) Fail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail = err
}

// pin is the row of a pinhole for the tests' wants.
func pin(proto igd.Protocol, addr netip.Addr, port uint16) string {
	return pinholeRow(pinhole.Pinhole{Protocol: proto, InternalClient: addr, InternalPort: port})
}
