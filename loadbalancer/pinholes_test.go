package loadbalancer

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/fake/cluster"
	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/pinhole"
)

// dualService is a dual-stack Service (IPv4 first) with ports TCP 8080 and UDP 5353.
func dualService(name string, opts ...svcOpt) *v1.Service {
	return lbService("default", name, append([]svcOpt{withFamilies(v1.IPv4Protocol, v1.IPv6Protocol),
		withPorts(port("http", v1.ProtocolTCP, 8080, 30080), port("dns", v1.ProtocolUDP, 5353, 30053))}, opts...)...)
}

func diffStrings(t *testing.T, what string, want, got []string) {
	t.Helper()
	if want == nil {
		want = []string{}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("%s (-want +got):\n%s", what, diff)
	}
}

// Each port's pinhole is opened with one router call when the Service is
// created; an Ensure that changes nothing calls nothing.
func TestPinholesOpenedOncePerPort(t *testing.T) {
	for _, mode := range []pinholeMode{ownNodePinholes, anyHostPinhole} {
		t.Run([]string{"", "own node", "any host"}[mode], func(t *testing.T) {
			e, f := newDualEnv(t, Config{}, fake.RouterConfig{}, mode)
			svc := dualService("web")
			svc.Status.LoadBalancer = *e.mustEnsure(t, svc, dualNodes())
			diffStrings(t, "calls of the first Ensure", []string{"open " + pin(igd.TCP, guaA, 8080), "open " + pin(igd.UDP, guaA, 5353)}, f.Calls())
			e.mustEnsure(t, svc, dualNodes())
			diffStrings(t, "calls of an Ensure that changes nothing", nil, f.Calls())
		})
	}
}

// The background work renews every pinhole before its lease ends: after
// more than a lease, it is still open, lengthened from its first lease by
// the pass after the one that opened it (which recorded it) and then
// renewed twice an hour.
func TestPinholesRenewedBeforeTheirLeaseEnds(t *testing.T) {
	e, f := newDualEnv(t, Config{ClusterName: testCluster, Lease: time.Hour, RenewInterval: 5 * time.Minute}, fake.RouterConfig{}, anyHostPinhole)
	nodes := dualNodes()
	svc := lbService("default", "web", withFamilies(v1.IPv6Protocol))
	r := startBackground(t, e, nodes[0], nodes[1], nodes[2], svc)
	diffStrings(t, "calls of the first pass", []string{"open " + pin(igd.TCP, guaA, 8080)}, f.Calls())
	for range 13 { // 65 minutes
		r.tick(t)
	}
	diffStrings(t, "calls in the next 65 minutes", []string{"open " + pin(igd.TCP, guaA, 8080), "open " + pin(igd.TCP, guaA, 8080), "open " + pin(igd.TCP, guaA, 8080)}, f.Calls())
	diffStrings(t, "pinholes open after 65 minutes", []string{pin(igd.TCP, guaA, 8080)}, f.Open())
}

// A router that restarted lost its pinholes too: the repair opens every one
// again, whether a probe of a mapping found the restart, a probe of a
// pinhole (an IPv6-only Service holds no mapping to probe; through a client
// that can check one, PinholeProber) or the router announced it.
func TestPinholesReopenedAfterRouterRestart(t *testing.T) {
	tests := []struct {
		name     string
		svc      *v1.Service
		want     []string
		announce bool
		checks   bool // the client is a PinholeProber
	}{
		{"found by a probe of a mapping", dualService("web"), []string{pin(igd.TCP, guaA, 8080), pin(igd.UDP, guaA, 5353)}, false, false},
		{"found by a probe of a pinhole", lbService("default", "web", withFamilies(v1.IPv6Protocol)), []string{pin(igd.TCP, guaA, 8080)}, false, true},
		{"announced", lbService("default", "web", withFamilies(v1.IPv6Protocol)), []string{pin(igd.TCP, guaA, 8080)}, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := &announcer{restarts: make(chan struct{})}
			mode := anyHostPinhole
			if tt.checks {
				mode = checkingPinhole
			}
			e, f := newDualEnv(t, Config{ClusterName: testCluster, Lease: time.Hour, RenewInterval: 5 * time.Minute, Announcer: a}, fake.RouterConfig{}, mode)
			nodes := dualNodes()
			r := startBackground(t, e, nodes[0], nodes[1], nodes[2], tt.svc)
			eventually(t, "the announcement listener", func() bool { return a.listening.Load() == 1 })
			diffStrings(t, "pinholes open", tt.want, f.Open())
			f.Wipe()
			e.router.Reboot()
			if tt.announce {
				a.restarts <- struct{}{}
			} else {
				r.probe(t)
			}
			eventually(t, "the pinholes open again", func() bool { return cmp.Equal(tt.want, f.Open()) })
		})
	}
}

// A pinhole is closed within the operation that ends its reason: the
// Service deleted, its port removed, IPv6 dropped from its families, the
// Service opting out or becoming invalid.
func TestPinholesClosedWhenTheirServiceOrPortGoes(t *testing.T) {
	tests := []struct {
		name     string
		change   func(t *testing.T, e *env, svc *v1.Service) error
		wantOpen []string
	}{
		{"Service deleted", func(t *testing.T, e *env, svc *v1.Service) error {
			return e.lb.EnsureLoadBalancerDeleted(context.Background(), testCluster, svc)
		}, nil},
		{"port removed", func(t *testing.T, e *env, svc *v1.Service) error {
			svc.Spec.Ports = svc.Spec.Ports[:1]
			_, err := e.ensure(t, svc, dualNodes())
			return err
		}, []string{pin(igd.TCP, guaA, 8080)}},
		{"IPv6 dropped from the families", func(t *testing.T, e *env, svc *v1.Service) error {
			svc.Spec.IPFamilies = []v1.IPFamily{v1.IPv4Protocol}
			_, err := e.ensure(t, svc, dualNodes())
			return err
		}, nil},
		{"Service opts out", func(t *testing.T, e *env, svc *v1.Service) error {
			unannotated(svc)
			_, err := e.ensure(t, svc, dualNodes())
			if err == cloudprovider.ImplementedElsewhere { //nolint:errorlint // upstream compares it with ==
				return nil
			}
			return err
		}, nil},
		{"Service becomes invalid", func(t *testing.T, e *env, svc *v1.Service) error {
			svc.Spec.LoadBalancerSourceRanges = []string{"2001:db8:9::/48"}
			if _, err := e.ensure(t, svc, dualNodes()); !errors.Is(err, ErrInvalidService) {
				return err
			}
			return nil
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, f := newDualEnv(t, Config{}, fake.RouterConfig{}, anyHostPinhole)
			svc := dualService("web")
			svc.Status.LoadBalancer = *e.mustEnsure(t, svc, dualNodes())
			if err := tt.change(t, e, svc); err != nil {
				t.Fatal(err)
			}
			diffStrings(t, "pinholes open", tt.wantOpen, f.Open())
		})
	}
}

// A node whose IPv6 prefix changes moves the Service's IPv6 ingress and its
// pinholes in one operation: the new one opened, then the old one closed.
func TestPinholesMoveWithTheNodesPrefix(t *testing.T) {
	e, f := newDualEnv(t, Config{}, fake.RouterConfig{}, anyHostPinhole)
	svc := lbService("default", "web", withFamilies(v1.IPv6Protocol))
	svc.Status.LoadBalancer = *e.mustEnsure(t, svc, dualNodes())
	f.Calls()
	renumbered := []*v1.Node{newNode("node-a", addrA, withIPv6(guaA2)), newNode("node-b", addrB, withIPv6(ulaB))}
	st := e.mustEnsure(t, svc, renumbered)
	if diff := cmp.Diff([]v1.LoadBalancerIngress{ingress(guaA2.String(), tcp(8080))}, st.Ingress); diff != "" {
		t.Errorf("status after the prefix changed (-want +got):\n%s", diff)
	}
	diffStrings(t, "calls", []string{"open " + pin(igd.TCP, guaA2, 8080), "close " + pin(igd.TCP, guaA, 8080)}, f.Calls())
	diffStrings(t, "pinholes open", []string{pin(igd.TCP, guaA2, 8080)}, f.Open())
}

// A process that did not open a Service's pinholes (it restarted, or took
// over from another) closes them from the Service's status: a port removed,
// and the Service deleted. GetLoadBalancer reports such a Service as
// existing.
func TestRestartedProcessClosesPinholesFromTheStatus(t *testing.T) {
	e, f := newDualEnv(t, Config{}, fake.RouterConfig{}, anyHostPinhole)
	svc := lbService("default", "web", withFamilies(v1.IPv6Protocol),
		withPorts(port("http", v1.ProtocolTCP, 8080, 30080), port("alt", v1.ProtocolTCP, 9090, 30090)))
	svc.Status.LoadBalancer = *e.mustEnsure(t, svc, dualNodes())

	restarted, err := New(Config{Client: e.router.Client(addrA), Clock: e.clock, Pinholes: anyHostPinholes{f}})
	if err != nil {
		t.Fatal(err)
	}
	restarted.seeNodes(dualNodes())
	_, exists, err := restarted.GetLoadBalancer(context.Background(), testCluster, svc)
	if err != nil || !exists {
		t.Errorf("GetLoadBalancer after a restart = exists %v, %v; want it to exist", exists, err)
	}
	oneLess := svc.DeepCopy()
	oneLess.Spec.Ports = oneLess.Spec.Ports[:1]
	oneLess.Status.LoadBalancer = *must(restarted.EnsureLoadBalancer(context.Background(), testCluster, oneLess, dualNodes()))
	diffStrings(t, "pinholes open after the restarted process removed a port", []string{pin(igd.TCP, guaA, 8080)}, f.Open())

	again, err := New(Config{Client: e.router.Client(addrA), Clock: e.clock, Pinholes: anyHostPinholes{f}})
	if err != nil {
		t.Fatal(err)
	}
	again.seeNodes(dualNodes())
	if err := again.EnsureLoadBalancerDeleted(context.Background(), testCluster, oneLess); err != nil {
		t.Fatal(err)
	}
	diffStrings(t, "pinholes open after a restarted process deleted the Service", nil, f.Open())
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// Pinholes neither this process opened nor a Service's status records are
// never closed: another host's at the node's address. Nor is another
// Service's of this process at the same address and port, which the second
// Service is refused, even when its status claims it.
func TestPinholesOfOthersAreNeverClosed(t *testing.T) {
	e, f := newDualEnv(t, Config{}, fake.RouterConfig{}, anyHostPinhole)
	if err := f.OpenPinhole(context.Background(), pinhole.Pinhole{Protocol: igd.TCP, InternalClient: guaA, InternalPort: 9999, Lease: time.Hour}); err != nil {
		t.Fatal(err)
	}
	first := lbService("default", "first", withFamilies(v1.IPv6Protocol))
	first.Status.LoadBalancer = *e.mustEnsure(t, first, dualNodes())
	second := lbService("default", "second", withFamilies(v1.IPv6Protocol))
	if _, err := e.ensure(t, second, dualNodes()); !errors.Is(err, ErrPortInUse) {
		t.Errorf("Ensure of a second Service wanting the same pinhole: %v, want ErrPortInUse", err)
	}
	second.Status.LoadBalancer = first.Status.LoadBalancer // a stale status claims it too
	if err := e.lb.EnsureLoadBalancerDeleted(context.Background(), testCluster, second); err != nil {
		t.Fatal(err)
	}
	diffStrings(t, "pinholes open after the second Service was deleted", []string{pin(igd.TCP, guaA, 8080), pin(igd.TCP, guaA, 9999)}, f.Open())
	if err := e.lb.EnsureLoadBalancerDeleted(context.Background(), testCluster, first); err != nil {
		t.Fatal(err)
	}
	diffStrings(t, "pinholes open after the first Service was deleted", []string{pin(igd.TCP, guaA, 9999)}, f.Open())
}

// Through UPnP a process opens and closes pinholes for its own node only. A
// process that takes over on another node serves the Service there; the
// pinholes its status records at the previous node's address, which the
// router will not close for this host, are left to their lease and do not
// stop the Service being served on IPv6.
func TestTakeOverOnAnotherNodeLeavesThePreviousNodesPinholesToTheirLease(t *testing.T) {
	e, f := newDualEnv(t, Config{}, fake.RouterConfig{}, ownNodePinholes)
	svc := lbService("default", "web", withFamilies(v1.IPv6Protocol))
	svc.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{ingress(guaB.String(), tcp(8080))} // served from node-b before
	nodes := []*v1.Node{newNode("node-a", addrA, withIPv6(guaA)), newNode("node-b", addrB, withIPv6(guaB))}
	st, err := e.ensure(t, svc, nodes)
	if err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	if diff := cmp.Diff([]v1.LoadBalancerIngress{ingress(guaA.String(), tcp(8080))}, st.Ingress); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
	diffStrings(t, "calls", []string{"open " + pin(igd.TCP, guaA, 8080), "close " + pin(igd.TCP, guaB, 8080)}, f.Calls())
	svc.Status.LoadBalancer = *st
	e.mustEnsure(t, svc, nodes)
	diffStrings(t, "calls of the next Ensure", nil, f.Calls())
}

// A Service with externalTrafficPolicy Local is served on IPv6 only at a
// node with a ready endpoint, as on IPv4: its pinholes follow the endpoint.
func TestLocalServicePinholesFollowTheReadyEndpoint(t *testing.T) {
	e, f := newDualEnv(t, Config{ClusterName: testCluster}, fake.RouterConfig{}, anyHostPinhole)
	nodes := []*v1.Node{newNode("node-a", addrA, withIPv6(guaA)), newNode("node-b", addrB, withIPv6(guaB))}
	svc := lbService("default", "web", withFamilies(v1.IPv6Protocol),
		func(s *v1.Service) { s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal })
	r := startBackground(t, e, nodes[0], nodes[1], endpointSlice(svc, "node-b", true))
	for i, at := range []struct {
		node string
		addr netip.Addr
	}{{"node-b", guaB}, {"node-a", guaA}} {
		if i > 0 {
			if _, err := r.client.DiscoveryV1().EndpointSlices("default").Update(context.Background(), endpointSlice(svc, at.node, true), metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			eventually(t, "the endpoint on "+at.node+" in the cache", func() bool {
				got, err := e.lb.endpointNodes(svc)
				return err == nil && got[at.node]
			})
		}
		st, err := e.ensure(t, svc, nodes)
		if err != nil {
			t.Fatalf("Ensure with the endpoint on %s: %v", at.node, err)
		}
		if diff := cmp.Diff([]v1.LoadBalancerIngress{ingress(at.addr.String(), tcp(8080))}, st.Ingress); diff != "" {
			t.Errorf("status with the endpoint on %s (-want +got):\n%s", at.node, diff)
		}
		diffStrings(t, "pinholes open with the endpoint on "+at.node, []string{pin(igd.TCP, at.addr, 8080)}, f.Open())
		svc.Status.LoadBalancer = *st
	}
}

// An IPv4-only Service never calls the PinholeClient: created, served
// again, read and deleted, with Config.Pinholes set.
func TestIPv4OnlyServiceMakesNoPinholeCall(t *testing.T) {
	e, f := newDualEnv(t, Config{}, fake.RouterConfig{}, anyHostPinhole)
	svc := lbService("default", "web")
	svc.Status.LoadBalancer = *e.mustEnsure(t, svc, dualNodes())
	e.mustEnsure(t, svc, dualNodes())
	if _, exists, err := e.lb.GetLoadBalancer(context.Background(), testCluster, svc); err != nil || !exists {
		t.Fatalf("GetLoadBalancer = exists %v, %v", exists, err)
	}
	if err := e.lb.EnsureLoadBalancerDeleted(context.Background(), testCluster, svc); err != nil {
		t.Fatal(err)
	}
	diffStrings(t, "pinhole calls", nil, f.Calls())
}

// Many dual-stack Services created, changed and deleted at once leave no
// pinhole open, and another host's untouched.
func TestNoPinholeLeftAfterConcurrentServicesGo(t *testing.T) {
	e, f := newDualEnv(t, Config{}, fake.RouterConfig{}, anyHostPinhole)
	stranger := pinhole.Pinhole{Protocol: igd.TCP, InternalClient: guaA, InternalPort: 40000, Lease: time.Hour}
	if err := f.OpenPinhole(context.Background(), stranger); err != nil {
		t.Fatal(err)
	}
	nodes := []*v1.Node{newNode("node-a", addrA, withIPv6(guaA)), newNode("node-b", addrB, withIPv6(guaB))}
	const n = 12
	errs := make(chan error, n)
	for i := range n {
		go func() {
			p := int32(20000 + 10*i)
			svc := lbService("default", fmt.Sprintf("s%d", i), withFamilies(v1.IPv6Protocol, v1.IPv4Protocol),
				withPorts(port("a", v1.ProtocolTCP, p, 30000+p%1000), port("b", v1.ProtocolUDP, p+1, 31000+p%1000)))
			st, err := e.lb.EnsureLoadBalancer(context.Background(), testCluster, svc, nodes)
			if err != nil {
				errs <- err
				return
			}
			svc.Status.LoadBalancer = *st
			svc.Spec.Ports = svc.Spec.Ports[1:]
			if st, err = e.lb.EnsureLoadBalancer(context.Background(), testCluster, svc, nodes[i%2:]); err != nil {
				errs <- err
				return
			}
			svc.Status.LoadBalancer = *st
			errs <- e.lb.EnsureLoadBalancerDeleted(context.Background(), testCluster, svc)
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	diffStrings(t, "pinholes open after every Service went", []string{pin(igd.TCP, guaA, 40000)}, f.Open())
	if got := e.table(); len(got) != 0 {
		t.Errorf("mappings left: %q", got)
	}
}

// Of two Services of the cluster that want one pinhole (one node, one port),
// the one whose status records it keeps it, as for an IPv4 port, whichever
// this process serves first (after a restart, or a fail-over).
func TestPinholeRecordedInAnotherServicesStatusIsNotTaken(t *testing.T) {
	e, f := newDualEnv(t, Config{ClusterName: testCluster}, fake.RouterConfig{}, ownNodePinholes)
	nodes := dualNodes()
	holder := newService("default", "holder", withFamilies(v1.IPv6Protocol)) // served before; no pass serves it
	holder.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{ingress(guaA.String(), tcp(8080))}
	startBackground(t, e, nodes[0], nodes[1], nodes[2], holder)
	eventually(t, "the holder in the cache", func() bool {
		_, w := e.lb.bg.now()
		s, err := w.services.Services("default").Get("holder")
		return err == nil && len(s.Status.LoadBalancer.Ingress) == 1
	})

	taker := lbService("default", "taker", withFamilies(v1.IPv6Protocol))
	_, err := e.ensure(t, taker, nodes)
	var pe *PortError
	if !errors.Is(err, ErrPortInUse) || !errors.As(err, &pe) || pe.Claimant != "default/holder" {
		t.Errorf("Ensure of a Service wanting a pinhole another's status records: %v, want ErrPortInUse naming default/holder", err)
	}
	diffStrings(t, "pinhole calls for the taker", nil, f.Calls())
	st := e.mustEnsure(t, holder, nodes)
	if diff := cmp.Diff([]v1.LoadBalancerIngress{ingress(guaA.String(), tcp(8080))}, st.Ingress); diff != "" {
		t.Errorf("holder's status (-want +got):\n%s", diff)
	}
}

// A Service whose IPv6 can no longer be served gets its pinholes closed:
// its node stopped reporting the global address they go to (the address may
// be another host's now), the node is gone, or it is not ready (the status
// records no IPv6 ingress, so a pinhole kept would be known to no other
// process).
func TestPinholesClosedWhenIPv6CannotBeServed(t *testing.T) {
	withoutGUA := []*v1.Node{newNode("node-a", addrA, withIPv6(ulaB)), newNode("node-b", addrB, withIPv6(ulaB))}
	notReadyA := []*v1.Node{newNode("node-a", addrA, withIPv6(guaA), notReady), newNode("node-b", addrB, withIPv6(ulaB))}
	tests := []struct {
		name    string
		mode    pinholeMode
		nodes   []*v1.Node
		deleted string // a node deleted (the watch's forgetNode)
		want    []string
	}{
		{"own node, its address gone", ownNodePinholes, withoutGUA, "", nil},
		{"any host, its address gone", anyHostPinhole, withoutGUA, "", nil},
		{"any host, the node deleted", anyHostPinhole, withoutGUA[1:], "node-a", nil},
		{"any host, the node not ready", anyHostPinhole, notReadyA, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, f := newDualEnv(t, Config{}, fake.RouterConfig{}, tt.mode)
			svc := dualService("web")
			svc.Status.LoadBalancer = *e.mustEnsure(t, svc, dualNodes())
			diffStrings(t, "pinholes open at first", []string{pin(igd.TCP, guaA, 8080), pin(igd.UDP, guaA, 5353)}, f.Open())
			if tt.deleted != "" {
				e.lb.forgetNode(tt.deleted)
			}
			st, err := e.ensure(t, svc, tt.nodes)
			if err != nil {
				t.Fatalf("Ensure with no node to serve IPv6 (IPv4 is served): %v", err)
			}
			if diff := cmp.Diff([]v1.LoadBalancerIngress{ingress(e.router.ExternalIP().String(), tcp(8080), v1.PortStatus{Port: 5353, Protocol: v1.ProtocolUDP})}, st.Ingress); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
			diffStrings(t, "pinholes open", tt.want, f.Open())
		})
	}
}

// A Service's pinholes go to an eligible node where the ports it wants are
// free, when the node rendezvous hashing prefers has them taken by another
// Service: a pinhole is per node address, so both are served on IPv6.
func TestPinholesGoToANodeWhereThePortsAreFree(t *testing.T) {
	e, f := newDualEnv(t, Config{}, fake.RouterConfig{}, anyHostPinhole)
	nodes := []*v1.Node{newNode("node-a", addrA, withIPv6(guaA)), newNode("node-b", addrB, withIPv6(guaB))}
	first := lbService("default", "first", withFamilies(v1.IPv6Protocol))
	first.Status.LoadBalancer = *e.mustEnsure(t, first, nodes)
	taken := first.Status.LoadBalancer.Ingress[0].IP
	free := map[string]string{guaA.String(): guaB.String(), guaB.String(): guaA.String()}[taken]
	cands := []target{{name: "node-a", addr: guaA}, {name: "node-b", addr: guaB}}
	name := ""
	for i := range 100 { // a Service whose hash prefers the node first holds 8080 at
		if tgt, _ := chooseTarget(fmt.Sprintf("default/second-%d", i), cands, nil); tgt.addr.String() == taken {
			name = fmt.Sprintf("second-%d", i)
			break
		}
	}
	second := lbService("default", name, withFamilies(v1.IPv6Protocol))
	st, err := e.ensure(t, second, nodes)
	if err != nil {
		t.Fatalf("Ensure of a second Service wanting TCP/8080 on IPv6: %v, want it served at the other node", err)
	}
	if diff := cmp.Diff([]v1.LoadBalancerIngress{ingress(free, tcp(8080))}, st.Ingress); diff != "" {
		t.Errorf("second's status (-want +got):\n%s", diff)
	}
	diffStrings(t, "pinholes open", []string{pin(igd.TCP, guaA, 8080), pin(igd.TCP, guaB, 8080)}, f.Open())
}

// A Service whose IPv6 cannot be served (its only node with a global address
// is not ready) has no IPv6 ingress in its status; so it keeps no pinhole
// either, or a restarted process that deletes the Service could not find
// them, and they would stay open until their lease ends.
func TestPinholesKeptWithNoEligibleNodeAreClosedByARestartedProcess(t *testing.T) {
	e, f := newDualEnv(t, Config{}, fake.RouterConfig{}, anyHostPinhole)
	notReadyA := []*v1.Node{newNode("node-a", addrA, withIPv6(guaA), notReady), newNode("node-b", addrB, withIPv6(ulaB))}
	svc := dualService("web")
	svc.Status.LoadBalancer = *e.mustEnsure(t, svc, dualNodes())
	st, err := e.ensure(t, svc, notReadyA)
	if err != nil {
		t.Fatalf("Ensure with node-a not ready: %v", err)
	}
	svc.Status.LoadBalancer = *st
	restarted, err := New(Config{Client: e.router.Client(addrA), Clock: e.clock, Pinholes: anyHostPinholes{f}})
	if err != nil {
		t.Fatal(err)
	}
	restarted.seeNodes(notReadyA)
	if err := restarted.EnsureLoadBalancerDeleted(context.Background(), testCluster, svc); err != nil {
		t.Fatal(err)
	}
	diffStrings(t, "pinholes open after a restarted process deleted the Service (status "+describeStatus(*st)+")", nil, f.Open())
}

// servedIPv6Only is an IPv6-only Service web served through a LoadBalancer
// with pinholes of mode, its status as the Ensure returned it.
func servedIPv6Only(t *testing.T, mode pinholeMode) (*env, *fakePinholes, *v1.Service) {
	t.Helper()
	e, f := newDualEnv(t, Config{}, fake.RouterConfig{}, mode)
	svc := lbService("default", "web", withFamilies(v1.IPv6Protocol))
	svc.Status.LoadBalancer = *e.mustEnsure(t, svc, dualNodes())
	return e, f, svc
}

// A Service whose IPv6 cannot be served, and whose status still records the
// pinholes it had (its sync fails and writes none), has each closed once:
// the retries that follow do not close them again (through UPnP a close
// re-adds the pinhole for a second to learn its ID, opening the firewall
// each time). A pinhole it opens again is closed again when it goes.
func TestPinholesRecordedByAFailingServiceAreClosedOnce(t *testing.T) {
	noGUA := []*v1.Node{newNode("node-a", addrA, withIPv6(ulaB))}
	for name, mode := range map[string]pinholeMode{"own node": ownNodePinholes, "any host": anyHostPinhole} {
		t.Run(name, func(t *testing.T) {
			e, f, svc := servedIPv6Only(t, mode)
			f.Calls()
			closes := []string{"close " + pin(igd.TCP, guaA, 8080)}
			for i, want := range [][]string{closes, nil, nil} {
				if _, err := e.ensure(t, svc, noGUA); err == nil {
					t.Fatalf("Ensure %d with no node to serve IPv6 succeeded", i+1)
				}
				diffStrings(t, fmt.Sprintf("calls of Ensure %d with no node to serve IPv6", i+1), want, f.Calls())
			}
			e.mustEnsure(t, svc, dualNodes())
			diffStrings(t, "calls once served again", []string{"open " + pin(igd.TCP, guaA, 8080)}, f.Calls())
			if _, err := e.ensure(t, svc, noGUA); err == nil {
				t.Fatal("Ensure with no node to serve IPv6 succeeded")
			}
			diffStrings(t, "calls once it fails again", closes, f.Calls())
		})
	}
}

// A pinhole this process closed for a Service whose status goes on recording
// it, and which another process then opened again (a fail-over's overlap:
// the previous CCM still saw the node's global address), is closed again by
// a retry a renewal interval later: not left open until its lease ends with
// no process holding it.
func TestPinholeReopenedByAnotherProcessIsClosedAgainByALaterRetry(t *testing.T) {
	noGUA := []*v1.Node{newNode("node-a", addrA, withIPv6(ulaB))}
	for name, mode := range map[string]pinholeMode{"own node": ownNodePinholes, "any host": anyHostPinhole} {
		t.Run(name, func(t *testing.T) {
			e, f, svc := servedIPv6Only(t, mode)
			if _, err := e.ensure(t, svc, noGUA); err == nil {
				t.Fatal("Ensure with no node to serve IPv6 succeeded")
			}
			diffStrings(t, "pinholes open once IPv6 cannot be served", nil, f.Open())

			other, err := New(Config{Client: e.router.Client(addrA), Clock: e.clock, Pinholes: e.lb.cfg.Pinholes})
			if err != nil {
				t.Fatal(err)
			}
			other.seeNodes(dualNodes())
			if _, err := other.EnsureLoadBalancer(context.Background(), testCluster, svc, dualNodes()); err != nil {
				t.Fatalf("Ensure by the other process: %v", err)
			}
			diffStrings(t, "pinholes open after the other process served the Service", []string{pin(igd.TCP, guaA, 8080)}, f.Open())

			// The other process is gone; this one retries.
			e.clock.Step(e.lb.cfg.RenewInterval)
			if _, err := e.ensure(t, svc, noGUA); err == nil {
				t.Fatal("Ensure with no node to serve IPv6 succeeded")
			}
			diffStrings(t, fmt.Sprintf("pinholes open after a retry %s later (their lease is %s)", e.lb.cfg.RenewInterval, e.lb.cfg.pinholeLease()), nil, f.Open())
		})
	}
}

// An IPv6-only Service that can no longer be served on IPv6 (its only ready
// endpoint is gone) has its pinholes closed, and its status, as a pass
// records it, no longer lists them: another Service that wants the same
// port at that node is served it there. A status that went on listing them
// would claim, for ever, pinholes no one holds (the sync of a Service with
// no family served fails and writes no status).
func TestPinholesClosedForWantOfANodeAreFreeForAnotherService(t *testing.T) {
	for _, mode := range []pinholeMode{ownNodePinholes, anyHostPinhole} {
		t.Run([]string{"", "own node", "any host"}[mode], func(t *testing.T) {
			e, f := newDualEnv(t, Config{ClusterName: testCluster}, fake.RouterConfig{}, mode)
			nodes := dualNodes()
			holder := lbService("default", "holder", withFamilies(v1.IPv6Protocol),
				func(s *v1.Service) { s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal })
			r := startBackground(t, e, nodes[0], nodes[1], nodes[2], holder, endpointSlice(holder, "node-a", true))
			if diff := cmp.Diff([]v1.LoadBalancerIngress{ingress(guaA.String(), tcp(8080))}, r.service(t, "default", "holder").Status.LoadBalancer.Ingress); diff != "" {
				t.Fatalf("holder's status after the first pass (-want +got):\n%s", diff)
			}

			endpointNotReady(t, e, r, holder, "node-a")
			r.tick(t)
			diffStrings(t, "pinholes open once the holder has no ready endpoint", nil, f.Open())
			eventually(t, "the holder's status to no longer record the pinhole it no longer holds", func() bool {
				_, w := e.lb.bg.now()
				s, err := w.services.Services("default").Get("holder")
				return err == nil && len(recordedPinholes(s)) == 0
			})

			taker := lbService("default", "taker", withFamilies(v1.IPv4Protocol, v1.IPv6Protocol))
			st, err := e.ensure(t, taker, nodes)
			if err != nil {
				t.Fatalf("Ensure of a Service wanting the port the holder no longer holds: %v", err)
			}
			want := []v1.LoadBalancerIngress{ingress(e.router.ExternalIP().String(), tcp(8080)), ingress(guaA.String(), tcp(8080))}
			if diff := cmp.Diff(want, st.Ingress); diff != "" {
				t.Errorf("taker's status (-want +got):\n%s", diff)
			}
			diffStrings(t, "pinholes open", []string{pin(igd.TCP, guaA, 8080)}, f.Open())
		})
	}
}

// A restarted process whose Service cache has not synced yet cannot learn
// the pinholes other Services' statuses record, so it leaves a dual-stack
// Service's pinholes as they are and serves it on IPv4 only; the status it
// returns keeps recording them as they were. Once the cache has synced, the
// one its port no longer wants is closed, the other kept.
func TestPinholesKeptWhileTheServiceCacheSyncsAreClosedWhenNoLongerWanted(t *testing.T) {
	e, f := newDualEnv(t, Config{ClusterName: testCluster}, fake.RouterConfig{}, anyHostPinhole)
	nodes := dualNodes()
	svc := dualService("web", withPorts(port("http", v1.ProtocolTCP, 8080, 30080), port("alt", v1.ProtocolTCP, 9001, 30091)))
	svc.Status.LoadBalancer = *e.mustEnsure(t, svc, nodes)
	diffStrings(t, "pinholes open at first", []string{pin(igd.TCP, guaA, 8080), pin(igd.TCP, guaA, 9001)}, f.Open())
	svc.Spec.Ports = svc.Spec.Ports[:1] // TCP/9001 goes

	restarted, err := New(Config{ClusterName: testCluster, Client: e.router.Client(addrA), Clock: e.clock, Pinholes: anyHostPinholes{f}})
	if err != nil {
		t.Fatal(err)
	}
	client := k8sfake.NewClientset(nodes[0], nodes[1], nodes[2], svc)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := restarted.Initialize(ctx, cluster.ClientBuilder(client)); err != nil {
		t.Fatal(err)
	}
	recorded := svc.Status.LoadBalancer.Ingress[1]
	st, err := restarted.EnsureLoadBalancer(ctx, testCluster, svc, nodes)
	if err != nil {
		t.Fatalf("Ensure before the Service cache synced: %v", err)
	}
	if diff := cmp.Diff([]v1.LoadBalancerIngress{ingress(e.router.ExternalIP().String(), tcp(8080)), recorded}, st.Ingress); diff != "" {
		t.Fatalf("status before the Service cache synced (-want +got):\n%s", diff)
	}
	svc.Status.LoadBalancer = *st // the service controller writes it
	if _, err := client.CoreV1().Services("default").UpdateStatus(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		restarted.Run(ctx)
	}()
	eventually(t, "a pass of the restarted process", func() bool { return restarted.passes.Load() > 0 })
	diffStrings(t, "pinholes open after the restarted process's first pass", []string{pin(igd.TCP, guaA, 8080)}, f.Open())
}
