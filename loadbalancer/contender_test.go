package loadbalancer

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/ccmkit/ccmkit/fake"
	fakecluster "github.com/ccmkit/ccmkit/fake/cluster"
	"github.com/ccmkit/ccmkit/igd"
)

// An older Service that wants TCP/80 but can be served nowhere must not keep
// it from a younger Service that can be served: nothing maps 80 otherwise,
// and the younger is told the older "is served it". Served nowhere:
// externalTrafficPolicy Local with no ready endpoint (a Deployment scaled to
// zero), also when its status records the port (its mapping is withdrawn,
// and only a successful Ensure rewrites its status), or with ready
// endpoints only on nodes that are not ready.
func TestServiceServedNowhereDoesNotKeepAPortFromOneThatCanBeServed(t *testing.T) {
	recordsPort80 := func(s *v1.Service) {
		s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "198.51.100.1",
			Ports: []v1.PortStatus{{Port: 80, Protocol: v1.ProtocolTCP}}}}
	}
	for _, tc := range []struct {
		name      string
		nodeA     []nodeOpt
		idleOpts  []svcOpt
		endpoints bool // a ready endpoint of idle on node-a
	}{
		{name: "no ready endpoint"},
		{name: "no ready endpoint, its status records the port", idleOpts: []svcOpt{recordsPort80}},
		{name: "ready endpoints only on nodes not ready", nodeA: []nodeOpt{notReady}, endpoints: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, Config{}, fake.RouterConfig{})
			nodes := []*v1.Node{newNode("node-a", addrA, tc.nodeA...), newNode("node-b", addrB), newNode("node-c", addrC)}
			t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			idle := lbService("default", "idle", append([]svcOpt{withPorts(port("http", v1.ProtocolTCP, 80, 30080)), func(s *v1.Service) {
				s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
				s.CreationTimestamp = metav1.NewTime(t0)
			}}, tc.idleOpts...)...)
			web := lbService("default", "web", withPorts(port("http", v1.ProtocolTCP, 80, 30081)), func(s *v1.Service) {
				s.CreationTimestamp = metav1.NewTime(t0.Add(time.Hour))
			})
			objs := []k8sruntime.Object{nodes[0], nodes[1], nodes[2], idle, web}
			if tc.endpoints {
				objs = append(objs, endpointSlice(idle, "node-a", true))
			}
			startBackground(t, e, objs...)

			if _, err := e.ensure(t, idle, nodes); !errors.Is(err, ErrNoEligibleNode) {
				t.Fatalf("idle: %v, want ErrNoEligibleNode", err)
			}
			if _, err := e.ensure(t, web, nodes); err != nil {
				t.Errorf("web: %v, want served (idle can be served nowhere)", err)
			}
			// node-b: the rendezvous hash's choice for default/web.
			diffRows(t, "table", e.table(), []string{row(igd.TCP, 80, addrB, 30081, desc("default", "web", "http"))})
		})
	}
}

// A Local Service whose only ready endpoint is on a node that cannot take
// traffic (NotReady) can be served nowhere either: though its status
// records the port and it is older, it must not keep the port from a
// Service that can be served (found by the soak, fake pcp-only seed 25: an
// endpoint left ready on a node gone NotReady kept UDP/8080 unmapped).
func TestHolderWithEndpointsOnlyOnIneligibleNodesDoesNotKeepAPort(t *testing.T) {
	e := newEnv(t, Config{}, fake.RouterConfig{})
	nodes := threeNodes()
	notReady(nodes[2])
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	stranded := lbService("default", "stranded", withPorts(port("dns", v1.ProtocolUDP, 8080, 30047)), func(s *v1.Service) {
		s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
		s.CreationTimestamp = metav1.NewTime(t0)
		s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "198.51.100.1",
			Ports: []v1.PortStatus{{Port: 8080, Protocol: v1.ProtocolUDP}}}}
	})
	web := lbService("default", "web", withPorts(port("dns", v1.ProtocolUDP, 8080, 30051)), func(s *v1.Service) {
		s.CreationTimestamp = metav1.NewTime(t0.Add(time.Hour))
	})
	startBackground(t, e, nodes[0], nodes[1], nodes[2], stranded, web, endpointSlice(stranded, "node-c", true))

	if _, err := e.ensure(t, stranded, nodes); !errors.Is(err, ErrNoEligibleNode) {
		t.Fatalf("stranded: %v, want ErrNoEligibleNode (its endpoint's node is NotReady)", err)
	}
	if _, err := e.ensure(t, web, nodes); err != nil {
		t.Errorf("web: %v, want served (stranded, though its status records the port, can be served nowhere)", err)
	}
	// node-b: the rendezvous hash's choice for default/web.
	diffRows(t, "table", e.table(), []string{row(igd.UDP, 8080, addrB, 30051, desc("default", "web", "dns"))})
}

// A Local Service whose only ready endpoints are on nodes that cannot
// receive its ports (a node removed, or not Ready, while its endpoint
// lingers) is served nowhere as one scaled to zero is: it does not keep a
// port its status records from a Service that can be served.
func TestHolderWithEndpointsOnlyOnANodeGoneDoesNotKeepAPort(t *testing.T) {
	e := newEnv(t, Config{}, fake.RouterConfig{})
	nodes := threeNodes()
	gone := newNode("node-gone", netip.MustParseAddr("192.168.1.99"), notReady)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	idle := lbService("default", "idle", withPorts(port("http", v1.ProtocolTCP, 80, 30080)), func(s *v1.Service) {
		s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
		s.CreationTimestamp = metav1.NewTime(t0)
		s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "198.51.100.1",
			Ports: []v1.PortStatus{{Port: 80, Protocol: v1.ProtocolTCP}}}}
	})
	web := lbService("default", "web", withPorts(port("http", v1.ProtocolTCP, 80, 30081)), func(s *v1.Service) {
		s.CreationTimestamp = metav1.NewTime(t0.Add(time.Hour))
	})
	startBackground(t, e, nodes[0], nodes[1], nodes[2], gone, idle, web, endpointSlice(idle, gone.Name, true))

	if _, err := e.ensure(t, idle, append(nodes, gone)); !errors.Is(err, ErrNoEligibleNode) {
		t.Fatalf("idle: %v, want ErrNoEligibleNode (its only ready endpoint is on a node not Ready)", err)
	}
	if _, err := e.ensure(t, web, nodes); err != nil {
		t.Errorf("web: %v, want served (idle, though its status records the port, can be served nowhere)", err)
	}
	diffRows(t, "table", e.table(), []string{row(igd.TCP, 80, addrB, 30081, desc("default", "web", "http"))})
}

// A Service that can be served nowhere (Local with no ready endpoint), whose
// status records a port another Service then took, is not told any longer
// that it holds the port: the next pass records it in its status as held
// by another. Before, its status, which only a successful operation
// rewrote, went on recording the port beside the holder's.
func TestStatusOfServiceServedNowhereDropsAPortAnotherTook(t *testing.T) {
	e := newEnv(t, Config{}, fake.RouterConfig{})
	nodes := threeNodes()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	idle := lbService("default", "idle", withPorts(port("http", v1.ProtocolTCP, 80, 30080)), func(s *v1.Service) {
		s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
		s.CreationTimestamp = metav1.NewTime(t0)
		s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: e.router.ExternalIP().String(),
			Ports: []v1.PortStatus{{Port: 80, Protocol: v1.ProtocolTCP}}}}
	})
	web := lbService("default", "web", withPorts(port("http", v1.ProtocolTCP, 80, 30081)), func(s *v1.Service) {
		s.CreationTimestamp = metav1.NewTime(t0.Add(time.Hour))
	})
	r := startBackground(t, e, nodes[0], nodes[1], nodes[2], idle, web)
	if _, err := e.ensure(t, web, nodes); err != nil {
		t.Fatalf("web: %v, want served", err)
	}
	r.tick(t)

	st := r.service(t, "default", "idle").Status.LoadBalancer
	if len(st.Ingress) != 1 || len(st.Ingress[0].Ports) != 1 || st.Ingress[0].Ports[0].Error == nil || *st.Ingress[0].Ports[0].Error != PortErrorInUse {
		t.Errorf("status of idle after web took TCP/80: %s, want TCP/80 with error %s", describeStatus(st), PortErrorInUse)
	}
}

// The status a Service served nowhere gets when another took one of its
// ports tells it holds none of the others it does not hold either: each
// says there is no node to map it to. Before, they read as served, and
// two such Services were told they held the same port.
func TestStatusOfServiceServedNowhereClaimsNoPortItDoesNotHold(t *testing.T) {
	e := newEnv(t, Config{}, fake.RouterConfig{})
	nodes := threeNodes()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	idle := lbService("default", "idle", withPorts(port("http", v1.ProtocolTCP, 80, 30080), port("alt", v1.ProtocolTCP, 81, 30082)), func(s *v1.Service) {
		s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
		s.CreationTimestamp = metav1.NewTime(t0)
		s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: e.router.ExternalIP().String(),
			Ports: []v1.PortStatus{{Port: 80, Protocol: v1.ProtocolTCP}}}}
	})
	web := lbService("default", "web", withPorts(port("http", v1.ProtocolTCP, 80, 30081)), func(s *v1.Service) {
		s.CreationTimestamp = metav1.NewTime(t0.Add(time.Hour))
	})
	r := startBackground(t, e, nodes[0], nodes[1], nodes[2], idle, web)
	if _, err := e.ensure(t, web, nodes); err != nil {
		t.Fatalf("web: %v, want served", err)
	}
	r.tick(t)

	st := r.service(t, "default", "idle").Status.LoadBalancer
	var got []string
	for _, ing := range st.Ingress {
		for _, p := range ing.Ports {
			got = append(got, fmt.Sprintf("%s/%d %s", p.Protocol, p.Port, ptr.Deref(p.Error, "served")))
		}
	}
	want := []string{"TCP/80 " + PortErrorInUse, "TCP/81 " + PortErrorNoEligibleNode}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ports of idle's status (-want +got):\n%s", diff)
	}
}

// Blind (PCP without UPnP), a port the operator's policy comes to refuse is
// withdrawn by the process that applies the policy: the one started with
// it (a configuration change restarts the controller), which did not write
// the Service's mapping there. The mapping must not stay forwarded until
// its lease ends.
func TestPortRefusedAfterARestartIsWithdrawnBlind(t *testing.T) {
	e, s := blindEnv(t, Config{})
	nodes := threeNodes()
	svc := lbService("default", "web", withPorts(port("http", v1.ProtocolTCP, 80, 30080), port("ssh", v1.ProtocolTCP, 22, 30022)))
	svc.Status.LoadBalancer = *e.mustEnsure(t, svc, nodes)
	refuse := true
	restarted, err := New(Config{Client: blindBackend(t, s), Clock: e.clock, Admit: refusePort(22, &refuse)})
	if err != nil {
		t.Fatal(err)
	}
	st, err := restarted.EnsureLoadBalancer(context.Background(), testCluster, svc, nodes)
	if err != nil {
		t.Fatalf("Ensure after the restart: %v", err)
	}
	if len(st.Ingress) != 1 || len(st.Ingress[0].Ports) != 2 || st.Ingress[0].Ports[0].Error == nil {
		t.Errorf("status %+v, want TCP/22 refused", st)
	}
	for _, m := range e.router.Mappings() {
		if m.Key() == (igd.Key{Protocol: igd.TCP, ExternalPort: 22}) {
			t.Errorf("TCP/22, refused, is still forwarded after the restart: %q", e.table())
		}
	}
	if len(e.router.Mappings()) != 1 {
		t.Errorf("table %q, want TCP/80 alone", e.table())
	}
}

// Blind (PCP without UPnP), a process took a key for b and stopped before
// the list after its add (b's status does not record it); a, older, wants
// it too. The next process gives the key to a: b, refused, must not leave
// its mapping (which that process did not write) forwarding the key until
// its lease ends, nor a waiting for it.
func TestKeyTakenByAProcessThatStoppedBeforeConfirmingGoesToItsWinnerBlind(t *testing.T) {
	ctx := context.Background()
	e, s := blindEnv(t, Config{})
	nodes := threeNodes()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a := lbService("default", "a", withPorts(port("http", v1.ProtocolTCP, 80, 30080)))
	b := lbService("default", "b", withPorts(port("http", v1.ProtocolTCP, 80, 30081)))
	a.CreationTimestamp, b.CreationTimestamp = metav1.NewTime(t0), metav1.NewTime(t0.Add(10*time.Second))
	e.mustEnsure(t, b, nodes) // the stopped process: no API client, so no list after the add
	next, err := New(Config{Client: blindBackend(t, s), Clock: e.clock})
	if err != nil {
		t.Fatal(err)
	}
	if err := next.Initialize(ctx, fakecluster.ClientBuilder(k8sfake.NewClientset(a, b))); err != nil {
		t.Fatal(err)
	}
	errs := map[string]error{}
	for _, svc := range []*v1.Service{b, a} {
		_, errs[svc.Namespace+"/"+svc.Name] = next.EnsureLoadBalancer(ctx, testCluster, svc, nodes)
	}
	wantServed(t, "default/a", errs)
	if got := e.router.Mappings(); len(got) != 1 || got[0].InternalPort != 30080 {
		t.Errorf("table %q, want a's mapping alone", e.table())
	}
}

// failNthList makes the nth list of Services of c fail (1-based).
func failNthList(c *k8sfake.Clientset, n int) {
	var mu sync.Mutex
	lists := 0
	c.PrependReactor("list", "services", func(k8stesting.Action) (bool, k8sruntime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		lists++
		if lists == n {
			return true, nil, errors.New("the API server is unavailable")
		}
		return false, nil, nil
	})
}

// Blind (PCP without UPnP), a process that restarts renews each Service's
// mapping, which it did not write, as a key to take, and confirms it with a
// list of the Services after the add. When that list fails (the API server
// is briefly unavailable, as in the control-plane upgrade that moved the
// controller), the Service, which nobody else wants, must keep its mapping:
// the port stays forwarded, and the operation is retried.
func TestFailedListAfterTheAddKeepsTheMappingBlind(t *testing.T) {
	ctx := context.Background()
	e, s := blindEnv(t, Config{})
	nodes := threeNodes()
	web := lbService("default", "web", withPorts(port("http", v1.ProtocolTCP, 80, 30080)))
	web.Status.LoadBalancer = *e.mustEnsure(t, web, nodes)
	before := e.table()
	cluster := k8sfake.NewClientset(web)
	restarted, err := New(Config{Client: blindBackend(t, s), Clock: e.clock})
	if err != nil {
		t.Fatal(err)
	}
	if err := restarted.Initialize(ctx, fakecluster.ClientBuilder(cluster)); err != nil {
		t.Fatal(err)
	}
	failNthList(cluster, 2) // the list after the add
	if _, err = restarted.EnsureLoadBalancer(ctx, testCluster, web, nodes); err == nil {
		t.Error("Ensure with the list after the add failing succeeded, want an error (retried)")
	}
	diffRows(t, "table after the failed list", e.table(), before)
	if _, err = restarted.EnsureLoadBalancer(ctx, testCluster, web, nodes); err != nil {
		t.Errorf("Ensure once the API server answers: %v", err)
	}
	if h := restarted.heldAt(newOwner(testCluster, "default", "web"), igd.Key{Protocol: igd.TCP, ExternalPort: 80}); h.contested {
		t.Error("TCP/80 is still to confirm after a list that names web")
	}
	diffRows(t, "table once confirmed", e.table(), before)
}

// Blind, a restarted process whose list of the Services before the add
// fails has refused nobody: the Service's mapping, which that process did
// not write, stays, and the operation is retried.
func TestFailedListBeforeTheAddKeepsTheMappingBlind(t *testing.T) {
	ctx := context.Background()
	e, s := blindEnv(t, Config{})
	nodes := threeNodes()
	web := lbService("default", "web", withPorts(port("http", v1.ProtocolTCP, 80, 30080)))
	web.Status.LoadBalancer = *e.mustEnsure(t, web, nodes)
	before := e.table()
	cluster := k8sfake.NewClientset(web)
	restarted, err := New(Config{Client: blindBackend(t, s), Clock: e.clock})
	if err != nil {
		t.Fatal(err)
	}
	if err := restarted.Initialize(ctx, fakecluster.ClientBuilder(cluster)); err != nil {
		t.Fatal(err)
	}
	failNthList(cluster, 1)
	if _, err = restarted.EnsureLoadBalancer(ctx, testCluster, web, nodes); err == nil {
		t.Error("Ensure with the list before the add failing succeeded, want an error (retried)")
	}
	diffRows(t, "table after the failed list", e.table(), before)
}

// MaxMappings holds across a restart of the controller: the Services are
// served again in whatever order the service controller syncs them, and a
// Service new since must not take a mapping past the cap before those that
// held theirs are counted again (they keep theirs, so the cap would stay
// exceeded until one gives a mapping up).
func TestMaxMappingsHoldsAcrossARestart(t *testing.T) {
	e := newEnv(t, Config{MaxMappings: 1}, fake.RouterConfig{})
	nodes := threeNodes()
	held := newService("default", "held", withPorts(port("a", v1.ProtocolTCP, 80, 30080)))
	held.Status.LoadBalancer = *e.mustEnsure(t, held, nodes)
	restarted, err := New(Config{Client: e.router.Client(addrA), Clock: e.clock, MaxMappings: 1})
	if err != nil {
		t.Fatal(err)
	}
	fresh := newService("default", "fresh", withPorts(port("a", v1.ProtocolTCP, 8080, 30088)))
	if err := restarted.Initialize(context.Background(), fakecluster.ClientBuilder(k8sfake.NewClientset(held, fresh))); err != nil {
		t.Fatal(err)
	}
	_, errFresh := restarted.EnsureLoadBalancer(context.Background(), testCluster, fresh, nodes)
	_, errHeld := restarted.EnsureLoadBalancer(context.Background(), testCluster, held, nodes)
	if !errors.Is(errFresh, ErrNotAdmitted) || errHeld != nil {
		t.Errorf("fresh: %v; held: %v; want fresh refused by the cap and held served", errFresh, errHeld)
	}
	if n := len(e.router.Mappings()); n > 1 {
		t.Errorf("%d mappings after the restart, past the cap of 1: %q", n, e.table())
	}
}

// An add whose reply is lost (the router stored it) ends the operation
// before the list after the add: that key is still to confirm. b, older,
// came to want TCP/80 during a's add; a's next operation, which finds its
// mapping and renews it, must confirm it and give it up to b, and b is
// served then.
func TestAddWhoseReplyWasLostIsConfirmedByTheNextOperation(t *testing.T) {
	ctx := context.Background()
	r := fake.NewRouter(fake.RouterConfig{})
	node := newNode("node-a", addrA)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a := lbService("default", "a", withPorts(port("http", v1.ProtocolTCP, 80, 30080)))
	b := lbService("default", "b", withPorts(port("http", v1.ProtocolTCP, 81, 30081)))
	a.CreationTimestamp, b.CreationTimestamp = metav1.NewTime(t0.Add(10*time.Second)), metav1.NewTime(t0)
	cluster := k8sfake.NewClientset(node, a, b)
	p1, p2 := twoProcesses(t, r, cluster)
	added := fake.Nth(1)
	r.Intercept(fake.RouterHooks{
		AddPortMapping: func(ctx context.Context, from netip.Addr, m igd.Mapping, next fake.AddFunc) (igd.Mapping, error) {
			if from != addrB || !added() {
				return next(ctx, m)
			}
			b2 := b.DeepCopy() // b comes to want 80 while a's add is under way
			b2.Spec.Ports[0].Port = 80
			updateSpec(t, cluster, b2)
			if _, err := next(ctx, m); err != nil {
				return igd.Mapping{}, err
			}
			return igd.Mapping{}, context.DeadlineExceeded // stored; the reply is lost
		},
	})
	if _, err := p1.EnsureLoadBalancer(ctx, testCluster, a, []*v1.Node{node}); err == nil {
		t.Fatal("a's Ensure with its add's reply lost succeeded, want an error")
	}
	b.Spec.Ports[0].Port = 80
	_, errA := p1.EnsureLoadBalancer(ctx, testCluster, a, []*v1.Node{node})
	_, errB := p2.EnsureLoadBalancer(ctx, testCluster, b, []*v1.Node{node})
	wantServed(t, "default/b", map[string]error{"default/a": errA, "default/b": errB})
	diffRows(t, "table", e2eTable(r), []string{row(igd.TCP, 80, addrA, 30081, desc("default", "b", "http"))})
}

// Blind (PCP without UPnP), a Local Service whose mapping this process
// wrote, and which then can be served nowhere (its one endpoint went not
// ready), must not keep the port from a Service that can be served once
// the router no longer has that mapping: its lease ended unrenewed (a
// Service with no node renews nothing; an announced restart alone is no
// proof, TestForgedAnnounceKeepsTheMappingOfAServiceServedNowhereBlind).
// Recall shows what this process wrote, not what the router
// holds: before, the Service served nowhere kept "holding" the key in this
// process for ever, and every other Service was refused it ("external
// port in use (served to service ...)") while nothing mapped it (found by
// the soak, fake pcp-only seed 7003: TCP/9000 wanted by three Services,
// servable for one, mapped for none).
func TestServiceServedNowhereDoesNotKeepAPortTheRouterNoLongerMapsBlind(t *testing.T) {
	for _, tc := range []struct {
		name string
		lose func(e *env, s *fake.PCPServer)
	}{
		{name: "its lease ended", lose: func(e *env, _ *fake.PCPServer) { e.clock.Step(2 * time.Hour) }},
		{name: "the router rebooted silently, then its lease ended", lose: func(e *env, s *fake.PCPServer) {
			s.Router().Reboot() // the table only: no announcement
			e.clock.Step(2 * time.Hour)
		}},
		{name: "the router announced a restart, then its lease ended", lose: func(e *env, s *fake.PCPServer) {
			s.Reboot()
			e.lb.expireAll() // as the router's ANNOUNCE makes it: not proof (see below)
			e.clock.Step(2 * time.Hour)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, s := blindEnv(t, Config{})
			nodes := threeNodes()
			http := igd.Key{Protocol: igd.TCP, ExternalPort: 80}
			t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			idle := lbService("default", "idle", withPorts(port("http", v1.ProtocolTCP, 80, 30080)), func(s *v1.Service) {
				s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
				s.CreationTimestamp = metav1.NewTime(t0)
			})
			web := lbService("default", "web", withPorts(port("http", v1.ProtocolTCP, 80, 30081)), func(s *v1.Service) {
				s.CreationTimestamp = metav1.NewTime(t0.Add(time.Hour))
			})
			r := startBackground(t, e, nodes[0], nodes[1], nodes[2], idle, web, endpointSlice(idle, "node-a", true))

			st, err := e.ensure(t, idle, nodes)
			if err != nil {
				t.Fatalf("idle: %v, want served on node-a", err)
			}
			idle.Status.LoadBalancer = *st
			if _, err := r.client.CoreV1().Services("default").UpdateStatus(context.Background(), idle, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			diffRows(t, "table with idle served", e.table(), []string{row(igd.TCP, 80, addrA, 30080, pcpDesc("default", "idle", http))})
			if _, err := e.ensure(t, web, nodes); !errors.Is(err, ErrPortInUse) {
				t.Fatalf("web while idle is served: %v, want ErrPortInUse", err)
			}

			// idle's one endpoint goes not ready: it can be served nowhere.
			endpointNotReady(t, e, r, idle, "node-a")
			if _, err := e.ensure(t, idle, nodes); !errors.Is(err, ErrNoEligibleNode) {
				t.Fatalf("idle without a ready endpoint: %v, want ErrNoEligibleNode", err)
			}
			tc.lose(e, s)
			diffRows(t, "table once the router lost idle's mapping", e.table(), nil)

			if _, err := e.ensure(t, idle, nodes); !errors.Is(err, ErrNoEligibleNode) {
				t.Fatalf("idle, still without a ready endpoint: %v, want ErrNoEligibleNode", err)
			}
			if _, err := e.ensure(t, web, nodes); err != nil {
				t.Errorf("web: %v, want served (idle can be served nowhere, and the router no longer maps it)", err)
			}
			// node-b: the rendezvous hash's choice for default/web.
			diffRows(t, "table", e.table(), []string{row(igd.TCP, 80, addrB, 30081, pcpDesc("default", "web", http))})
		})
	}
}

// Blind, an ANNOUNCE (which any LAN host can forge) makes this process's
// mappings due for renewal, but is no proof that the router lost them: the
// mapping of a Service served nowhere, which the router still has, stays,
// and still holds its key, until the lease the router granted ends.
func TestForgedAnnounceKeepsTheMappingOfAServiceServedNowhereBlind(t *testing.T) {
	e, _ := blindEnv(t, Config{})
	nodes := threeNodes()
	http := igd.Key{Protocol: igd.TCP, ExternalPort: 80}
	idle := lbService("default", "idle", withPorts(port("http", v1.ProtocolTCP, 80, 30080)), func(s *v1.Service) {
		s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
	})
	r := startBackground(t, e, nodes[0], nodes[1], nodes[2], idle, endpointSlice(idle, "node-a", true))
	if _, err := e.ensure(t, idle, nodes); err != nil {
		t.Fatalf("idle: %v, want served on node-a", err)
	}
	endpointNotReady(t, e, r, idle, "node-a") // it can be served nowhere
	e.lb.mode.routerRestarted()               // a forged ANNOUNCE: the router did not restart
	if _, err := e.ensure(t, idle, nodes); !errors.Is(err, ErrNoEligibleNode) {
		t.Fatalf("idle without a ready endpoint: %v, want ErrNoEligibleNode", err)
	}
	diffRows(t, "table after a forged announcement", e.table(), []string{row(igd.TCP, 80, addrA, 30080, pcpDesc("default", "idle", http))})
}
