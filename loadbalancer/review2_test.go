package loadbalancer

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sfake "k8s.io/client-go/kubernetes/fake"

	"github.com/ccmkit/ccmkit/fake"
	fakecluster "github.com/ccmkit/ccmkit/fake/cluster"
	"github.com/ccmkit/ccmkit/igd"
)

// Second adversarial review of the arbitration rule (e0d4122). The service
// controller records a status only when Ensure succeeds; on an error, and on
// cloudprovider.ImplementedElsewhere, it leaves the status as it was.

// recordStatus stores st as svc's status in the cluster, as the service
// controller does after a successful Ensure.
func recordStatus(t *testing.T, c *k8sfake.Clientset, svc *v1.Service, st *v1.LoadBalancerStatus) {
	t.Helper()
	svc.Status.LoadBalancer = *st
	if _, err := c.CoreV1().Services(svc.Namespace).UpdateStatus(context.Background(), svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func createService(t *testing.T, c *k8sfake.Clientset, svc *v1.Service) {
	t.Helper()
	if _, err := c.CoreV1().Services(svc.Namespace).Create(context.Background(), svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func updateSpec(t *testing.T, c *k8sfake.Clientset, svc *v1.Service) {
	t.Helper()
	if _, err := c.CoreV1().Services(svc.Namespace).Update(context.Background(), svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// V1: b held TCP/80 and moves to 8080, which a LAN host holds. b's Ensure
// withdraws 80 and fails on 8080, so b's status keeps listing 80 (stale).
// a, created wanting 80, is refused (b "holds it by its status") for as long
// as the LAN host keeps 8080, though nothing on the router or in any spec
// holds or wants 80 but a.
func TestReview2StaleStatusOfAServiceThatGaveUpTheKeyDoesNotBlockOthers(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{}, fake.RouterConfig{})
	nodes := threeNodes()
	b := lbService("default", "b", withPorts(port("http", v1.ProtocolTCP, 80, 30081)))
	cluster := k8sfake.NewClientset(b)
	if err := e.lb.Initialize(ctx, fakecluster.ClientBuilder(cluster)); err != nil {
		t.Fatal(err)
	}
	recordStatus(t, cluster, b, e.mustEnsure(t, b, nodes))
	e.router.Put(igd.Mapping{Protocol: igd.TCP, ExternalPort: 8080, InternalClient: addrStranger, InternalPort: 8080, Description: "nas", Enabled: true})
	b.Spec.Ports[0].Port = 8080
	updateSpec(t, cluster, b)
	if _, err := e.ensure(t, b, nodes); !errors.Is(err, ErrPortInUse) {
		t.Fatalf("b moving to 8080 (a LAN host's): %v, want ErrPortInUse", err)
	}
	diffRows(t, "table", e.table(), []string{row(igd.TCP, 8080, addrStranger, 8080, "nas")}) // 80 withdrawn
	a := lbService("default", "a", withPorts(port("http", v1.ProtocolTCP, 80, 30080)))
	createService(t, cluster, a)
	if _, err := e.ensure(t, a, nodes); err != nil {
		t.Errorf("a wanting TCP/80, which no spec but a's wants and the router has free: %v", err)
	}
}

// V2: b held TCP/80 and opts out (its status stays: ImplementedElsewhere);
// a takes 80 and records it; b opts back in and is refused (a holds it).
// The router reboots: a key the router lost is arbitrated again, so both
// wait (review 3 showed a take-back from memory lets two processes both
// take it); once b gives 80 up, a gets it back. Never forever.
func TestReview2StaleStatusOfAnOptedOutServiceDoesNotDeadlockAfterAReboot(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{}, fake.RouterConfig{})
	nodes := threeNodes()
	b := lbService("default", "b", withPorts(port("http", v1.ProtocolTCP, 80, 30081)))
	a := lbService("default", "a", withPorts(port("http", v1.ProtocolTCP, 80, 30080)))
	cluster := k8sfake.NewClientset(b)
	if err := e.lb.Initialize(ctx, fakecluster.ClientBuilder(cluster)); err != nil {
		t.Fatal(err)
	}
	recordStatus(t, cluster, b, e.mustEnsure(t, b, nodes))
	createService(t, cluster, a)
	if _, err := e.ensure(t, a, nodes); !errors.Is(err, ErrPortInUse) {
		t.Fatalf("a while b holds 80: %v, want ErrPortInUse", err)
	}
	unannotated(b)
	updateSpec(t, cluster, b)
	if _, err := e.ensure(t, b, nodes); err == nil {
		t.Fatal("opted-out b: want ImplementedElsewhere")
	}
	recordStatus(t, cluster, a, e.mustEnsure(t, a, nodes))
	b.Annotations[AnnotationLoadBalancerType] = AnnotationValue
	updateSpec(t, cluster, b)
	if _, err := e.ensure(t, b, nodes); !errors.Is(err, ErrPortInUse) {
		t.Fatalf("b opted in again while a holds 80: %v, want ErrPortInUse", err)
	}
	e.router.Reboot()
	_, errA := e.ensure(t, a, nodes)
	_, errB := e.ensure(t, b, nodes)
	if errA == nil && errB == nil {
		t.Fatalf("after a reboot both a and b were served TCP/80")
	}
	b.Spec.Ports[0].Port = 8080 // b gives 80 up
	updateSpec(t, cluster, b)
	e.mustEnsure(t, b, nodes)
	if _, err := e.ensure(t, a, nodes); err != nil {
		t.Errorf("a, once b gave TCP/80 up: %v", err)
	}
}

// V3: two processes. b's status lists TCP/80 (stale: b opted out after
// being served it). p1 lists the Services to serve a (wants 80): b is not
// selected, so a may take 80. Just before p1's add, b opts back in and p2
// serves it: p2's list shows b's own status listing 80 and a's not, so b
// may take it. Both map to the one node, so the router lets the second add
// replace the first: both Ensures succeed.
func TestReview2ServiceOptedBackInAndAnotherNeverBothTakeAKey(t *testing.T) {
	ctx := context.Background()
	r := fake.NewRouter(fake.RouterConfig{})
	node := newNode("node-a", addrA)
	b := lbService("default", "b", withPorts(port("http", v1.ProtocolTCP, 80, 30081)))
	a := lbService("default", "a", withPorts(port("http", v1.ProtocolTCP, 80, 30080)))
	cluster := k8sfake.NewClientset(node, b)
	p1, p2 := twoProcesses(t, r, cluster)
	st, err := p2.EnsureLoadBalancer(ctx, testCluster, b, []*v1.Node{node})
	if err != nil {
		t.Fatal(err)
	}
	recordStatus(t, cluster, b, st)
	createService(t, cluster, a)
	unannotated(b)
	updateSpec(t, cluster, b)
	if _, err := p2.EnsureLoadBalancer(ctx, testCluster, b, []*v1.Node{node}); err == nil {
		t.Fatal("opted-out b: want ImplementedElsewhere")
	}
	var errB error
	fired := false
	r.Intercept(fake.RouterHooks{AddPortMapping: func(ctx context.Context, from netip.Addr, m igd.Mapping, next fake.AddFunc) (igd.Mapping, error) {
		if from == addrB && !fired {
			fired = true
			b2 := b.DeepCopy()
			b2.Annotations[AnnotationLoadBalancerType] = AnnotationValue
			updateSpec(t, cluster, b2)
			_, errB = p2.EnsureLoadBalancer(ctx, testCluster, b2, []*v1.Node{node})
		}
		return next(ctx, m)
	}})
	_, errA := p1.EnsureLoadBalancer(ctx, testCluster, a, []*v1.Node{node})
	if errA == nil && errB == nil {
		t.Fatalf("both Services were served TCP/80 by two processes of one cluster; table %q", e2eTable(r))
	}
}

// V5: on a router that reports internal port 0 (miniupnpd 2.3.6), the
// internal port is known only from what this process wrote. The nodePort
// changes; the add that moves the mapping to the new nodePort is lost
// (timeout) or answered with a fault, and not stored. The key stays held
// "with what was sent", the next read finds the Service's mapping there and
// confirms it, and from then on the old mapping looks up to date: the router
// forwards to the old nodePort for good.
func TestReview2UnstoredAddIsNotTakenAsWhatTheRouterHolds(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"reply lost", context.DeadlineExceeded},
		{"fault", &igd.UPnPError{Action: "AddPortMapping", Code: igd.CodeActionFailed, Description: "ActionFailed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, Config{}, fake.RouterConfig{ReportInternalPortZero: true})
			nodes := threeNodes()
			svc := newService("default", "web", withPorts(port("http", v1.ProtocolTCP, 80, 30080)))
			e.mustEnsure(t, svc, nodes)
			failed := fake.Nth(1)
			e.router.Intercept(fake.RouterHooks{AddPortMapping: func(ctx context.Context, _ netip.Addr, m igd.Mapping, next fake.AddFunc) (igd.Mapping, error) {
				if m.InternalPort == 30090 && failed() {
					return igd.Mapping{}, tc.err // not stored
				}
				return next(ctx, m)
			}})
			svc.Spec.Ports[0].NodePort = 30090
			if _, err := e.ensure(t, svc, nodes); err == nil {
				t.Fatal("Ensure succeeded although its add failed")
			}
			e.mustEnsure(t, svc, nodes) // the service controller retries
			var got []uint16
			for _, m := range e.router.Mappings() {
				got = append(got, m.InternalPort)
			}
			if len(got) != 1 || got[0] != 30090 {
				t.Errorf("router forwards TCP/80 to internal ports %v after a successful Ensure, want [30090]", got)
			}
		})
	}
}

// V6 (addFailed's read-back on a router whose GetSpecificPortMappingEntry
// lies): R8's router stores the add of TCP/81 and answers 501; it lists
// faithfully, but its GetSpecificPortMappingEntry answers 714 for a mapping
// it holds. The one read-back takes the 714 as proof and forgets the key;
// the user removes port 81 and deletes the Service: the mapping stays,
// though every read of the Service's keys (listings) would have found it.
func TestReview2FaultAnsweredAddReadBackByTheSameReadAsOthers(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{}, fake.RouterConfig{})
	nodes := threeNodes()
	lied := fake.Nth(1)
	e.router.Intercept(fake.RouterHooks{
		AddPortMapping: func(ctx context.Context, _ netip.Addr, m igd.Mapping, next fake.AddFunc) (igd.Mapping, error) {
			stored, err := next(ctx, m)
			if err == nil && m.ExternalPort == 81 && lied() {
				return igd.Mapping{}, &igd.UPnPError{Action: "AddPortMapping", Code: igd.CodeActionFailed, Description: "ActionFailed"}
			}
			return stored, err
		},
		GetPortMapping: func(ctx context.Context, _ netip.Addr, k igd.Key, next fake.GetFunc) (igd.Mapping, error) {
			return igd.Mapping{}, igd.ErrNoSuchEntry
		},
	})
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

// V7 (probes): another process of the cluster (a fail-over overlap) moves
// the Service's mapping to another node. This process's probe sees the
// change and repairs: its read finds the Service's mapping on an eligible
// node, up to date, so nothing is written, but the key keeps what this
// process wrote long ago. Every later probe of that key "finds the mapping
// changed" again, and each misfire serves every Service again, for as long
// as the process runs.
func TestReview2ProbeDoesNotMisfireOnAMappingAReadFoundUpToDate(t *testing.T) {
	ctx := context.Background()
	r := fake.NewRouter(fake.RouterConfig{})
	process := func(host netip.Addr) *LoadBalancer {
		lb, err := New(Config{Client: r.Client(host)})
		if err != nil {
			t.Fatal(err)
		}
		return lb
	}
	p1, p2 := process(addrB), process(addrC)
	nodes := threeNodes()
	svc := newService("default", "web", withPorts(port("http", v1.ProtocolTCP, 80, 30080)))
	if _, err := p1.EnsureLoadBalancer(ctx, testCluster, svc, nodes); err != nil {
		t.Fatal(err)
	}
	first := r.Mappings()[0].InternalClient
	var others []*v1.Node
	for _, n := range nodes {
		if n.Status.Addresses[1].Address != first.String() {
			others = append(others, n)
		}
	}
	if _, err := p2.EnsureLoadBalancer(ctx, testCluster, svc, nodes); err != nil {
		t.Fatal(err) // p2 sees every node (and writes nothing)
	}
	if _, err := p2.EnsureLoadBalancer(ctx, testCluster, svc, others); err != nil {
		t.Fatal(err)
	}
	if !p1.probe(ctx) {
		t.Fatal("p1's probe did not see the mapping moved")
	}
	if _, err := p1.EnsureLoadBalancer(ctx, testCluster, svc, nodes); err != nil {
		t.Fatal(err) // the repair: the mapping is on an eligible node, up to date
	}
	if p1.probe(ctx) {
		t.Errorf("probe misfires again after a read found the mapping (%v) up to date; table %q", r.Mappings()[0].InternalClient, e2eTable(r))
	}
}

// V8 (addFailed's message): a LAN host takes TCP/80 between the Service's
// read and its add (718); the one read-back times out. The error then says
// "the port is free" and blames secure mode, which nothing proved.
func TestReview2ConflictWithAFailedReadBackDoesNotClaimThePortFree(t *testing.T) {
	e := newEnv(t, Config{}, fake.RouterConfig{})
	host := igd.Mapping{Protocol: igd.TCP, ExternalPort: 80, InternalClient: addrStranger, InternalPort: 80, Description: "nas", Enabled: true}
	e.router.Intercept(fake.RouterHooks{
		AddPortMapping: func(ctx context.Context, _ netip.Addr, m igd.Mapping, next fake.AddFunc) (igd.Mapping, error) {
			e.router.Put(host) // the LAN host wins the race
			return next(ctx, m)
		},
		GetPortMapping: func(ctx context.Context, _ netip.Addr, k igd.Key, next fake.GetFunc) (igd.Mapping, error) {
			return igd.Mapping{}, context.DeadlineExceeded
		},
	})
	_, err := e.ensure(t, newService("default", "web", withPorts(port("http", v1.ProtocolTCP, 80, 30080))), threeNodes())
	if err == nil || strings.Contains(err.Error(), "the port is free") {
		t.Errorf("Ensure after a 718 and a read-back that timed out: %v", err)
	}
}

// V9 (reserve): a Service is gone from the API without
// EnsureLoadBalancerDeleted (its finalizer removed by hand, as users do
// when a delete hangs). Nothing renews its mapping, which expires. b now
// wants TCP/80: the router has it free, no Service in the cluster holds or
// wants it, but this process still records a as holding it, and reserve
// refuses b for as long as the process runs (nothing but an operation on a
// ever drops a's keys, and pruneDeleted only drops deleted Services).
func TestReview2KeysOfAServiceGoneFromTheAPIDoNotBlockOthersForever(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{}, fake.RouterConfig{})
	nodes := threeNodes()
	a := lbService("default", "a", withPorts(port("http", v1.ProtocolTCP, 80, 30080)))
	cluster := k8sfake.NewClientset(a)
	if err := e.lb.Initialize(ctx, fakecluster.ClientBuilder(cluster)); err != nil {
		t.Fatal(err)
	}
	recordStatus(t, cluster, a, e.mustEnsure(t, a, nodes))
	if err := cluster.CoreV1().Services("default").Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err) // finalizer removed by hand: no EnsureLoadBalancerDeleted
	}
	e.clock.Step(DefaultLease + time.Minute) // nothing renews a's mapping
	e.lb.forgetGone(ctx, nil)                // as a pass does, with a no longer listed
	diffRows(t, "table after a's lease ran out", e.table(), nil)
	if e.lb.probe(ctx) {
		t.Errorf("probe reports a lost mapping of a Service gone from the API: a repair pass every ProbeInterval, forever")
	}
	b := lbService("default", "b", withPorts(port("http", v1.ProtocolTCP, 80, 30081)))
	createService(t, cluster, b)
	if _, err := e.ensure(t, b, nodes); err != nil {
		t.Errorf("b wanting TCP/80, free on the router and wanted by no other Service: %v", err)
	}
}
