package loadbalancer

import (
	"context"
	"errors"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/cloud-provider/api"
	servicehelper "k8s.io/cloud-provider/service/helpers"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/fake/cluster"
	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/provider"
)

// eventually polls cond until it holds or 10 s pass (informers deliver
// asynchronously; this bounds a wait, it does not time anything).
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// lbService is a served Service as the service controller leaves it: with
// its cleanup finalizer.
func lbService(ns, name string, opts ...svcOpt) *v1.Service {
	s := newService(ns, name, opts...)
	s.Finalizers = []string{servicehelper.LoadBalancerCleanupFinalizer}
	return s
}

// running is a LoadBalancer whose background work runs on a fake clientset.
type running struct {
	*env
	client *k8sfake.Clientset
	cancel context.CancelFunc
	done   chan struct{}
}

// endpointNotReady makes svc's one endpoint, on node, not ready and waits
// until the running background work's cache shows svc with no ready
// endpoint.
func endpointNotReady(t testing.TB, e *env, r *running, svc *v1.Service, node string) {
	t.Helper()
	if _, err := r.client.DiscoveryV1().EndpointSlices(svc.Namespace).Update(context.Background(), endpointSlice(svc, node, false), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, svc.Name+"'s endpoint not ready in the cache", func() bool {
		got, err := e.lb.endpointNodes(svc)
		return err == nil && len(got) == 0
	})
}

// startBackground runs e's background work on a fake clientset holding
// objs, waits until its caches have synced, its first pass has finished and
// its ticker waits on the fake clock, and stops it at cleanup.
func startBackground(t testing.TB, e *env, objs ...k8sruntime.Object) *running {
	t.Helper()
	return startBackgroundOn(t, e, k8sfake.NewClientset(objs...))
}

// startBackgroundOn is startBackground on client (given reactors, say).
func startBackgroundOn(t testing.TB, e *env, client *k8sfake.Clientset) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{env: e, client: client, cancel: cancel, done: make(chan struct{})}
	before := e.lb.passes.Load()
	if err := e.lb.Initialize(ctx, cluster.ClientBuilder(client)); err != nil {
		t.Fatalf("Initialize: %v", err)
	}
	go func() {
		defer close(r.done)
		e.lb.Run(ctx)
	}()
	t.Cleanup(func() { r.stop(t) })
	eventually(t, "background work to start", func() bool {
		return e.lb.passes.Load() > before && e.clock.HasWaiters()
	})
	return r
}

func (r *running) stop(t testing.TB) {
	t.Helper()
	r.cancel()
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context was cancelled")
	}
}

// tick advances the fake clock by one renewal interval and waits for the
// pass it triggers.
func (r *running) tick(t testing.TB) {
	t.Helper()
	before := r.lb.passes.Load()
	r.clock.Step(r.lb.cfg.RenewInterval)
	eventually(t, "a background pass", func() bool { return r.lb.passes.Load() > before })
}

// probe advances the fake clock by one probe interval and waits for the probe
// it triggers.
func (r *running) probe(t testing.TB) {
	t.Helper()
	before := r.lb.probes.Load()
	r.clock.Step(r.lb.cfg.ProbeInterval)
	eventually(t, "a probe", func() bool { return r.lb.probes.Load() > before })
}

func (r *running) service(t testing.TB, ns, name string) *v1.Service {
	t.Helper()
	s, err := r.client.CoreV1().Services(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestBackgroundRepairsRouterReboot(t *testing.T) {
	e := newEnv(t, Config{Lease: time.Hour, RenewInterval: 5 * time.Minute}, fake.RouterConfig{})
	nodes := threeNodes()
	var objs []k8sruntime.Object
	for _, n := range nodes {
		objs = append(objs, n)
	}
	svcs := []*v1.Service{
		lbService("default", "web", withPorts(port("a", v1.ProtocolTCP, 80, 30080), port("b", v1.ProtocolTCP, 443, 30443))),
		lbService("default", "dns", withPorts(port("a", v1.ProtocolUDP, 53, 30053))),
	}
	for _, s := range svcs {
		e.mustEnsure(t, s, nodes)
		objs = append(objs, s)
	}
	before := e.table()
	// A Service without the finalizer is not the background work's to map.
	objs = append(objs, newService("default", "unclaimed", withPorts(port("a", v1.ProtocolTCP, 81, 30081))))
	r := startBackground(t, e, objs...)

	// The router loses its table: the next probe, one GetPortMapping,
	// notices and repairs at once, long before the next renewal pass.
	e.router.Reboot()
	e.calls()
	passes := e.lb.passes.Load()
	r.probe(t)
	eventually(t, "the repair pass", func() bool { return e.lb.passes.Load() > passes })
	diffRows(t, "table after repair", e.table(), before)
	// Probe: 1 get. Pass: 1 external IP per Service, the table listed once per
	// protocol (where to look), each Service's keys read again before
	// anything is written (web: TCP 80 and TCP 443, too far apart for one
	// range; dns: UDP), 3 adds.
	if c := e.calls(); c[fake.MethodGetPortMapping] != 1 || c[fake.MethodListPortMappings] != 5 || c[fake.MethodAddPortMapping] != 3 || c[fake.MethodExternalIP] != 2 || c[fake.MethodDeletePortMapping] != 0 {
		t.Errorf("probe and repair calls = %v, want 1 get, 1 external IP per Service, 5 lists, 3 adds", c)
	}
	// Nothing lost: a probe costs one call and starts no pass.
	passes = e.lb.passes.Load()
	for range 3 {
		r.probe(t)
		if c := e.calls(); len(c) != 1 || c[fake.MethodGetPortMapping] != 1 {
			t.Errorf("idle probe calls = %v, want 1 get", c)
		}
	}
	if n := e.lb.passes.Load(); n != passes {
		t.Errorf("%d passes after idle probes, want none", n-passes)
	}
}

func TestBackgroundRenewsLeases(t *testing.T) {
	e := newEnv(t, Config{Lease: 10 * time.Minute}, fake.RouterConfig{}) // renew every 5m
	nodes := threeNodes()
	svc := lbService("default", "web")
	e.mustEnsure(t, svc, nodes)
	r := startBackground(t, e, nodes[0], nodes[1], nodes[2], svc)
	// Six intervals: 30 minutes, three leases. The mapping never lapses.
	for range 6 {
		r.tick(t)
		if ms := e.router.Mappings(); len(ms) != 1 {
			t.Fatalf("mapping lapsed at %s: %v", e.clock.Now(), e.table())
		}
	}
	if n := e.router.CallCount(fake.MethodAddPortMapping); n < 3 {
		t.Errorf("%d adds in 30 minutes of 10-minute leases", n)
	}
}

func TestBackgroundFollowsExternalIP(t *testing.T) {
	e := newEnv(t, Config{}, fake.RouterConfig{})
	nodes := threeNodes()
	svc := lbService("default", "web")
	svc.Status.LoadBalancer = *e.mustEnsure(t, svc, nodes)
	r := startBackground(t, e, nodes[0], nodes[1], nodes[2], svc)

	newIP := netip.MustParseAddr("198.51.101.99")
	e.router.SetExternalIP(newIP)
	r.tick(t)
	eventually(t, "status patched with the new IP", func() bool {
		st := r.service(t, "default", "web").Status.LoadBalancer
		return len(st.Ingress) == 1 && st.Ingress[0].IP == newIP.String()
	})
	// Ensure now reports the new address too (the cache was refreshed).
	st := e.mustEnsure(t, r.service(t, "default", "web"), nodes)
	if st.Ingress[0].IP != newIP.String() {
		t.Errorf("Ensure status IP = %s, want %s", st.Ingress[0].IP, newIP)
	}

	// A non-public address: the Service gets a Warning event.
	cgnat := netip.MustParseAddr("100.64.7.7")
	e.router.SetExternalIP(cgnat)
	r.tick(t)
	eventually(t, "a Warning event", func() bool {
		evs, err := r.client.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false
		}
		for _, ev := range evs.Items {
			if ev.Reason == EventReasonExternalIPNotPublic && ev.Type == v1.EventTypeWarning && ev.InvolvedObject.Name == "web" {
				return true
			}
		}
		return false
	})
}

func TestBackgroundRepointsWhenNodeTurnsNotReady(t *testing.T) {
	e := newEnv(t, Config{}, fake.RouterConfig{})
	nodes := threeNodes()
	svc := lbService("default", "web", withPorts(port("a", v1.ProtocolTCP, 80, 30080)))
	e.mustEnsure(t, svc, nodes)
	r := startBackground(t, e, nodes[0], nodes[1], nodes[2], svc)
	from := e.router.Mappings()[0].InternalClient
	var name string
	for _, n := range nodes {
		if n.Status.Addresses[1].Address == from.String() {
			name = n.Name
		}
	}
	n, err := r.client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	notReady(n)
	if _, err := r.client.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// No clock step and no controller call: the node event triggers a pass.
	eventually(t, "the mapping to leave "+name, func() bool {
		ms := e.router.Mappings()
		return len(ms) == 1 && ms[0].InternalClient != from
	})
}

func endpointSlice(svc *v1.Service, node string, ready bool) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: svc.Namespace, Name: svc.Name + "-abc",
			Labels: map[string]string{discoveryv1.LabelServiceName: svc.Name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{"10.244.0.5"},
			NodeName:   &node,
			Conditions: discoveryv1.EndpointConditions{Ready: &ready},
		}},
	}
}

func TestExternalTrafficPolicyLocal(t *testing.T) {
	t.Run("without background work", func(t *testing.T) {
		e := newEnv(t, Config{}, fake.RouterConfig{})
		svc := newService("default", "web", func(s *v1.Service) { s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal })
		_, err := e.ensure(t, svc, threeNodes())
		var se *ServiceError
		if !errors.As(err, &se) || se.Field != "spec.externalTrafficPolicy" {
			t.Fatalf("error = %v, want a ServiceError on spec.externalTrafficPolicy", err)
		}
	})
	t.Run("follows the ready endpoints", func(t *testing.T) {
		e := newEnv(t, Config{}, fake.RouterConfig{})
		nodes := threeNodes()
		svc := lbService("default", "web", func(s *v1.Service) { s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal })
		es := endpointSlice(svc, "node-b", true)
		r := startBackground(t, e, nodes[0], nodes[1], nodes[2], svc, es)

		e.mustEnsure(t, svc, nodes)
		if ms := e.router.Mappings(); len(ms) != 1 || ms[0].InternalClient != addrB {
			t.Fatalf("table = %v, want the mapping on node-b (its endpoint)", e.table())
		}
		// The endpoint moves to node-c: re-pointed by the background work.
		moved := endpointSlice(svc, "node-c", true)
		if _, err := r.client.DiscoveryV1().EndpointSlices("default").Update(context.Background(), moved, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "re-point to node-c", func() bool {
			ms := e.router.Mappings()
			return len(ms) == 1 && ms[0].InternalClient == addrC
		})
		// No ready endpoint: say so, and ask to come back.
		endpointNotReady(t, e, r, svc, "node-c")
		_, err := e.ensure(t, svc, nodes)
		var re *api.RetryError
		if !errors.Is(err, ErrNoEligibleNode) || !errors.As(err, &re) {
			t.Fatalf("error = %v, want ErrNoEligibleNode with a retry", err)
		}
		if want := "node node-c has no ready endpoint"; !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	})
}

func TestBackgroundStopsEveryGoroutine(t *testing.T) {
	base := runtime.NumGoroutine()
	e := newEnv(t, Config{}, fake.RouterConfig{})
	nodes := threeNodes()
	svc := lbService("default", "web")
	e.mustEnsure(t, svc, nodes)
	r := startBackground(t, e, nodes[0], svc)
	if runtime.NumGoroutine() <= base {
		t.Fatalf("no goroutine started")
	}
	r.stop(t)
	eventually(t, "goroutines to exit", func() bool { return runtime.NumGoroutine() <= base })
	// A second Run returns at once: background work runs once per LoadBalancer.
	e.lb.Run(context.Background())
	// After the background work stopped, calls do not wait for its caches.
	if err := e.lb.EnsureLoadBalancerDeleted(context.Background(), testCluster, svc); err != nil {
		t.Errorf("Delete after stop: %v", err)
	}
}

// Through provider.Cloud, as a cloud-controller-manager runs it: Initialize
// with a client builder and a stop channel; closing stop ends every goroutine.
func TestProviderStartsAndStopsBackgroundWork(t *testing.T) {
	base := runtime.NumGoroutine()
	e := newEnv(t, Config{ClusterName: testCluster}, fake.RouterConfig{})
	nodes := threeNodes()
	svc := lbService("default", "web")
	client := k8sfake.NewClientset(nodes[0], nodes[1], nodes[2], svc)
	cloud, err := provider.New("edge", provider.Config{LoadBalancer: e.lb})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	cloud.Initialize(cluster.ClientBuilder(client), stop)
	// With ClusterName configured, the first pass maps the Service before
	// any controller call.
	eventually(t, "the first pass", func() bool { return len(e.router.Mappings()) == 1 })
	close(stop)
	select {
	case <-cloud.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("background work did not stop")
	}
	if err := cloud.Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "goroutines to exit", func() bool { return runtime.NumGoroutine() <= base })
}

var (
	_ provider.Initializer = (*LoadBalancer)(nil)
	_ provider.Runner      = (*LoadBalancer)(nil)
)

func TestDeleteWaitsForNodeCache(t *testing.T) {
	e := newEnv(t, Config{}, fake.RouterConfig{})
	e.lb.bg.client, e.lb.bg.phase = k8sfake.NewClientset(), phaseInitialized // caches not yet synced
	err := e.lb.EnsureLoadBalancerDeleted(context.Background(), testCluster, newService("default", "web"))
	var re *api.RetryError
	if !errors.As(err, &re) {
		t.Fatalf("Delete before the node cache synced = %v, want an api.RetryError", err)
	}
	if _, _, err := e.lb.GetLoadBalancer(context.Background(), testCluster, newService("default", "web")); !errors.As(err, &re) {
		t.Fatalf("Get before the node cache synced = %v, want an api.RetryError", err)
	}
}

// The background work maps only Services the service controller has taken
// on (cleanup finalizer), that want a load balancer from us and are not
// being deleted.
func TestBackgroundServesOnlyItsServices(t *testing.T) {
	e := newEnv(t, Config{ClusterName: testCluster, Services: AnnotatedServices}, fake.RouterConfig{})
	nodes := threeNodes()
	opt := withAnnotation(AnnotationLoadBalancerType, AnnotationValue)
	p := func(n int32) svcOpt { return withPorts(port("p", v1.ProtocolTCP, n, 30000+n)) }
	class := "example.com/other"
	now := metav1.Now()
	objs := []k8sruntime.Object{nodes[0], nodes[1], nodes[2],
		lbService("default", "served", opt, p(81)),
		lbService("default", "not-annotated", unannotated, p(82)),
		newService("default", "no-finalizer", opt, p(83)),
		lbService("default", "cluster-ip", opt, p(84), func(s *v1.Service) { s.Spec.Type = v1.ServiceTypeClusterIP }),
		lbService("default", "other-class", opt, p(85), func(s *v1.Service) { s.Spec.LoadBalancerClass = &class }),
		lbService("default", "deleting", opt, p(86), func(s *v1.Service) { s.DeletionTimestamp = &now }),
	}
	startBackground(t, e, objs...)
	ms := e.router.Mappings()
	if len(ms) != 1 || ms[0].ExternalPort != 81 {
		t.Fatalf("table = %v, want only default/served (TCP/81)", e.table())
	}
}

// TestPassLeavesDeletedServicesAlone: a background pass works from a list of
// Services taken before a Delete (or from an informer that lags the service
// controller's). It must not serve a Service deleted since, or the mappings
// it adds would outlive the Service; an Ensure of the Service, or a new
// Service of the same name, is served again.
func TestPassLeavesDeletedServicesAlone(t *testing.T) {
	ctx := context.Background()
	nodes := threeNodes()
	for _, tt := range []struct {
		name string
		// after runs after the Delete and before the pass; it returns the
		// Services the pass lists and whether the pass must serve web.
		after func(t *testing.T, e *env, web *v1.Service) ([]*v1.Service, bool)
	}{
		{
			name: "deleted",
			after: func(_ *testing.T, _ *env, web *v1.Service) ([]*v1.Service, bool) {
				return []*v1.Service{web}, false
			},
		},
		{
			name: "deleted, then ensured again (type changed back)",
			after: func(t *testing.T, e *env, web *v1.Service) ([]*v1.Service, bool) {
				e.mustEnsure(t, web, nodes)
				return []*v1.Service{web}, true
			},
		},
		{
			name: "deleted and created again under the same name",
			after: func(t *testing.T, e *env, web *v1.Service) ([]*v1.Service, bool) {
				again := web.DeepCopy()
				again.UID = "uid-web-2"
				e.mustEnsure(t, again, nodes)
				// The pass's list may hold either object.
				return []*v1.Service{again}, true
			},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, Config{}, fake.RouterConfig{})
			web := lbService("default", "web", withPorts(port("http", v1.ProtocolTCP, 80, 30080)))
			e.mustEnsure(t, web, nodes)
			if err := e.lb.EnsureLoadBalancerDeleted(ctx, testCluster, web); err != nil {
				t.Fatal(err)
			}
			listed, serve := tt.after(t, e, web)
			// The router lost its table: a pass that serves web re-adds it.
			e.router.Reboot()
			e.calls()
			e.lb.pass(ctx, staticWatch(t, nodes, listed))
			adds := e.calls()[fake.MethodAddPortMapping]
			if serve && adds != 1 {
				t.Errorf("pass made %d adds, want 1 (the Service is served)", adds)
			}
			if !serve && (adds != 0 || len(e.table()) != 0) {
				t.Errorf("pass made %d adds, table %q; want none for a deleted Service", adds, e.table())
			}
		})
	}
}

// Another process of the cluster (a fail-over overlap) moves the Service's
// mapping to another node. This process's probe sees the change; its repair
// reads the Service's mapping on an eligible node, up to date, and writes
// nothing. What that read found is what the next probe expects: it finds
// nothing changed, rather than misfiring (and serving every Service again)
// on every probe for as long as the process runs.
func TestProbeDoesNotMisfireOnAMappingAReadFoundUpToDate(t *testing.T) {
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

// The WAN goes down (the router answers 0.0.0.0) while a pass serves
// default/a; the pass then serves default/b from scratch. b's status is not
// patched with the address the pass read before: a pass reports only the
// address the router still reports, as an Ensure of b at that moment would
// (ErrExternalIPNotUsable).
func TestPassNeverPatchesAnAddressTheRouterNoLongerReports(t *testing.T) {
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

// Run called before Initialize returns at once. An Initialize after it
// leaves no background work that will ever run, and
// EnsureLoadBalancerDeleted does not wait for any: it deletes, rather than
// returning an api.RetryError for ever (the Service's finalizer never
// removed).
func TestInitializeAfterRunDoesNotBlockDeletesForever(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{}, fake.RouterConfig{})
	e.lb.Run(ctx) // before Initialize: logs and returns
	if err := e.lb.Initialize(ctx, cluster.ClientBuilder(k8sfake.NewClientset())); err != nil {
		t.Fatal(err)
	}
	svc := newService("default", "web", withPorts(port("http", v1.ProtocolTCP, 80, 30080)))
	svc.Status.LoadBalancer = *e.mustEnsure(t, svc, threeNodes())
	if err := e.lb.EnsureLoadBalancerDeleted(ctx, testCluster, svc); err != nil {
		t.Errorf("EnsureLoadBalancerDeleted with no background work that will ever run: %v", err)
	}
}
