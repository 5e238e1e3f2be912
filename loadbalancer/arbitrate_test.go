package loadbalancer

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/ccmkit/ccmkit/fake"
	fakecluster "github.com/ccmkit/ccmkit/fake/cluster"
	"github.com/ccmkit/ccmkit/igd"
)

// listBarrier makes the first n lists of Services of c wait for each other
// (or for 500 ms, when fewer come): every Ensure has seen the others before
// any of them adds.
func listBarrier(c *k8sfake.Clientset, n int) {
	var mu sync.Mutex
	arrived := 0
	all := make(chan struct{})
	c.PrependReactor("list", "services", func(k8stesting.Action) (bool, k8sruntime.Object, error) {
		mu.Lock()
		arrived++
		first := arrived <= n
		if arrived == n {
			close(all)
		}
		mu.Unlock()
		if first {
			select {
			case <-all:
			case <-time.After(500 * time.Millisecond):
			}
		}
		return false, nil, nil // the tracker answers
	})
}

// wantServed checks that of the Services in errs (by name) exactly winner
// was served, and that every other got ErrPortInUse naming winner.
func wantServed(t *testing.T, winner string, errs map[string]error) {
	t.Helper()
	for name, err := range errs {
		if name == winner {
			if err != nil {
				t.Errorf("%s (the winner): %v, want served", name, err)
			}
			continue
		}
		var pe *PortError
		if !errors.Is(err, ErrPortInUse) || !errors.As(err, &pe) || pe.Claimant != winner {
			t.Errorf("%s: %v, want ErrPortInUse naming %s", name, err, winner)
		}
	}
}

// Two Services that want one key are never both left unserved: exactly one
// is served, the same whichever is ensured first and whether their Ensures
// overlap (both list the Services before either adds), in one process or in
// two (a fail-over overlap) over one API server: the one whose status
// records the port, else the older, else the first by namespace/name.
func TestExactlyOneOfTwoServicesWantingAKeyIsServed(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	created := func(d time.Duration) func(*v1.Service) {
		return func(s *v1.Service) { s.CreationTimestamp = metav1.NewTime(t0.Add(d)) }
	}
	records80 := func(s *v1.Service) {
		s.Status.LoadBalancer = v1.LoadBalancerStatus{Ingress: []v1.LoadBalancerIngress{{IP: "198.51.100.1",
			Ports: []v1.PortStatus{{Port: 80, Protocol: v1.ProtocolTCP}}}}}
	}
	refused80 := func(s *v1.Service) {
		why := "loadbalancer: external port in use"
		s.Status.LoadBalancer = v1.LoadBalancerStatus{Ingress: []v1.LoadBalancerIngress{{IP: "198.51.100.1",
			Ports: []v1.PortStatus{{Port: 80, Protocol: v1.ProtocolTCP, Error: &why}}}}}
	}
	type svcSpec struct {
		ns, name string
		opts     []func(*v1.Service)
	}
	for _, tc := range []struct {
		name   string
		a, b   svcSpec
		winner string // namespace/name
	}{
		{"created at once: the first by name", svcSpec{"default", "b", []func(*v1.Service){created(0)}}, svcSpec{"default", "a", []func(*v1.Service){created(0)}}, "default/a"},
		{"created at once: the first by namespace", svcSpec{"zeta", "a", []func(*v1.Service){created(0)}}, svcSpec{"alpha", "z", []func(*v1.Service){created(0)}}, "alpha/z"},
		{"the older", svcSpec{"default", "a", []func(*v1.Service){created(time.Second)}}, svcSpec{"default", "b", []func(*v1.Service){created(0)}}, "default/b"},
		{"the holder by status, though younger", svcSpec{"default", "a", []func(*v1.Service){created(0)}}, svcSpec{"default", "b", []func(*v1.Service){created(time.Hour), records80}}, "default/b"},
		{"a refused port is no hold", svcSpec{"default", "a", []func(*v1.Service){created(0)}}, svcSpec{"default", "b", []func(*v1.Service){created(time.Hour), refused80}}, "default/a"},
	} {
		for _, processes := range []int{1, 2} {
			for _, overlap := range []bool{false, true} {
				for _, order := range [][2]int{{0, 1}, {1, 0}} {
					name := fmt.Sprintf("%s/%d processes/overlap=%t/%s first", tc.name, processes, overlap, []svcSpec{tc.a, tc.b}[order[0]].name)
					t.Run(name, func(t *testing.T) {
						r := fake.NewRouter(fake.RouterConfig{})
						node := newNode("node-a", addrA)
						var svcs []*v1.Service
						for i, sp := range []svcSpec{tc.a, tc.b} {
							s := lbService(sp.ns, sp.name, withPorts(port("http", v1.ProtocolTCP, 80, int32(30080+i))))
							for _, o := range sp.opts {
								o(s)
							}
							svcs = append(svcs, s)
						}
						cluster := k8sfake.NewClientset(node, svcs[0], svcs[1])
						var lbs [2]*LoadBalancer
						if processes == 2 {
							lbs[0], lbs[1] = twoProcesses(t, r, cluster)
						} else {
							lbs[0], lbs[1] = twoProcesses(t, r, cluster)
							lbs[1] = lbs[0]
						}
						errs := make([]error, 2)
						ensure := func(i int) {
							_, errs[i] = lbs[i].EnsureLoadBalancer(context.Background(), testCluster, svcs[i], []*v1.Node{node})
						}
						if overlap {
							listBarrier(cluster, 2)
							var wg sync.WaitGroup
							for _, i := range order {
								wg.Go(func() { ensure(i) })
							}
							wg.Wait()
						} else {
							for _, i := range order {
								ensure(i)
							}
						}
						byName := map[string]error{}
						for i, s := range svcs {
							byName[s.Namespace+"/"+s.Name] = errs[i]
						}
						wantServed(t, tc.winner, byName)
						var w *v1.Service
						for _, s := range svcs {
							if s.Namespace+"/"+s.Name == tc.winner {
								w = s
							}
						}
						diffRows(t, "table", e2eTable(r), []string{row(igd.TCP, 80, addrA, uint16(w.Spec.Ports[0].NodePort), desc(w.Namespace, w.Name, "http"))})
					})
				}
			}
		}
	}
}

// contendedAfterLoss sets up a holding TCP/80 (its status records it, as
// the service controller writes it) and b wanting 80 too (refused), on one
// LoadBalancer that reads the cluster's Services.
func contendedAfterLoss(t *testing.T, e *env) (a, b *v1.Service, cluster *k8sfake.Clientset) {
	t.Helper()
	ctx := context.Background()
	created := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	a = lbService("default", "a", withPorts(port("http", v1.ProtocolTCP, 80, 30080)))
	// b is older: age alone would give it the port.
	b = lbService("default", "b", withPorts(port("http", v1.ProtocolTCP, 8080, 30081)))
	a.CreationTimestamp, b.CreationTimestamp = created, metav1.NewTime(created.Add(-time.Hour))
	cluster = k8sfake.NewClientset(a, b)
	if err := e.lb.Initialize(ctx, fakecluster.ClientBuilder(cluster)); err != nil {
		t.Fatal(err)
	}
	recordStatus(t, cluster, a, e.mustEnsure(t, a, threeNodes()))
	recordStatus(t, cluster, b, e.mustEnsure(t, b, threeNodes()))
	b.Spec.Ports[0].Port = 80
	updateSpec(t, cluster, b)
	if _, err := e.ensure(t, b, threeNodes()); !errors.Is(err, ErrPortInUse) {
		t.Fatalf("b asking for a's port: %v, want ErrPortInUse", err)
	}
	return a, b, cluster
}

// A router reboot, or a LAN host's DeletePortMapping, takes a's mapping
// away while b (older) also wants TCP/80: a, whose status records the port,
// gets it back whichever Service is served first, and b keeps waiting,
// named; once b gives 80 up, nothing changes for a.
func TestKeyLostByTheRouterGoesBackToTheServiceWhoseStatusRecordsIt(t *testing.T) {
	for _, loss := range []string{"reboot", "foreign delete"} {
		for _, bFirst := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/b first=%t", loss, bFirst), func(t *testing.T) {
				e := newEnv(t, Config{}, fake.RouterConfig{})
				nodes := threeNodes()
				a, b, _ := contendedAfterLoss(t, e)
				before := e.table()
				switch loss {
				case "reboot":
					e.router.Reboot()
				default:
					if err := e.router.Client(addrStranger).DeletePortMapping(context.Background(), igd.TCP, 80); err != nil {
						t.Fatal(err)
					}
				}
				errs := map[string]error{}
				for _, s := range map[bool][]*v1.Service{false: {a, b}, true: {b, a}}[bFirst] {
					_, errs[s.Namespace+"/"+s.Name] = e.ensure(t, s, nodes)
				}
				wantServed(t, "default/a", errs)
				diffRows(t, "table after the repair", e.table(), before)
			})
		}
	}
}

// Blind (PCP without UPnP: nothing reads the router), after a restart of the
// process, a's status records TCP/80 and its mapping is still on the
// router; b (older) wants 80 too. a keeps the port and b waits, named,
// whichever is ensured first, and again after the router rebooted.
func TestBlindRestartKeepsAContendedPortWithItsHolder(t *testing.T) {
	for _, bFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("b first=%t", bFirst), func(t *testing.T) {
			ctx := context.Background()
			e, s := blindEnv(t, Config{})
			nodes := threeNodes()
			created := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			a := lbService("default", "a", withPorts(port("http", v1.ProtocolTCP, 80, 30080)))
			b := lbService("default", "b", withPorts(port("http", v1.ProtocolTCP, 80, 30081)))
			a.CreationTimestamp, b.CreationTimestamp = created, metav1.NewTime(created.Add(-time.Hour))
			a.Status.LoadBalancer = *e.mustEnsure(t, a, nodes) // before b existed
			before := e.table()
			cluster := k8sfake.NewClientset(a, b)
			restarted, err := New(Config{Client: blindBackend(t, s), Clock: e.clock})
			if err != nil {
				t.Fatal(err)
			}
			if err := restarted.Initialize(ctx, fakecluster.ClientBuilder(cluster)); err != nil {
				t.Fatal(err)
			}
			order := map[bool][]*v1.Service{false: {a, b}, true: {b, a}}[bFirst]
			for round, what := range []string{"after the process restarted", "after the router rebooted"} {
				if round == 1 {
					s.Reboot()
					restarted.expireAll() // as the router's ANNOUNCE makes it
				}
				errs := map[string]error{}
				for _, svc := range order {
					_, errs[svc.Namespace+"/"+svc.Name] = restarted.EnsureLoadBalancer(ctx, testCluster, svc, nodes)
				}
				t.Log(what)
				wantServed(t, "default/a", errs)
				diffRows(t, "table "+what, e.table(), before)
			}
		})
	}
}

// Blind (PCP without UPnP), two processes of one cluster over one API
// server ensure two Services created at once for TCP/80, both listing the
// Services before either adds: exactly one, the first by name, is served,
// whichever process goes first.
func TestExactlyOneOfTwoServicesWantingAKeyIsServedBlind(t *testing.T) {
	for _, order := range [][2]int{{0, 1}, {1, 0}} {
		t.Run(fmt.Sprintf("process %d first", order[0]+1), func(t *testing.T) {
			e, s := blindEnv(t, Config{})
			nodes := threeNodes()
			created := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			svcs := []*v1.Service{
				lbService("default", "b", withPorts(port("http", v1.ProtocolTCP, 80, 30081))),
				lbService("default", "a", withPorts(port("http", v1.ProtocolTCP, 80, 30080))),
			}
			for _, svc := range svcs {
				svc.CreationTimestamp = created
			}
			cluster := k8sfake.NewClientset(svcs[0], svcs[1])
			var lbs [2]*LoadBalancer
			for i := range lbs {
				lb, err := New(Config{Client: blindBackend(t, s), Clock: e.clock})
				if err != nil {
					t.Fatal(err)
				}
				if err := lb.Initialize(context.Background(), fakecluster.ClientBuilder(cluster)); err != nil {
					t.Fatal(err)
				}
				lbs[i] = lb
			}
			listBarrier(cluster, 2)
			errs := make([]error, 2)
			var wg sync.WaitGroup
			for _, i := range order {
				wg.Go(func() {
					_, errs[i] = lbs[i].EnsureLoadBalancer(context.Background(), testCluster, svcs[i], nodes)
				})
			}
			wg.Wait()
			wantServed(t, "default/a", map[string]error{"default/b": errs[0], "default/a": errs[1]})
			if ms := e.router.Mappings(); len(ms) != 1 || ms[0].InternalPort != 30080 {
				t.Errorf("table %q, want a's mapping alone", e.table())
			}
		})
	}
}

// The list after its add names another Service, and the loser's mapping
// cannot be removed (the router fails the delete): the loser must not keep
// the key on its next operation, which sees the mapping as its own and up
// to date; it gives it up then.
func TestKeyGivenUpButNotRemovedIsGivenUpByTheNextOperation(t *testing.T) {
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
	added, deleted := fake.Nth(1), fake.Nth(1)
	r.Intercept(fake.RouterHooks{
		AddPortMapping: func(ctx context.Context, from netip.Addr, m igd.Mapping, next fake.AddFunc) (igd.Mapping, error) {
			if from == addrB && added() { // p1 listed (a wanted 81) and is about to add b's 80
				a2 := a.DeepCopy()
				a2.Spec.Ports[0].Port = 80
				updateSpec(t, cluster, a2)
				_, errA = p2.EnsureLoadBalancer(ctx, testCluster, a2, []*v1.Node{node})
			}
			return next(ctx, m)
		},
		DeletePortMapping: func(ctx context.Context, from netip.Addr, k igd.Key, next fake.DeleteFunc) error {
			if from == addrB && deleted() {
				return context.DeadlineExceeded // the loser's removal is lost
			}
			return next(ctx, k)
		},
	})
	_, errB := p1.EnsureLoadBalancer(ctx, testCluster, b, []*v1.Node{node})
	if errA != nil || !errors.Is(errB, ErrPortInUse) {
		t.Fatalf("a: %v; b: %v; want a served and b refused", errA, errB)
	}
	_, errB = p1.EnsureLoadBalancer(ctx, testCluster, b, []*v1.Node{node})
	wantServed(t, "default/a", map[string]error{"default/b": errB})
	for _, m := range r.Mappings() {
		if m.Description == desc("default", "b", "http") {
			t.Errorf("b's mapping is still on the router after its next Ensure: %q", e2eTable(r))
		}
	}
}

// A process took a key and stopped before the list after its add (a crash):
// the mapping is on the router, its Service's status does not record it,
// and an older Service wants it too. A new process, which did not write the
// mapping, confirms it before keeping it: the older Service is served.
func TestKeyTakenByAProcessThatStoppedBeforeConfirmingIsConfirmedByTheNext(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{}, fake.RouterConfig{})
	nodes := threeNodes()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a := lbService("default", "a", withPorts(port("http", v1.ProtocolTCP, 80, 30080)))
	b := lbService("default", "b", withPorts(port("http", v1.ProtocolTCP, 80, 30081)))
	a.CreationTimestamp, b.CreationTimestamp = metav1.NewTime(t0), metav1.NewTime(t0.Add(10*time.Second))
	e.mustEnsure(t, b, nodes) // the stopped process: no API client, so no list after the add
	if err := e.lb.Initialize(ctx, fakecluster.ClientBuilder(k8sfake.NewClientset(a, b))); err != nil {
		t.Fatal(err)
	}
	next, err := New(Config{Client: e.router.Client(addrA), Clock: e.clock})
	if err != nil {
		t.Fatal(err)
	}
	if err := next.Initialize(ctx, fakecluster.ClientBuilder(k8sfake.NewClientset(a, b))); err != nil {
		t.Fatal(err)
	}
	errs := map[string]error{}
	for _, s := range []*v1.Service{b, a} {
		_, errs[s.Namespace+"/"+s.Name] = next.EnsureLoadBalancer(ctx, testCluster, s, nodes)
	}
	wantServed(t, "default/a", errs)
	if got := e.router.Mappings(); len(got) != 1 || got[0].InternalPort != 30080 {
		t.Errorf("table %q, want a's mapping alone", e.table())
	}
}

// b held TCP/80 and moves to 8080, which a LAN host holds. b's Ensure
// withdraws 80 and fails on 8080, so b's status keeps listing 80
// (recordStatus: the service controller records a status only after a
// successful Ensure). a, created wanting 80, is served: the stale status of
// a Service whose spec no longer wants a key does not hold the key, when
// nothing on the router and no other spec holds or wants it.
func TestStaleStatusOfAServiceThatGaveUpTheKeyDoesNotBlockOthers(t *testing.T) {
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

// b held TCP/80 and opts out (its status stays: the service controller
// leaves it on ImplementedElsewhere); a takes 80 and records it; b opts back
// in and is refused (a holds it). The router reboots: a key the router lost
// is arbitrated again, never taken back from memory
// (TestOldAndNewLeaderNeverBothTakeBackAKeyTheRouterLost), so at most one of
// them is served; once b gives 80 up, a gets it back. The stale status never
// deadlocks them.
func TestStaleStatusOfAnOptedOutServiceDoesNotDeadlockAfterAReboot(t *testing.T) {
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

// Two processes. b's status lists TCP/80 (stale: b opted out after being
// served it). p1 lists the Services to serve a (wants 80): b is not
// selected, so a may take 80. Just before p1's add, b opts back in and p2
// serves it: p2's list shows b's own status listing 80 and a's not, so b may
// take it. At most one of the two Ensures succeeds, though both map to the
// one node (where the router lets the second add replace the first).
func TestServiceOptedBackInAndAnotherNeverBothTakeAKey(t *testing.T) {
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

// A fail-over overlap: p1 served a on TCP/80, then p2 took over. Under p2, a
// gives up 80, b takes it, a wants 80 again and is refused. The router
// reboots. p1 (the old leader, still running during the overlap) remembers a
// holding 80, p2 remembers b holding it. A key the router lost is arbitrated
// again, not taken back from memory: when p1 serves a while p2 serves b, at
// most one of the two Ensures succeeds.
func TestOldAndNewLeaderNeverBothTakeBackAKeyTheRouterLost(t *testing.T) {
	ctx := context.Background()
	r := fake.NewRouter(fake.RouterConfig{})
	node := newNode("node-a", addrA)
	nodes := []*v1.Node{node}
	a := lbService("default", "a", withPorts(port("http", v1.ProtocolTCP, 80, 30080)))
	cluster := k8sfake.NewClientset(node, a)
	p1, p2 := twoProcesses(t, r, cluster)
	st, err := p1.EnsureLoadBalancer(ctx, testCluster, a, nodes)
	if err != nil {
		t.Fatal(err)
	}
	recordStatus(t, cluster, a, st)
	// p2 leads now: a moves to 8080, b takes 80, a wants 80 again (refused).
	a.Spec.Ports[0].Port = 8080
	updateSpec(t, cluster, a)
	if st, err = p2.EnsureLoadBalancer(ctx, testCluster, a, nodes); err != nil {
		t.Fatal(err)
	}
	recordStatus(t, cluster, a, st)
	b := lbService("default", "b", withPorts(port("http", v1.ProtocolTCP, 80, 30081)))
	createService(t, cluster, b)
	if st, err = p2.EnsureLoadBalancer(ctx, testCluster, b, nodes); err != nil {
		t.Fatal(err)
	}
	recordStatus(t, cluster, b, st)
	a.Spec.Ports[0].Port = 80
	updateSpec(t, cluster, a)
	if _, err := p2.EnsureLoadBalancer(ctx, testCluster, a, nodes); err == nil {
		t.Fatal("a wanting 80 while b holds it: want an error")
	}
	r.Reboot()
	var errB error
	fired := false
	r.Intercept(fake.RouterHooks{AddPortMapping: func(ctx context.Context, from netip.Addr, m igd.Mapping, next fake.AddFunc) (igd.Mapping, error) {
		if from == addrB && !fired { // p1 read TCP/80 free and is about to add
			fired = true
			_, errB = p2.EnsureLoadBalancer(ctx, testCluster, b, nodes)
		}
		return next(ctx, m)
	}})
	_, errA := p1.EnsureLoadBalancer(ctx, testCluster, a, nodes)
	if errA == nil && errB == nil {
		t.Errorf("after a reboot both a (old leader) and b (new leader) were served TCP/80; table %q", e2eTable(r))
	}
}

// a is older than b and wants TCP/81 when p1 lists the Services to serve b
// (TCP/80). Just before p1's add, a's port changes to 80 (an update, not a
// creation) and p2 serves a: p2's list shows b younger, so a would win
// there. At most one of the two Ensures succeeds, though both processes map
// to the one node (where the router lets the second add replace the first).
func TestUpdatedOlderServiceAndYoungerNeverBothTakeAKey(t *testing.T) {
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
