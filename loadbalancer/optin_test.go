package loadbalancer

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/fake/cluster"
	"github.com/ccmkit/ccmkit/igd"
)

// The default (Config.Services zero) exposes only Services that opt in. An
// un-annotated Service costs no router call, from the service controller's
// calls or from a pass, and gets one Normal event saying how to opt in.
func TestUnannotatedServiceIsNotExposed(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{ClusterName: testCluster}, fake.RouterConfig{})
	nodes := threeNodes()
	plain := lbService("default", "plain", unannotated, withPorts(port("http", v1.ProtocolTCP, 80, 30080)))
	w := staticWatch(t, nodes, []*v1.Service{plain})
	e.lb.bg.setPhase(phaseRunning, w) // the background work's event recorder
	e.calls()

	for i := range 2 {
		if _, err := e.ensure(t, plain, nodes); err != cloudprovider.ImplementedElsewhere { //nolint:errorlint // upstream compares with ==
			t.Fatalf("Ensure #%d = %v, want exactly ImplementedElsewhere", i+1, err)
		}
	}
	if err := e.lb.UpdateLoadBalancer(ctx, testCluster, plain, nodes); err != cloudprovider.ImplementedElsewhere { //nolint:errorlint
		t.Fatalf("Update = %v, want exactly ImplementedElsewhere", err)
	}
	if _, exists, err := e.lb.GetLoadBalancer(ctx, testCluster, plain); err != nil || exists {
		t.Fatalf("Get = %v, %v; want not existing", exists, err)
	}
	if err := e.lb.EnsureLoadBalancerDeleted(ctx, testCluster, plain); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if calls := e.router.Calls(); len(calls) != 0 {
		t.Errorf("router calls for an un-annotated Service: %v, want none", calls)
	}
	// A pass does its own work (external IP, listing) but nothing for it.
	e.lb.pass(ctx, w)
	for _, c := range e.router.Calls() {
		if c.Key.ExternalPort == 80 {
			t.Errorf("pass called the router at the Service's key: %v", c)
		}
	}
	if len(e.router.Mappings()) != 0 {
		t.Errorf("table = %q, want empty", e.table())
	}

	events := drain(w.recorder.(*record.FakeRecorder))
	if len(events) != 1 {
		t.Fatalf("events = %q, want exactly one", events)
	}
	for _, want := range []string{v1.EventTypeNormal, EventReasonOptInRequired, AnnotationLoadBalancerType + "=" + AnnotationValue, "services: all"} {
		if !strings.Contains(events[0], want) {
			t.Errorf("event %q does not say %q", events[0], want)
		}
	}

	// A new Service under the same name (a new UID) is told again.
	again := plain.DeepCopy()
	again.UID = "uid-plain-2"
	if _, err := e.ensure(t, again, nodes); err != cloudprovider.ImplementedElsewhere { //nolint:errorlint
		t.Fatalf("Ensure of the new Service = %v", err)
	}
	if events := drain(w.recorder.(*record.FakeRecorder)); len(events) != 1 {
		t.Errorf("events for the new Service = %q, want one", events)
	}
}

// Without background work there is no recorder: no event, and the first
// call after the work starts tells the Service.
func TestOptInEventWaitsForBackgroundWork(t *testing.T) {
	e := newEnv(t, Config{ClusterName: testCluster}, fake.RouterConfig{})
	nodes := threeNodes()
	plain := newService("default", "plain", unannotated)
	if _, err := e.ensure(t, plain, nodes); err != cloudprovider.ImplementedElsewhere { //nolint:errorlint
		t.Fatalf("Ensure = %v", err)
	}
	w := staticWatch(t, nodes, []*v1.Service{plain})
	e.lb.bg.setPhase(phaseRunning, w)
	e.lb.pass(context.Background(), w)
	if events := drain(w.recorder.(*record.FakeRecorder)); len(events) != 1 {
		t.Errorf("events = %q, want one from the pass", events)
	}
}

// A Service that opts out, served by an earlier process (its status records
// its ports), loses its mappings: its keys are read to find them.
func TestOptOutAfterRestartWithdraws(t *testing.T) {
	nodes := threeNodes()
	r := fake.NewRouter(fake.RouterConfig{})
	web := newService("default", "web", withPorts(port("http", v1.ProtocolTCP, 80, 30080)))
	old, err := New(Config{Client: r.Client(addrA)})
	if err != nil {
		t.Fatal(err)
	}
	st, err := old.EnsureLoadBalancer(context.Background(), testCluster, web, nodes)
	if err != nil {
		t.Fatal(err)
	}
	web.Status.LoadBalancer = *st
	unannotated(web)

	e := newEnv(t, Config{Client: r.Client(addrA)}, fake.RouterConfig{})
	if _, err := e.lb.EnsureLoadBalancer(context.Background(), testCluster, web, nodes); err != cloudprovider.ImplementedElsewhere { //nolint:errorlint
		t.Fatalf("Ensure after opt-out = %v, want exactly ImplementedElsewhere", err)
	}
	if ms := r.Mappings(); len(ms) != 0 {
		t.Errorf("mappings left after opt-out: %v", ms)
	}
	if c := r.Calls(); !hasCall(c, fake.MethodDeletePortMapping, igd.Key{Protocol: igd.TCP, ExternalPort: 80}) {
		t.Errorf("calls %v: want the delete of TCP/80", c)
	}
}

func hasCall(calls []fake.Call, method string, k igd.Key) bool {
	for _, c := range calls {
		if c.Method == method && c.Key == k {
			return true
		}
	}
	return false
}

// drain returns the events recorded so far.
func drain(r *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case ev := <-r.Events:
			out = append(out, ev)
		default:
			return out
		}
	}
}

// watches counts the watches made on client, by resource.
func watches(client *k8sfake.Clientset) map[string]int {
	out := map[string]int{}
	for _, a := range client.Actions() {
		if a.GetVerb() == "watch" {
			out[a.GetResource().Resource]++
		}
	}
	return out
}

// The load balancer watches through the CCM's informers when given them
// (cloudprovider.InformerUser): one watch per resource in the process. Run
// alone starts its own; given them late (the CCM calls SetInformers just
// after Initialize, which starts Run), it moves onto them.
func TestSharedInformers(t *testing.T) {
	resources := []string{"nodes", "services", "endpointslices"}
	for _, tt := range []struct {
		name string
		// shared: SetInformers before Run; late: after Run started.
		shared, late bool
	}{
		{name: "given before Run", shared: true},
		{name: "given after Run started", shared: true, late: true},
		{name: "none given"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, Config{ClusterName: testCluster, Services: AllServices}, fake.RouterConfig{})
			nodes := threeNodes()
			own := k8sfake.NewClientset(nodes[0], nodes[1], nodes[2], lbService("default", "web"))
			ccm := k8sfake.NewClientset(nodes[0], nodes[1], nodes[2], lbService("default", "web"))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var factory informers.SharedInformerFactory
			if tt.shared {
				factory = informers.NewSharedInformerFactory(ccm, 0)
				factory.Core().V1().Services().Informer() // the service controller's
				t.Cleanup(factory.Shutdown)               // after cancel, as the CCM does
			}
			if tt.shared && !tt.late {
				// As the CCM does: SetInformers, then Start.
				e.lb.SetInformers(factory)
				factory.Start(ctx.Done())
			}
			if err := e.lb.Initialize(ctx, cluster.ClientBuilder(own)); err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				e.lb.Run(ctx)
			}()
			if tt.late {
				eventually(t, "Run to start on its own informers", func() bool { return watches(own)["endpointslices"] == 1 })
				e.lb.SetInformers(factory)
				factory.Start(ctx.Done())
			}
			eventually(t, "the web Service served", func() bool { return len(e.router.Mappings()) == 1 })
			eventually(t, "the watches", func() bool {
				got := watches(ccm)
				if !tt.shared {
					got = watches(own)
				}
				return got["nodes"] == 1 && got["services"] == 1 && got["endpointslices"] == 1
			})
			ownWatches, ccmWatches := watches(own), watches(ccm)
			for _, res := range resources {
				switch {
				case !tt.shared && ownWatches[res] != 1:
					t.Errorf("own clientset: %d watches of %s, want 1", ownWatches[res], res)
				case tt.shared && ccmWatches[res] != 1:
					t.Errorf("CCM's clientset: %d watches of %s, want 1 (shared)", ccmWatches[res], res)
				case tt.shared && !tt.late && ownWatches[res] != 0:
					t.Errorf("own clientset: %d watches of %s, want none (informers given)", ownWatches[res], res)
				}
			}
			// The Service's status is patched through Initialize's client.
			eventually(t, "the status patched", func() bool {
				s, err := own.CoreV1().Services("default").Get(ctx, "web", metav1.GetOptions{})
				return err == nil && len(s.Status.LoadBalancer.Ingress) == 1
			})
			cancel()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Run did not return after its context was cancelled")
			}
		})
	}
}

// The service controller's node sync calls UpdateLoadBalancer with the
// Service as its cache last had it, which may be from before it opted in.
// Such a call withdraws nothing while the API server has the Service opted
// in: its mapping stays, and the background work goes on serving it (a
// withdrawal would keep passes off it until an Ensure that, with the
// Service unchanged since, never comes).
func TestStaleCallFromBeforeTheServiceOptedInWithdrawsNothing(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{ClusterName: testCluster}, fake.RouterConfig{})
	nodes := threeNodes()
	svc := lbService("default", "web")
	r := startBackground(t, e, nodes[0], nodes[1], nodes[2], svc)
	if got := len(e.router.Mappings()); got != 1 {
		t.Fatalf("table after the first pass = %q, want the Service's mapping", e.table())
	}

	stale := lbService("default", "web", unannotated)
	if err := e.lb.UpdateLoadBalancer(ctx, testCluster, stale, nodes); err != cloudprovider.ImplementedElsewhere { //nolint:errorlint // upstream compares with ==
		t.Errorf("Update with the Service as it was before it opted in = %v, want exactly ImplementedElsewhere", err)
	}
	if got := len(e.router.Mappings()); got != 1 {
		t.Errorf("table after a stale Update = %q, want the Service's mapping", e.table())
	}

	e.router.Reboot() // the mapping is lost: the next pass repairs it
	r.tick(t)
	if got := len(e.router.Mappings()); got != 1 {
		t.Errorf("table after the router lost the mapping and a pass = %q, want it repaired", e.table())
	}
}
