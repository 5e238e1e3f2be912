package loadbalancer

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	k8sfake "k8s.io/client-go/kubernetes/fake"

	"github.com/ccmkit/ccmkit/fake"
	fakecluster "github.com/ccmkit/ccmkit/fake/cluster"
	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/pinhole"
)

// A Service refused a pinhole because another Service holds it records
// that port in its status with the error. Deleting the refused Service, in
// a process that restarted since (it holds nothing in memory), must not
// close the holder's pinhole: the refused Service's status names it, but
// never proved it owned it.
func TestPinholeRefusedToAServiceIsNotClosedWhenThatServiceGoes(t *testing.T) {
	e, f := newDualEnv(t, Config{}, fake.RouterConfig{}, anyHostPinhole)
	nodes := dualNodes()
	holder := lbService("default", "holder", withFamilies(v1.IPv6Protocol))
	holder.Status.LoadBalancer = *e.mustEnsure(t, holder, nodes)

	// The refused Service's status as a version that gave a refused
	// Service an ingress at the holder's address wrote it (this one no
	// longer does: see TestRefusedServiceIsNotGivenTheHoldersIPv6IngressAndPort):
	// 8080 refused (held), 9090 served.
	refused := lbService("default", "refused", withFamilies(v1.IPv6Protocol),
		withPorts(port("http", v1.ProtocolTCP, 8080, 30081), port("alt", v1.ProtocolTCP, 9090, 30090)))
	refused.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{ingress(guaA.String(), tcpFailed(8080, PortErrorInUse), tcp(9090))}
	if err := f.OpenPinhole(context.Background(), pinhole.Pinhole{Protocol: igd.TCP, InternalClient: guaA, InternalPort: 9090, Lease: time.Hour}); err != nil {
		t.Fatal(err)
	}
	diffStrings(t, "pinholes open before the restart", []string{pin(igd.TCP, guaA, 8080), pin(igd.TCP, guaA, 9090)}, f.Open())

	restarted, err := New(Config{Client: e.router.Client(addrA), Clock: e.clock, Pinholes: anyHostPinholes{f}})
	if err != nil {
		t.Fatal(err)
	}
	restarted.seeNodes(nodes)
	if err := restarted.EnsureLoadBalancerDeleted(context.Background(), testCluster, refused); err != nil {
		t.Fatal(err)
	}
	diffStrings(t, "pinholes open after the refused Service was deleted", []string{pin(igd.TCP, guaA, 8080)}, f.Open())
}

// gatedClose is a PinholeClient whose first ClosePinhole waits, after it
// is called and before it reaches the router, until release is closed.
type gatedClose struct {
	anyHostPinholes
	once     sync.Once
	entered  chan struct{}
	released chan struct{}
}

func (g *gatedClose) ClosePinhole(ctx context.Context, p pinhole.Pinhole) error {
	g.once.Do(func() {
		close(g.entered)
		<-g.released
	})
	return g.anyHostPinholes.ClosePinhole(ctx, p)
}

// A Service deleted (its status records a pinhole, this process holds
// none: it restarted) while a new Service takes the same port, as a rename
// does: the delete's close must not land on the pinhole the new Service
// opened in between (its proof of ownership, the status, is no longer
// fresh), or the new Service is unserved on IPv6 until its next renewal.
func TestPinholeOpenedForAnotherServiceDuringACloseStaysOpen(t *testing.T) {
	e, f := newDualEnv(t, Config{}, fake.RouterConfig{}, anyHostPinhole)
	nodes := dualNodes()
	old := lbService("default", "old", withFamilies(v1.IPv6Protocol))
	old.Status.LoadBalancer = *e.mustEnsure(t, old, nodes)

	g := &gatedClose{anyHostPinholes: anyHostPinholes{f}, entered: make(chan struct{}), released: make(chan struct{})}
	restarted, err := New(Config{Client: e.router.Client(addrA), Clock: e.clock, Pinholes: g})
	if err != nil {
		t.Fatal(err)
	}
	restarted.seeNodes(nodes)
	done := make(chan error, 1)
	go func() { done <- restarted.EnsureLoadBalancerDeleted(context.Background(), testCluster, old) }()
	<-g.entered
	renamed := lbService("default", "renamed", withFamilies(v1.IPv6Protocol))
	st, err := restarted.EnsureLoadBalancer(context.Background(), testCluster, renamed, nodes)
	close(g.released)
	if derr := <-done; derr != nil {
		t.Fatal(derr)
	}
	if err != nil {
		// Refused while the old Service's close is in flight (ErrPortInUse,
		// as for a mapping being removed): sound, if the retry is served.
		if !errors.Is(err, ErrPortInUse) {
			t.Fatalf("Ensure of the new Service during the close = %v, want an error matching ErrPortInUse", err)
		}
		st, err = restarted.EnsureLoadBalancer(context.Background(), testCluster, renamed, nodes)
		if err != nil {
			t.Fatalf("Ensure of the new Service after the close: %v", err)
		}
	}
	t.Logf("new Service's status: %v", st.Ingress)
	diffStrings(t, "pinholes open after the delete, the new Service served", []string{pin(igd.TCP, guaA, 8080)}, f.Open())
}

// Of two Services whose statuses both name one pinhole, one served it and
// the other was refused it (its status records the port with the error).
// A restarted process, or the one that takes over, must agree: the holder
// keeps it, whichever of the two it serves first. The refused Service's
// record with an error is no claim.
func TestRestartedProcessLeavesAContestedPinholeWithItsHolder(t *testing.T) {
	e, _ := newDualEnv(t, Config{ClusterName: testCluster}, fake.RouterConfig{}, anyHostPinhole)
	nodes := dualNodes()
	holder := newService("default", "holder", withFamilies(v1.IPv6Protocol))
	holder.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{ingress(guaA.String(), tcp(8080))}
	refused := newService("default", "refused", withFamilies(v1.IPv6Protocol),
		withPorts(port("http", v1.ProtocolTCP, 8080, 30081), port("alt", v1.ProtocolTCP, 9090, 30090)))
	refused.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{ingress(guaA.String(), tcpFailed(8080, PortErrorInUse), tcp(9090))}
	startBackground(t, e, nodes[0], nodes[1], nodes[2], holder, refused)
	eventually(t, "both Services in the cache", func() bool {
		_, w := e.lb.bg.now()
		h, err1 := w.services.Services("default").Get("holder")
		r, err2 := w.services.Services("default").Get("refused")
		return err1 == nil && err2 == nil && len(h.Status.LoadBalancer.Ingress) == 1 && len(r.Status.LoadBalancer.Ingress) == 1
	})

	st, err := e.ensure(t, refused, nodes)
	if err != nil {
		// Its one node with a global address has 8080 taken: it is not
		// served on IPv6 (it may not have an ingress there at all).
		if !errors.Is(err, ErrPortInUse) {
			t.Fatalf("Ensure of the refused Service: %v, want served or ErrPortInUse", err)
		}
		st = &v1.LoadBalancerStatus{}
	}
	for _, ing := range st.Ingress {
		for _, p := range ing.Ports {
			if p.Port == 8080 && p.Error == nil {
				t.Errorf("the restarted process gave the refused Service the holder's pinhole: status %s %v", ing.IP, ing.Ports)
			}
		}
	}
}

// On IPv6 the ingress is the node's own address, and kube-proxy sends what
// arrives at [ingress IP]:port to every Service whose status lists that IP
// with that port: it reads the ingress IP, not each port's error. A
// Service refused a port on IPv6 because another Service is served there
// must not be given an ingress at the same address with that port, or the
// two Services contend for the holder's traffic.
func TestRefusedServiceIsNotGivenTheHoldersIPv6IngressAndPort(t *testing.T) {
	e, _ := newDualEnv(t, Config{}, fake.RouterConfig{}, anyHostPinhole)
	nodes := dualNodes()
	holder := lbService("default", "holder", withFamilies(v1.IPv6Protocol))
	holder.Status.LoadBalancer = *e.mustEnsure(t, holder, nodes)
	refused := lbService("default", "refused", withFamilies(v1.IPv6Protocol),
		withPorts(port("http", v1.ProtocolTCP, 8080, 30081), port("alt", v1.ProtocolTCP, 9090, 30090)))
	st, err := e.ensure(t, refused, nodes)
	if err != nil {
		// Its one node with a global address has 8080 taken: it is not
		// served on IPv6, so it has no ingress there.
		if !errors.Is(err, ErrPortInUse) {
			t.Fatalf("Ensure of the refused Service: %v, want served or ErrPortInUse", err)
		}
		st = &v1.LoadBalancerStatus{}
	}
	for _, h := range holder.Status.LoadBalancer.Ingress {
		for _, r := range st.Ingress {
			if h.IP != r.IP {
				continue
			}
			for _, hp := range h.Ports {
				for _, rp := range r.Ports {
					if hp.Port == rp.Port && hp.Protocol == rp.Protocol {
						t.Errorf("both Services' statuses list [%s]:%d/%s (the refused one with error %v): kube-proxy routes it to both", r.IP, rp.Port, rp.Protocol, ptrString(rp.Error))
					}
				}
			}
		}
	}
}

func ptrString(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// A pinhole the Service's own status records is closed when the Service no
// longer serves it (here: an IPv4-only Service), even with no other record
// of it in this process: after a restart the status is the only record of
// what a previous process opened. The documented limit (DESIGN.md, "Only
// ours are closed"): UPnP cannot tell two programs' pinholes of one
// address, protocol and port apart, so one another program opened at that
// tuple since is closed too; the status is trusted as the CCM's own
// record, which only the CCM's RBAC may write.
func TestPinholeRecordedInTheServicesOwnStatusIsClosed(t *testing.T) {
	e, f := newDualEnv(t, Config{}, fake.RouterConfig{}, ownNodePinholes)
	recorded := pinhole.Pinhole{Protocol: igd.TCP, InternalClient: guaA, InternalPort: 9999, Lease: time.Hour}
	if err := f.OpenPinhole(context.Background(), recorded); err != nil { // by a previous process, or another program
		t.Fatal(err)
	}
	svc := lbService("default", "web") // IPv4 only
	svc.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{ingress(guaA.String(), tcp(9999))}
	e.mustEnsure(t, svc, dualNodes())
	diffStrings(t, "pinholes open after an Ensure of a Service whose status records one it no longer serves", []string{}, f.Open())
}

// A process that does not know the cluster's Services yet (restarted, its
// caches not synced, or no background work) cannot tell that another
// Service's status records a pinhole: it must not give that pinhole to a
// second Service (then both statuses record it, and deleting the second
// closes the first's). It retries until it knows, as Local Services do.
func TestPinholeNotGivenToASecondServiceBeforeTheServicesAreKnown(t *testing.T) {
	e, f := newDualEnv(t, Config{}, fake.RouterConfig{}, anyHostPinhole)
	nodes := dualNodes()
	holder := lbService("default", "holder", withFamilies(v1.IPv6Protocol))
	holder.Status.LoadBalancer = *e.mustEnsure(t, holder, nodes)

	restarted, err := New(Config{Client: e.router.Client(addrA), Clock: e.clock, Pinholes: anyHostPinholes{f}})
	if err != nil {
		t.Fatal(err)
	}
	restarted.seeNodes(nodes)
	// Initialized, its Service cache not synced (Run not started): a
	// process with no Initialize at all has no record to wait for.
	if err := restarted.Initialize(context.Background(), fakecluster.ClientBuilder(k8sfake.NewClientset())); err != nil {
		t.Fatal(err)
	}
	taker := lbService("default", "taker", withFamilies(v1.IPv6Protocol))
	st, err := restarted.EnsureLoadBalancer(context.Background(), testCluster, taker, nodes)
	if err == nil {
		taker.Status.LoadBalancer = *st
		t.Errorf("Ensure of a second Service wanting the holder's pinhole, before the Services are known: served at %v", st.Ingress)
		if err := restarted.EnsureLoadBalancerDeleted(context.Background(), testCluster, taker); err != nil {
			t.Fatal(err)
		}
		diffStrings(t, "pinholes open after the second Service was deleted", []string{pin(igd.TCP, guaA, 8080)}, f.Open())
	}
}
