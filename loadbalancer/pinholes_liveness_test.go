package loadbalancer

import (
	"context"
	"fmt"
	"net/netip"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/pinhole"
)

// goneAddrPinholes is a PinholeClient on a host that no longer has the
// address gone: a request from it cannot be sent (UPnP sends each
// pinhole's request from its own address, provider/edge ownPinholes), so
// every ClosePinhole of a pinhole there is refused, as provider/edge's
// ownPinholes refuses it: an error matching igd.ErrNotAuthorized (and the
// bind error).
type goneAddrPinholes struct {
	anyHostPinholes
	gone netip.Addr
}

func (g goneAddrPinholes) ClosePinhole(ctx context.Context, p pinhole.Pinhole) error {
	if p.InternalClient == g.gone {
		return fmt.Errorf("%w: this host does not have address %s: dial from [%s]: %w", igd.ErrNotAuthorized, g.gone, g.gone, syscall.EADDRNOTAVAIL)
	}
	return g.anyHostPinholes.ClosePinhole(ctx, p)
}

// A node whose prefix changed is served on IPv6 at its new address even
// when the pinholes at the old one can never be closed (the host no longer
// has the old address): they end with their lease, and the Service is not
// left without its IPv6 ingress for ever.
func TestServiceServedAtTheNewPrefixWhenTheOldPinholesCannotBeClosed(t *testing.T) {
	e, f := newDualEnv(t, Config{}, fake.RouterConfig{}, anyHostPinhole)
	svc := dualService("web")
	svc.Status.LoadBalancer = *e.mustEnsure(t, svc, dualNodes())

	moved, err := New(Config{Client: e.router.Client(addrA), Clock: e.clock, Pinholes: goneAddrPinholes{anyHostPinholes{f}, guaA}})
	if err != nil {
		t.Fatal(err)
	}
	renumbered := []*v1.Node{newNode("node-a", addrA, withIPv6(guaA2)), newNode("node-b", addrB, withIPv6(ulaB))}
	moved.seeNodes(renumbered)
	for i := range 3 {
		st, err := moved.EnsureLoadBalancer(context.Background(), testCluster, svc, renumbered)
		if err != nil {
			t.Fatalf("Ensure %d after the prefix changed: %v", i, err)
		}
		var got []string
		for _, ing := range st.Ingress {
			got = append(got, ing.IP)
		}
		if diff := cmp.Diff([]string{e.router.ExternalIP().String(), guaA2.String()}, got); diff != "" {
			t.Errorf("ingress IPs of Ensure %d after the prefix changed (-want +got):\n%s", i, diff)
		}
		svc.Status.LoadBalancer = *st
	}
	diffStrings(t, "pinholes open", []string{pin(igd.TCP, guaA, 8080), pin(igd.TCP, guaA2, 8080), pin(igd.UDP, guaA, 5353), pin(igd.UDP, guaA2, 5353)}, f.Open())
}

// A Service whose status records pinholes at an address the host no longer
// has can still be deleted: those pinholes end with their lease, and the
// deletion (the Service's finalizer) must not wait for a close that can
// never be sent.
func TestServiceDeletedWhenItsPinholesAtAGoneAddressCannotBeClosed(t *testing.T) {
	e, f := newDualEnv(t, Config{}, fake.RouterConfig{}, anyHostPinhole)
	svc := lbService("default", "web", withFamilies(v1.IPv6Protocol))
	svc.Status.LoadBalancer = *e.mustEnsure(t, svc, dualNodes())

	moved, err := New(Config{Client: e.router.Client(addrA), Clock: e.clock, Pinholes: goneAddrPinholes{anyHostPinholes{f}, guaA}})
	if err != nil {
		t.Fatal(err)
	}
	moved.seeNodes([]*v1.Node{newNode("node-a", addrA, withIPv6(guaA2)), newNode("node-b", addrB, withIPv6(ulaB))})
	for i := range 3 {
		if err := moved.EnsureLoadBalancerDeleted(context.Background(), testCluster, svc); err != nil {
			t.Errorf("EnsureLoadBalancerDeleted %d: %v", i, err)
		}
	}
}
