package loadbalancer

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/cloud-provider/api"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/internal/upnp"
)

// Corners where the router or the cluster misbehaves: a refused listing, a
// lost reply, a slow delete near a lease's end, Services created in one
// second, a failed hint, a WAN link down, a shutdown with Local Services.

// A router that refuses GetListOfPortMappings with 402 or 501
// (some reject its arguments) is read one key at a time, as one that lacks
// the action is: a refused listing is a fallback, never a failure.
func TestRefusedListingFallsBackToGets(t *testing.T) {
	for _, code := range []int{upnp.CodeInvalidArgs, upnp.CodeActionFailed} {
		t.Run(fmt.Sprint("UPnP ", code), func(t *testing.T) {
			e := newEnv(t, Config{}, fake.RouterConfig{})
			var lists atomic.Int32
			e.router.Intercept(fake.RouterHooks{ListPortMappings: func(context.Context, netip.Addr, igd.Protocol, igd.PortRange, fake.ListFunc) ([]igd.Mapping, error) {
				lists.Add(1)
				return nil, &igd.UPnPError{Action: "GetListOfPortMappings", Code: code, Description: "refused"}
			}})
			svc := newService("default", "web", withPorts(port("http", v1.ProtocolTCP, 80, 30080)))
			for range 2 { // the second Ensure reads the mapping the first wrote
				if _, err := e.ensure(t, svc, threeNodes()); err != nil {
					t.Fatalf("EnsureLoadBalancer on a router refusing listings with %d: %v", code, err)
				}
			}
			if len(e.table()) != 1 {
				t.Errorf("table = %q, want the Service's one mapping", e.table())
			}
			if lists.Load() == 0 {
				t.Error("the load balancer never tried to list")
			}
		})
	}
}

// The router stores an add but its reply is lost. The key stays
// the Service's until a read proves otherwise, so removing the port and
// then deleting the Service leaves nothing behind.
func TestLostAddReplyLeavesNothingBehind(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{}, fake.RouterConfig{})
	nodes := threeNodes()
	lost := fake.Nth(1)
	e.router.Intercept(fake.RouterHooks{AddPortMapping: func(ctx context.Context, _ netip.Addr, m igd.Mapping, next fake.AddFunc) (igd.Mapping, error) {
		stored, err := next(ctx, m)
		if err == nil && m.ExternalPort == 81 && lost() {
			return igd.Mapping{}, context.DeadlineExceeded // stored, but the reply never came
		}
		return stored, err
	}})
	svc := newService("default", "web", withPorts(port("a", v1.ProtocolTCP, 80, 30080), port("b", v1.ProtocolTCP, 81, 30081)))
	if _, err := e.ensure(t, svc, nodes); err == nil {
		t.Fatal("Ensure succeeded although the reply to one add was lost")
	}
	// The user removes port 81 before any Ensure succeeds; the status never
	// listed it.
	svc.Spec.Ports = svc.Spec.Ports[:1]
	if _, err := e.ensure(t, svc, nodes); err != nil {
		t.Fatalf("Ensure without port 81: %v", err)
	}
	if err := e.lb.EnsureLoadBalancerDeleted(ctx, testCluster, svc); err != nil {
		t.Fatalf("EnsureLoadBalancerDeleted: %v", err)
	}
	diffRows(t, "table after the delete", e.table(), nil)
}

// A delete's "leave it to expire" margin is judged when the delete is sent,
// not when the lease was read: on a slow router a mapping read with 6 s left
// expires while earlier deletes run and a LAN host maps the port; no delete
// sent then removes the host's mapping.
func TestSlowDeleteNeverRemovesAMappingThatExpiredMeanwhile(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{Lease: time.Hour}, fake.RouterConfig{})
	nodes := threeNodes()
	svc := newService("default", "web", withPorts(port("a", v1.ProtocolTCP, 80, 30080),
		port("b", v1.ProtocolTCP, 81, 30081), port("c", v1.ProtocolTCP, 82, 30082)))
	svc.Status.LoadBalancer = *e.mustEnsure(t, svc, nodes)
	e.clock.Step(time.Hour - 6*time.Second) // 6 s of lease left

	console := igd.Mapping{Protocol: igd.TCP, ExternalPort: 82, InternalClient: addrStranger, InternalPort: 82, Description: "game console", Enabled: true}
	var consoleMapped, consoleDeleted bool
	e.router.Intercept(fake.RouterHooks{DeletePortMapping: func(ctx context.Context, from netip.Addr, k igd.Key, next fake.DeleteFunc) error {
		e.clock.Step(3 * time.Second) // each call takes the router 3 s to reach
		if _, err := e.router.Client(addrStranger).GetPortMapping(ctx, igd.TCP, 82); errors.Is(err, igd.ErrNoSuchEntry) {
			e.router.Put(console) // expired: the console takes it at once
			consoleMapped = true
		}
		consoleDeleted = consoleDeleted || (consoleMapped && k == console.Key())
		return next(ctx, k)
	}})
	err := e.lb.EnsureLoadBalancerDeleted(ctx, testCluster, svc)
	if consoleDeleted {
		t.Errorf("the delete of TCP/82 was sent after its lease ran out, and removed the console's mapping")
	}
	// What had under 5 s left when its delete was due is left to expire,
	// and the service controller is asked to come back.
	if retry := new(*api.RetryError); !errors.As(err, retry) {
		t.Errorf("EnsureLoadBalancerDeleted = %v, want an api.RetryError (mappings left to expire)", err)
	}
}

// creationTimestamp has 1-second precision. Two Services created
// in the same second want TCP/80; one process listed the Services before
// the second existed. The two processes must not both take the key, and
// the one served (the first by name) ends up holding it.
func TestSameSecondServicesNeverBothTakeAKey(t *testing.T) {
	ctx := context.Background()
	r := fake.NewRouter(fake.RouterConfig{})
	node := newNode("node-a", addrA) // one node: both processes map to it
	created := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	a := lbService("default", "a", withPorts(port("http", v1.ProtocolTCP, 80, 30080)))
	b := lbService("default", "b", withPorts(port("http", v1.ProtocolTCP, 80, 30081)))
	a.CreationTimestamp, b.CreationTimestamp = created, created
	cluster := k8sfake.NewClientset(node, b) // a is not created yet
	p1, p2 := twoProcesses(t, r, cluster)

	// p1 serves b: it lists the Services (a does not exist yet) and reads
	// TCP/80 free; just before its add, a is created and p2 serves it.
	var errA error
	r.Intercept(fake.RouterHooks{AddPortMapping: func(ctx context.Context, from netip.Addr, m igd.Mapping, next fake.AddFunc) (igd.Mapping, error) {
		if from == addrB && m.InternalPort == 30081 {
			if _, err := cluster.CoreV1().Services("default").Create(ctx, a, metav1.CreateOptions{}); err != nil {
				t.Error(err)
			}
			_, errA = p2.EnsureLoadBalancer(ctx, testCluster, a, []*v1.Node{node})
		}
		return next(ctx, m)
	}})
	_, errB := p1.EnsureLoadBalancer(ctx, testCluster, b, []*v1.Node{node})
	// Both lists made after the adds see both Services: a, first by name,
	// is served; p1 removes b's mapping (which replaced a's on the router),
	// and p2's next probe finds a's gone and serves it again.
	wantServed(t, "default/a", map[string]error{"default/a": errA, "default/b": errB})
	r.ClearHooks()
	if !p2.probe(ctx) {
		t.Errorf("p2's probe did not see a's mapping gone; table %q", e2eTable(r))
	}
	if _, err := p2.EnsureLoadBalancer(ctx, testCluster, a, []*v1.Node{node}); err != nil {
		t.Fatal(err)
	}
	diffRows(t, "table", e2eTable(r), []string{row(igd.TCP, 80, addrA, 30080, desc("default", "a", "http"))})
}

// A pass's listing of the whole table is only a hint; when it
// fails (501 on wide ranges, a walk that churns, a timeout) the pass still
// serves every Service: repairs and renewals go on.
func TestFailedHintDoesNotStopThePass(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{}, fake.RouterConfig{})
	nodes := threeNodes()
	svc := lbService("default", "web", withPorts(port("http", v1.ProtocolTCP, 80, 30080)))
	svc.Status.LoadBalancer = *e.mustEnsure(t, svc, nodes)
	want := e.table()
	e.router.Reboot()
	e.router.Intercept(fake.RouterHooks{ListPortMappings: func(ctx context.Context, _ netip.Addr, proto igd.Protocol, ports igd.PortRange, next fake.ListFunc) ([]igd.Mapping, error) {
		if ports == igd.AllPorts {
			return nil, &igd.UPnPError{Action: "GetListOfPortMappings", Code: upnp.CodeActionFailed, Description: "ActionFailed"}
		}
		return next(ctx, proto, ports)
	}})
	e.lb.pass(ctx, staticWatch(t, nodes, []*v1.Service{svc}))
	diffRows(t, "table after the pass", e.table(), want)
}

// Once the router answers 0.0.0.0 (its WAN link is down), no
// Service is given the address it had before.
func TestStaleExternalIPNeverReported(t *testing.T) {
	e := newEnv(t, Config{}, fake.RouterConfig{})
	nodes := threeNodes()
	e.mustEnsure(t, newService("default", "first", withPorts(port("http", v1.ProtocolTCP, 80, 30080))), nodes)
	e.router.SetExternalIP(netip.IPv4Unspecified())
	st, err := e.ensure(t, newService("default", "second", withPorts(port("http", v1.ProtocolTCP, 81, 30081))), nodes)
	if !errors.Is(err, ErrExternalIPNotUsable) {
		t.Errorf("Ensure while the WAN is down = %v, %v; want ErrExternalIPNotUsable and no status", st, err)
	}
	if st != nil && len(st.Ingress) > 0 {
		t.Errorf("status = %v, want no address", st.Ingress)
	}
}

// A Service with externalTrafficPolicy Local keeps its mappings
// once Run has returned (the CCM shutting down, a lost lease): only a spec
// that cannot be served loses them.
func TestLocalServiceKeepsMappingsAfterRunReturns(t *testing.T) {
	e := newEnv(t, Config{}, fake.RouterConfig{})
	nodes := threeNodes()
	svc := lbService("default", "web", withPorts(port("http", v1.ProtocolTCP, 80, 30080)))
	svc.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
	objs := []k8sruntime.Object{svc, endpointSlice(svc, "node-b", true)}
	for _, n := range nodes {
		objs = append(objs, n)
	}
	bg := startBackground(t, e, objs...)
	e.mustEnsure(t, svc, nodes)
	want := []string{row(igd.TCP, 80, addrB, 30080, desc("default", "web", "http"))}
	diffRows(t, "table while running", e.table(), want)
	bg.stop(t)
	if _, err := e.ensure(t, svc, nodes); errors.Is(err, ErrInvalidService) {
		t.Errorf("Ensure after Run returned: %v, want no ErrInvalidService", err)
	}
	diffRows(t, "table after Run returned", e.table(), want)
}
