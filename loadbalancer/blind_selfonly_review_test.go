package loadbalancer

import (
	"fmt"
	"net/netip"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
)

// Blind, on a router that refuses THIRD_PARTY: the first refusal makes the
// backend SelfOnly and the same Ensure maps to this process's node (the
// PCP client's address, 127.0.0.1 here). Every Service ends there, what
// this process holds is what the router has, and a second Ensure writes
// nothing.
func TestBlindSelfOnlyRetryLeavesNothingStale(t *testing.T) {
	e, s := blindEnvWith(t, Config{}, fake.PCPConfig{}) // THIRD_PARTY refused
	self := netip.MustParseAddr("127.0.0.1")
	nodes := []*v1.Node{newNode("node-a", self), newNode("node-b", addrB), newNode("node-c", addrC)}
	var svcs []*v1.Service
	for i := range 6 {
		svc := newService("default", fmt.Sprintf("web%d", i), withPorts(
			port("a", v1.ProtocolTCP, int32(100+2*i), int32(30100+2*i)), port("b", v1.ProtocolUDP, int32(101+2*i), int32(30101+2*i))))
		svc.Status.LoadBalancer = *e.mustEnsure(t, svc, nodes)
		svcs = append(svcs, svc)
	}
	held := e.lb.heldKeys()
	ms := e.router.Mappings()
	if len(ms) != 12 || len(held) != 12 {
		t.Errorf("router %q, held %v: want 12 each", e.table(), held)
	}
	for _, m := range ms {
		if m.InternalClient != self {
			t.Errorf("mapping %s to %s, want this node (%s)", m.Key(), m.InternalClient, self)
		}
		if _, ok := held[m.Key()]; !ok {
			t.Errorf("mapping %s not held", m.Key())
		}
	}
	for k := range held {
		if _, err := e.router.Client(self).GetPortMapping(t.Context(), k.Protocol, k.ExternalPort); err != nil {
			t.Errorf("held %s, router: %v", k, err)
		}
	}
	n := len(s.Calls())
	for _, svc := range svcs {
		e.mustEnsure(t, svc, nodes)
	}
	if got, _ := mapRequests(s, n); got != 0 {
		t.Errorf("no-op Ensures sent %d MAP requests, want none", got)
	}
	_ = igd.TCP
}

// Blind, on a router that refuses THIRD_PARTY (miniupnpd's default), the
// sweep of a fresh process's delete sends a PCP delete naming every other
// node: each is refused with UNSUPP_OPTION. That refusal says no mapping
// of ours can be there (the router makes none for another host); it must
// not fail the delete, or the Service's finalizer is never removed.
func TestBlindSelfOnlyDeleteFromAFreshProcess(t *testing.T) {
	e, s := blindEnvWith(t, Config{}, fake.PCPConfig{}) // THIRD_PARTY refused
	self := netip.MustParseAddr("127.0.0.1")
	nodes := []*v1.Node{newNode("node-a", self), newNode("node-b", addrB), newNode("node-c", addrC)}
	svc := newService("default", "web", withPorts(port("a", v1.ProtocolTCP, 80, 30080)))
	svc.Status.LoadBalancer = *e.mustEnsure(t, svc, nodes)

	fresh, err := New(Config{Client: blindBackend(t, s), Clock: e.clock})
	if err != nil {
		t.Fatal(err)
	}
	fresh.seeNodes(nodes)
	if err := fresh.EnsureLoadBalancerDeleted(t.Context(), testCluster, svc); err != nil {
		t.Errorf("EnsureLoadBalancerDeleted from a fresh process: %v", err)
	}
	diffRows(t, "table after the delete", e.table(), nil)
}
