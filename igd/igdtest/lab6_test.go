package igdtest_test

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/ccmkit/ccmkit/igd/igdtest"
)

// unreachableWithin bounds a dial that is expected to fail: the router's
// firewall drops the SYN, so the dial only ends with this bound.
const unreachableWithin = 500 * time.Millisecond

// internetReaches tries addr from the internet host, bounded for a dial the
// firewall drops.
func internetReaches(ctx context.Context, lab *igdtest.Lab, addr netip.AddrPort) error {
	ctx, cancel := context.WithTimeout(ctx, unreachableWithin)
	defer cancel()
	return lab.InternetReaches(ctx, addr)
}

// TestIPv6LabReachesTheNodeOnlyThroughAPinhole pins the IPv6 lab itself,
// with the upnpc peer client: the internet host cannot reach a node's
// listener on its global address until the node opens a pinhole, and
// cannot again once it is deleted.
func TestIPv6LabReachesTheNodeOnlyThroughAPinhole(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{IPv6: true})
	ctx := testContext(t)
	n := lab.Nodes[0]
	if lab.IPv6 == nil {
		t.Fatal("lab.IPv6 = nil, want the IPv6 lab's addresses")
	}
	if got := n.GUA.String(); got != "2001:db8:1::10" {
		t.Errorf("node 0 GUA = %s, want 2001:db8:1::10", got)
	}
	if got := n.ULA.String(); got != "fd00:1::10" {
		t.Errorf("node 0 ULA = %s, want fd00:1::10", got)
	}

	n.Serve(t, netip.AddrPortFrom(n.GUA, 8443))
	target := netip.AddrPortFrom(n.GUA, 8443)
	if err := internetReaches(ctx, lab, target); err == nil {
		t.Fatalf("the internet reaches the node with no pinhole: dial to %s succeeded, want it to fail", target)
	}

	out, err := lab.ExecNode(ctx, 0, "upnpc", "-6", "-u", lab.IPv6.RootDescURL, "-A", "", "0", n.GUA.String(), "8443", "TCP", "3600")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "Pinhole ID = ") {
		t.Fatalf("upnpc AddPinhole output lacks %q:\n%s\nminiupnpd log:\n%s", "Pinhole ID = ", out, lab.Log())
	}
	id := strings.TrimSpace(out[strings.LastIndex(out, "=")+1:])
	if err := internetReaches(ctx, lab, target); err != nil {
		t.Fatalf("the internet does not reach the node through the pinhole: %v", err)
	}

	out, err = lab.ExecNode(ctx, 0, "upnpc", "-6", "-u", lab.IPv6.RootDescURL, "-D", id)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "returned : 0") {
		t.Fatalf("upnpc DeletePinhole output lacks %q:\n%s", "returned : 0", out)
	}
	if err := internetReaches(ctx, lab, target); err == nil {
		t.Fatalf("the internet still reaches the node after the pinhole was deleted: dial to %s succeeded, want it to fail", target)
	}
}
