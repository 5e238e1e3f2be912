package loadbalancer

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sfake "k8s.io/client-go/kubernetes/fake"

	"github.com/ccmkit/ccmkit/fake"
	fakecluster "github.com/ccmkit/ccmkit/fake/cluster"
	"github.com/ccmkit/ccmkit/igd"
)

// What an adversarial review of d2f68f5 (issue 18, findings 3-8) found; each
// test failed on that commit. R7's holder has its status recorded, as the
// service controller does.

// R1 (finding 5, via an update instead of a creation): a is older than b
// and wants TCP/81 when p1 lists the Services to serve b (TCP/80). Just
// before p1's add, a's port changes to 80 and p2 serves a: p2's list shows
// b younger, so a "wins". Both processes map to the one node, so the router
// lets the second add replace the first: both Ensures succeed.
func TestReviewUpdatedOlderServiceAndYoungerNeverBothTakeAKey(t *testing.T) {
	ctx := context.Background()
	r := fake.NewRouter(fake.RouterConfig{})
	node := newNode("node-a", addrA)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a := lbService("default", "a", withPorts(port("http", v1.ProtocolTCP, 81, 30080)))
	b := lbService("default", "b", withPorts(port("http", v1.ProtocolTCP, 80, 30081)))
	a.CreationTimestamp, b.CreationTimestamp = metav1.NewTime(t0), metav1.NewTime(t0.Add(10*time.Second))
	cluster := k8sfake.NewClientset(node, a, b)
	p1, p2 := twoProcesses(t, r, cluster)
	var errA error
	fired := false
	r.Intercept(fake.RouterHooks{AddPortMapping: func(ctx context.Context, from netip.Addr, m igd.Mapping, next fake.AddFunc) (igd.Mapping, error) {
		if from == addrB && m.InternalPort == 30081 && !fired {
			fired = true
			a2 := a.DeepCopy()
			a2.Spec.Ports = []v1.ServicePort{port("http", v1.ProtocolTCP, 80, 30080)}
			if _, err := cluster.CoreV1().Services("default").Update(ctx, a2, metav1.UpdateOptions{}); err != nil {
				t.Error(err)
			}
			_, errA = p2.EnsureLoadBalancer(ctx, testCluster, a2, []*v1.Node{node})
		}
		return next(ctx, m)
	}})
	_, errB := p1.EnsureLoadBalancer(ctx, testCluster, b, []*v1.Node{node})
	if errA == nil && errB == nil {
		t.Fatalf("both Services were served TCP/80 by two processes of one cluster; table %q", e2eTable(r))
	}
}

// R2 (finding 3): the lost add is remembered only as a held key, not as what
// was sent. When the node it targets is deleted before the next read, the
// mapping is no longer recognised (owns needs a node address, or the address
// this process wrote), the key is forgotten, and the mapping leaks. A
// successful add to the same node would have been recognised (moved).
func TestReviewLostAddReplyFoundAfterItsNodeIsGone(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{}, fake.RouterConfig{})
	nodes := threeNodes()
	lost := fake.Nth(1)
	e.router.Intercept(fake.RouterHooks{AddPortMapping: func(ctx context.Context, _ netip.Addr, m igd.Mapping, next fake.AddFunc) (igd.Mapping, error) {
		stored, err := next(ctx, m)
		if err == nil && m.ExternalPort == 81 && lost() {
			return igd.Mapping{}, context.DeadlineExceeded
		}
		return stored, err
	}})
	svc := newService("default", "web", withPorts(port("a", v1.ProtocolTCP, 80, 30080), port("b", v1.ProtocolTCP, 81, 30081)))
	if _, err := e.ensure(t, svc, nodes); err == nil {
		t.Fatal("Ensure succeeded although the reply to one add was lost")
	}
	// The node the mappings point at is deleted (the informer's delete).
	var gone string
	for _, m := range e.router.Mappings() {
		for _, n := range nodes {
			if n.Status.Addresses[1].Address == m.InternalClient.String() {
				gone = n.Name
			}
		}
	}
	e.lb.forgetNode(gone)
	var rest []*v1.Node
	for _, n := range nodes {
		if n.Name != gone {
			rest = append(rest, n)
		}
	}
	svc.Spec.Ports = svc.Spec.Ports[:1] // the user removes port 81
	if _, err := e.ensure(t, svc, rest); err != nil {
		t.Fatalf("Ensure without port 81: %v", err)
	}
	if err := e.lb.EnsureLoadBalancerDeleted(ctx, testCluster, svc); err != nil {
		t.Fatalf("EnsureLoadBalancerDeleted: %v", err)
	}
	diffRows(t, "table after the delete", e.table(), nil)
}

// R3 (finding 4): a router that reports a lease of 0 for a mapping this
// process was granted a finite lease for. upToDate treats 0 as "unknown"
// and falls back to the granted lease; leaseLeft treats it as permanent and
// skips the margin: a delete is sent with 2 s left, lands after expiry, and
// removes the LAN host's new mapping.
func TestReviewLeaseReportedAsZeroStillKeepsTheMargin(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{Lease: time.Hour}, fake.RouterConfig{})
	nodes := threeNodes()
	svc := newService("default", "web", withPorts(port("a", v1.ProtocolTCP, 82, 30082)))
	svc.Status.LoadBalancer = *e.mustEnsure(t, svc, nodes)
	e.clock.Step(time.Hour - 2*time.Second) // 2 s of the granted lease left
	zero := func(m igd.Mapping) igd.Mapping { m.Lease = 0; return m }
	console := igd.Mapping{Protocol: igd.TCP, ExternalPort: 82, InternalClient: addrStranger, InternalPort: 82, Description: "game console", Enabled: true}
	consoleDeleted := false
	e.router.Intercept(fake.RouterHooks{
		GetPortMapping: func(ctx context.Context, _ netip.Addr, k igd.Key, next fake.GetFunc) (igd.Mapping, error) {
			m, err := next(ctx, k)
			return zero(m), err
		},
		ListPortMappings: func(ctx context.Context, _ netip.Addr, p igd.Protocol, r igd.PortRange, next fake.ListFunc) ([]igd.Mapping, error) {
			ms, err := next(ctx, p, r)
			for i := range ms {
				ms[i] = zero(ms[i])
			}
			return ms, err
		},
		DeletePortMapping: func(ctx context.Context, _ netip.Addr, k igd.Key, next fake.DeleteFunc) error {
			e.clock.Step(3 * time.Second)
			if _, err := e.router.Client(addrStranger).GetPortMapping(ctx, igd.TCP, 82); errors.Is(err, igd.ErrNoSuchEntry) {
				e.router.Put(console)
				consoleDeleted = k == console.Key()
			}
			return next(ctx, k)
		},
	})
	_ = e.lb.EnsureLoadBalancerDeleted(ctx, testCluster, svc)
	if consoleDeleted {
		t.Errorf("a delete sent with 2 s of the granted lease left (the router reports lease 0) landed after expiry and removed the console's mapping")
	}
}

// R4 (finding 4): for a router that reports the lease as granted, the
// granted lease is the only count, and it is started when the add's reply
// arrives, not when the add was sent. A slow reply (4 s) makes the margin
// 4 s short: a delete judged with 5.5 s left has 1.5 s left.
func TestReviewGrantedLeaseCountedFromTheAddSent(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{Lease: time.Hour}, fake.RouterConfig{})
	nodes := threeNodes()
	asGranted := func(m igd.Mapping) igd.Mapping {
		if m.Lease > 0 {
			m.Lease = time.Hour
		}
		return m
	}
	e.router.Intercept(fake.RouterHooks{
		AddPortMapping: func(ctx context.Context, _ netip.Addr, m igd.Mapping, next fake.AddFunc) (igd.Mapping, error) {
			stored, err := next(ctx, m)
			e.clock.Step(4 * time.Second) // the reply takes 4 s
			return stored, err
		},
		GetPortMapping: func(ctx context.Context, _ netip.Addr, k igd.Key, next fake.GetFunc) (igd.Mapping, error) {
			m, err := next(ctx, k)
			return asGranted(m), err
		},
		ListPortMappings: func(ctx context.Context, _ netip.Addr, p igd.Protocol, r igd.PortRange, next fake.ListFunc) ([]igd.Mapping, error) {
			ms, err := next(ctx, p, r)
			for i := range ms {
				ms[i] = asGranted(ms[i])
			}
			return ms, err
		},
	})
	svc := newService("default", "web", withPorts(port("a", v1.ProtocolTCP, 82, 30082)))
	svc.Status.LoadBalancer = *e.mustEnsure(t, svc, nodes)
	// By this process's count 5.5 s are left; by the router's, 1.5 s.
	e.clock.Step(time.Hour - 5500*time.Millisecond) // now: 1.5 s before the router expires it
	console := igd.Mapping{Protocol: igd.TCP, ExternalPort: 82, InternalClient: addrStranger, InternalPort: 82, Description: "game console", Enabled: true}
	consoleDeleted := false
	e.router.Intercept(fake.RouterHooks{DeletePortMapping: func(ctx context.Context, _ netip.Addr, k igd.Key, next fake.DeleteFunc) error {
		e.clock.Step(2 * time.Second) // the delete takes 2 s to reach the router
		if _, err := e.router.Client(addrStranger).GetPortMapping(ctx, igd.TCP, 82); errors.Is(err, igd.ErrNoSuchEntry) {
			e.router.Put(console)
			consoleDeleted = k == console.Key()
		}
		return next(ctx, k)
	}})
	_ = e.lb.EnsureLoadBalancerDeleted(ctx, testCluster, svc)
	if consoleDeleted {
		t.Errorf("the delete landed after the lease ran out and removed the console's mapping: the granted lease was counted from the add's reply")
	}
}

// R5 (finding 7): a pass asks the external IP once and reports it for every
// Service it serves. The WAN goes down while the pass serves default/a; the
// pass then serves default/b from scratch (its own read, its own adds) and
// patches b's status with the address the router no longer reports, where
// an Ensure of b at that moment gets ErrExternalIPNotUsable.
func TestReviewPassNeverPatchesAnAddressTheRouterNoLongerReports(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{}, fake.RouterConfig{})
	nodes := threeNodes()
	if _, err := e.lb.EnsureLoadBalancer(ctx, testCluster, newService("default", "warmup", withPorts(port("x", v1.ProtocolTCP, 9, 30009))), nodes); err != nil {
		t.Fatal(err) // learn the cluster name, as the service controller's first call does
	}
	a := lbService("default", "a", withPorts(port("http", v1.ProtocolTCP, 80, 30080)))
	b := lbService("default", "b", withPorts(port("http", v1.ProtocolTCP, 81, 30081)))
	e.router.Intercept(fake.RouterHooks{ListPortMappings: func(ctx context.Context, _ netip.Addr, p igd.Protocol, r igd.PortRange, next fake.ListFunc) ([]igd.Mapping, error) {
		if r.First == 80 && r != igd.AllPorts {
			e.router.SetExternalIP(netip.IPv4Unspecified()) // the WAN goes down while a is served
		}
		return next(ctx, p, r)
	}})
	w := staticWatch(t, nodes, []*v1.Service{a, b})
	e.lb.pass(ctx, w)
	got, err := w.client.CoreV1().Services("default").Get(ctx, "b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Status.LoadBalancer.Ingress) > 0 {
		t.Errorf("b's status patched with %v after the router reported 0.0.0.0 (before b was served at all)", got.Status.LoadBalancer.Ingress)
	}
}

// R6 (lifecycle): Run called before Initialize returns at once; Initialize
// then moves the phase to "initialized", which nothing ever leaves: every
// EnsureLoadBalancerDeleted returns an api.RetryError forever and the
// Service's finalizer is never removed.
func TestReviewInitializeAfterRunDoesNotBlockDeletesForever(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{}, fake.RouterConfig{})
	e.lb.Run(ctx) // before Initialize: logs and returns
	if err := e.lb.Initialize(ctx, fakecluster.ClientBuilder(k8sfake.NewClientset())); err != nil {
		t.Fatal(err)
	}
	svc := newService("default", "web", withPorts(port("http", v1.ProtocolTCP, 80, 30080)))
	svc.Status.LoadBalancer = *e.mustEnsure(t, svc, threeNodes())
	if err := e.lb.EnsureLoadBalancerDeleted(ctx, testCluster, svc); err != nil {
		t.Errorf("EnsureLoadBalancerDeleted with no background work that will ever run: %v", err)
	}
}

// A holds TCP/80; b, created in the same second, asks for 80 later and is
// refused by the read (a holds it). The router reboots: a, whose status
// records the port, gets it back at once, and b keeps waiting, named; once
// b gives 80 up, a keeps it.
func TestRebootGivesAKeyBackToTheServiceWhoseStatusRecordsItOnATie(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{}, fake.RouterConfig{})
	nodes := threeNodes()
	created := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	a := lbService("default", "a", withPorts(port("http", v1.ProtocolTCP, 80, 30080)))
	b := lbService("default", "b", withPorts(port("http", v1.ProtocolTCP, 8080, 30081)))
	a.CreationTimestamp, b.CreationTimestamp = created, created
	cluster := k8sfake.NewClientset(a, b)
	if err := e.lb.Initialize(ctx, fakecluster.ClientBuilder(cluster)); err != nil {
		t.Fatal(err)
	}
	a.Status.LoadBalancer = *e.mustEnsure(t, a, nodes)
	if _, err := cluster.CoreV1().Services("default").UpdateStatus(ctx, a, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err) // as the service controller records it
	}
	e.mustEnsure(t, b, nodes)
	b.Spec.Ports[0].Port = 80
	if _, err := cluster.CoreV1().Services("default").Update(ctx, b, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ensure(t, b, nodes); !errors.Is(err, ErrPortInUse) {
		t.Fatalf("b asking for a's port: %v, want ErrPortInUse", err)
	}
	e.router.Reboot()
	_, errB := e.ensure(t, b, nodes)
	_, errA := e.ensure(t, a, nodes)
	wantServed(t, "default/a", map[string]error{"default/a": errA, "default/b": errB})
	b.Spec.Ports[0].Port = 8080 // b gives 80 up
	if _, err := cluster.CoreV1().Services("default").Update(ctx, b, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.mustEnsure(t, b, nodes)
	if _, err := e.ensure(t, a, nodes); err != nil {
		t.Errorf("a, once b gave TCP/80 up: %v", err)
	}
}

// R8 (finding 3, a router that lies): the router stores the add and answers
// it with a fault (501). refused() takes any UPnP code as proof that nothing
// was stored and forgets the key; the user removes the port, deletes the
// Service, and the mapping stays. Holding the key on every failure costs one
// more key read by the Service's next operation.
func TestReviewFaultAnsweredAddThatWasStoredLeavesNothingBehind(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{}, fake.RouterConfig{})
	nodes := threeNodes()
	lied := fake.Nth(1)
	e.router.Intercept(fake.RouterHooks{AddPortMapping: func(ctx context.Context, _ netip.Addr, m igd.Mapping, next fake.AddFunc) (igd.Mapping, error) {
		stored, err := next(ctx, m)
		if err == nil && m.ExternalPort == 81 && lied() {
			return igd.Mapping{}, &igd.UPnPError{Action: "AddPortMapping", Code: igd.CodeActionFailed, Description: "ActionFailed"}
		}
		return stored, err
	}})
	svc := newService("default", "web", withPorts(port("a", v1.ProtocolTCP, 80, 30080), port("b", v1.ProtocolTCP, 81, 30081)))
	_, _ = e.ensure(t, svc, nodes) // whatever it reports of port 81, the mapping is there
	svc.Spec.Ports = svc.Spec.Ports[:1]
	if _, err := e.ensure(t, svc, nodes); err != nil {
		t.Fatalf("Ensure without port 81: %v", err)
	}
	if err := e.lb.EnsureLoadBalancerDeleted(ctx, testCluster, svc); err != nil {
		t.Fatalf("EnsureLoadBalancerDeleted: %v", err)
	}
	diffRows(t, "table after the delete", e.table(), nil)
}
