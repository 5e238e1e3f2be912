package lbclass

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/api"
	"k8s.io/utils/ptr"

	"github.com/ccmkit/ccmkit/fake"
)

const (
	testClass  = "example.com/router"
	otherClass = "example.com/other"
	ingressIP  = "203.0.113.7"
)

// waitBound bounds the waits for the informers to see a write: a failure
// to converge, never a speed check.
const waitBound = 30 * time.Second

type svcOpt func(*v1.Service)

func svc(name string, opts ...svcOpt) *v1.Service {
	s := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)},
		Spec: v1.ServiceSpec{
			Type:  v1.ServiceTypeLoadBalancer,
			Ports: []v1.ServicePort{{Name: "http", Protocol: v1.ProtocolTCP, Port: 80, NodePort: 30080}},
		},
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

func class(c string) svcOpt { return func(s *v1.Service) { s.Spec.LoadBalancerClass = ptr.To(c) } }
func finalizers(f ...string) svcOpt {
	return func(s *v1.Service) { s.Finalizers = append(s.Finalizers, f...) }
}
func clusterIP() svcOpt {
	return func(s *v1.Service) { s.Spec.Type = v1.ServiceTypeClusterIP; s.Spec.LoadBalancerClass = nil }
}
func deleting() svcOpt {
	return func(s *v1.Service) { s.DeletionTimestamp = ptr.To(metav1.Now()) }
}
func status(ip string) svcOpt {
	return func(s *v1.Service) {
		s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: ip}}
	}
}

func node(name string, labels ...string) *v1.Node {
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
	for i := 0; i+1 < len(labels); i += 2 {
		n.Labels[labels[i]] = labels[i+1]
	}
	return n
}

// env is a controller on a fake clientset whose informers have synced.
type env struct {
	c      *Controller
	client *k8sfake.Clientset
	lb     *fake.LoadBalancer
	events *record.FakeRecorder
}

func newEnv(t *testing.T, mod func(*Config), objs ...runtime.Object) *env {
	t.Helper()
	client := k8sfake.NewClientset(objs...)
	factory := informers.NewSharedInformerFactory(client, 0)
	lb := fake.NewLoadBalancer(netip.MustParseAddr(ingressIP))
	cfg := Config{Class: testClass, LoadBalancer: lb, Client: client, Informers: factory}
	if mod != nil {
		mod(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	rec := record.NewFakeRecorder(100)
	c.recorder = rec
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop); factory.Shutdown() })
	factory.Start(stop)
	for typ, ok := range factory.WaitForCacheSync(stop) {
		if !ok {
			t.Fatalf("informer %v did not sync", typ)
		}
	}
	return &env{c: c, client: client, lb: lb, events: rec}
}

// get reads a Service from the clientset.
func (e *env) get(t *testing.T, name string) *v1.Service {
	t.Helper()
	s, err := e.client.CoreV1().Services("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get service %s: %v", name, err)
	}
	return s
}

// drain returns the events recorded so far as "Type Reason".
func (e *env) drain() []string {
	var out []string
	for {
		select {
		case ev := <-e.events.Events:
			f := strings.Fields(ev)
			out = append(out, f[0]+" "+f[1])
		default:
			return out
		}
	}
}

// waitCache waits until the controller's Service cache satisfies ok.
func (e *env) waitCache(t *testing.T, name string, ok func(*v1.Service, bool) bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, waitBound, true, func(context.Context) (bool, error) {
		s, err := e.c.services.Services("default").Get(name)
		return ok(s, err == nil), nil
	})
	if err != nil {
		t.Fatalf("the cache never showed the wanted state of Service %s: %v", name, err)
	}
}

// update writes s and waits for the cache to see it.
func (e *env) update(t *testing.T, s *v1.Service) {
	t.Helper()
	got, err := e.client.CoreV1().Services(s.Namespace).Update(context.Background(), s, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("update service %s: %v", s.Name, err)
	}
	e.waitCache(t, s.Name, func(c *v1.Service, ok bool) bool { return ok && sameService(c, got) })
}

// sameService reports whether a and b are the same version of a Service:
// the fake clientset keeps no resourceVersion to compare.
func sameService(a, b *v1.Service) bool {
	return a.UID == b.UID && apiequality.Semantic.DeepEqual(a.Finalizers, b.Finalizers) && apiequality.Semantic.DeepEqual(a.Annotations, b.Annotations) &&
		apiequality.Semantic.DeepEqual(a.Spec, b.Spec) && apiequality.Semantic.DeepEqual(a.Status, b.Status) &&
		apiequality.Semantic.DeepEqual(a.DeletionTimestamp, b.DeletionTimestamp)
}

// syncSettled syncs name and waits for the cache to show the writes.
func (e *env) syncSettled(t *testing.T, name string) error {
	t.Helper()
	err := e.c.sync(context.Background(), "default/"+name)
	live, gerr := e.client.CoreV1().Services("default").Get(context.Background(), name, metav1.GetOptions{})
	e.waitCache(t, name, func(c *v1.Service, ok bool) bool {
		if gerr != nil {
			return !ok
		}
		return ok && sameService(c, live)
	})
	return err
}

func TestSync(t *testing.T) {
	retry := api.NewRetryError("router busy", time.Hour)
	boom := errors.New("router unreachable")
	type want struct {
		methods    []string
		events     []string
		finalizers []string
		ingress    string
		lbExists   bool
		err        func(error) bool
	}
	noErr := func(err error) bool { return err == nil }
	tests := []struct {
		name      string
		classless bool
		svc       *v1.Service
		lbBefore  bool // the fake has a load balancer for the Service
		hooks     fake.LoadBalancerHooks
		want      want
	}{{
		name: "classed Service is served: finalizer, ensure, status",
		svc:  svc("a", class(testClass)),
		want: want{methods: []string{"EnsureLoadBalancer"}, events: []string{"Normal EnsuringLoadBalancer", "Normal EnsuredLoadBalancer"},
			finalizers: []string{testClass}, ingress: ingressIP, lbExists: true, err: noErr},
	}, {
		name: "another class is left alone",
		svc:  svc("a", class(otherClass)),
		want: want{err: noErr},
	}, {
		name: "classless is left alone by default",
		svc:  svc("a"),
		want: want{err: noErr},
	}, {
		name:      "classless is served when asked",
		classless: true,
		svc:       svc("a"),
		want: want{methods: []string{"EnsureLoadBalancer"}, events: []string{"Normal EnsuringLoadBalancer", "Normal EnsuredLoadBalancer"},
			finalizers: []string{testClass}, ingress: ingressIP, lbExists: true, err: noErr},
	}, {
		name:      "classless with classless on still leaves another class alone",
		classless: true,
		svc:       svc("a", class(otherClass)),
		want:      want{err: noErr},
	}, {
		name: "RetryError: requeued, finalizer kept, no Warning",
		svc:  svc("a", class(testClass)),
		hooks: fake.LoadBalancerHooks{EnsureLoadBalancer: func(context.Context, string, *v1.Service, []*v1.Node, fake.EnsureLoadBalancerFunc) (*v1.LoadBalancerStatus, error) {
			return nil, retry
		}},
		want: want{methods: []string{"EnsureLoadBalancer"}, events: []string{"Normal EnsuringLoadBalancer"}, finalizers: []string{testClass},
			err: func(err error) bool {
				var re *api.RetryError
				return errors.As(err, &re) && re.RetryAfter() == time.Hour
			}},
	}, {
		name: "ImplementedElsewhere: no status, no error",
		svc:  svc("a", class(testClass)),
		hooks: fake.LoadBalancerHooks{EnsureLoadBalancer: func(context.Context, string, *v1.Service, []*v1.Node, fake.EnsureLoadBalancerFunc) (*v1.LoadBalancerStatus, error) {
			return nil, cloudprovider.ImplementedElsewhere
		}},
		want: want{methods: []string{"EnsureLoadBalancer"}, events: []string{"Normal EnsuringLoadBalancer"}, finalizers: []string{testClass}, err: noErr},
	}, {
		name: "Ensure fails: Warning, error",
		svc:  svc("a", class(testClass)),
		hooks: fake.LoadBalancerHooks{EnsureLoadBalancer: func(context.Context, string, *v1.Service, []*v1.Node, fake.EnsureLoadBalancerFunc) (*v1.LoadBalancerStatus, error) {
			return nil, boom
		}},
		want: want{methods: []string{"EnsureLoadBalancer"}, events: []string{"Normal EnsuringLoadBalancer", "Warning SyncLoadBalancerFailed"},
			finalizers: []string{testClass}, err: func(err error) bool { return errors.Is(err, boom) }},
	}, {
		name:     "deleted: load balancer deleted, then finalizer removed",
		svc:      svc("a", class(testClass), finalizers(testClass, "other/keep"), deleting(), status(ingressIP)),
		lbBefore: true,
		want: want{methods: []string{"GetLoadBalancer", "EnsureLoadBalancerDeleted"}, events: []string{"Normal DeletingLoadBalancer", "Normal DeletedLoadBalancer"},
			finalizers: []string{"other/keep"}, err: noErr},
	}, {
		name:     "delete fails: finalizer kept",
		svc:      svc("a", class(testClass), finalizers(testClass), deleting(), status(ingressIP)),
		lbBefore: true,
		hooks: fake.LoadBalancerHooks{EnsureLoadBalancerDeleted: func(context.Context, string, *v1.Service, fake.EnsureLoadBalancerDeletedFunc) error {
			return boom
		}},
		want: want{methods: []string{"GetLoadBalancer", "EnsureLoadBalancerDeleted"}, events: []string{"Normal DeletingLoadBalancer", "Warning SyncLoadBalancerFailed"},
			finalizers: []string{testClass}, ingress: ingressIP, lbExists: true, err: func(err error) bool { return errors.Is(err, boom) }},
	}, {
		name:     "delete ImplementedElsewhere: finalizer removed",
		svc:      svc("a", class(testClass), finalizers(testClass), deleting()),
		lbBefore: true,
		hooks: fake.LoadBalancerHooks{EnsureLoadBalancerDeleted: func(context.Context, string, *v1.Service, fake.EnsureLoadBalancerDeletedFunc) error {
			return cloudprovider.ImplementedElsewhere
		}},
		want: want{methods: []string{"GetLoadBalancer", "EnsureLoadBalancerDeleted"}, events: []string{"Normal DeletingLoadBalancer", "Normal DeletedLoadBalancer"},
			lbExists: true, err: noErr},
	}, {
		name:     "switched to ClusterIP (class cleared): cleaned up, status cleared",
		svc:      svc("a", clusterIP(), finalizers(testClass), status(ingressIP)),
		lbBefore: true,
		want: want{methods: []string{"GetLoadBalancer", "EnsureLoadBalancerDeleted"}, events: []string{"Normal DeletingLoadBalancer", "Normal DeletedLoadBalancer"},
			err: noErr},
	}, {
		name:     "handed over (LoadBalancer again under another class): cleaned up, the new owner's status and finalizer kept",
		svc:      svc("a", class(otherClass), finalizers(testClass, "example.com/other"), status("198.51.100.1")),
		lbBefore: true,
		want: want{methods: []string{"GetLoadBalancer", "EnsureLoadBalancerDeleted"}, events: []string{"Normal DeletingLoadBalancer", "Normal DeletedLoadBalancer"},
			finalizers: []string{"example.com/other"}, ingress: "198.51.100.1", err: noErr},
	}, {
		name:     "handed over to upstream (classless, not served here)",
		svc:      svc("a", finalizers(testClass, upstreamFinalizer)),
		lbBefore: true,
		want: want{methods: []string{"GetLoadBalancer", "EnsureLoadBalancerDeleted"}, events: []string{"Normal DeletingLoadBalancer", "Normal DeletedLoadBalancer"},
			finalizers: []string{upstreamFinalizer}, err: noErr},
	}, {
		name: "upstream's finalizer alone is not ours",
		svc:  svc("a", clusterIP(), finalizers(upstreamFinalizer), status(ingressIP)),
		want: want{finalizers: []string{upstreamFinalizer}, ingress: ingressIP, err: noErr},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, func(c *Config) { c.Classless = tc.classless }, tc.svc, node("n1"))
			if tc.lbBefore {
				if _, err := e.lb.EnsureLoadBalancer(context.Background(), "kubernetes", tc.svc, nil); err != nil {
					t.Fatal(err)
				}
			}
			e.lb.Intercept(tc.hooks)
			skip := len(e.lb.Calls())
			err := e.syncSettled(t, "a")
			if !tc.want.err(err) {
				t.Errorf("sync error = %v", err)
			}
			var methods []string
			for _, c := range e.lb.Calls()[skip:] {
				methods = append(methods, c.Method)
			}
			got := e.get(t, "a")
			var ingress string
			if len(got.Status.LoadBalancer.Ingress) > 0 {
				ingress = got.Status.LoadBalancer.Ingress[0].IP
			}
			_, exists := e.lb.Status(types.NamespacedName{Namespace: "default", Name: "a"})
			// The fake clientset keeps the empty list a patch leaves; the
			// API server's reads omit it.
			if len(got.Finalizers) == 0 {
				got.Finalizers = nil
			}
			type result struct {
				Methods, Events, Finalizers []string
				Ingress                     string
				LBExists                    bool
			}
			if diff := cmp.Diff(result{tc.want.methods, tc.want.events, tc.want.finalizers, tc.want.ingress, tc.want.lbExists},
				result{methods, e.drain(), got.Finalizers, ingress, exists}); diff != "" {
				t.Errorf("after sync (-want +got):\n%s", diff)
			}
		})
	}
}

// TestNodes: UpdateLoadBalancer gets the stable node set when it changes,
// and nothing is called when it does not.
func TestNodes(t *testing.T) {
	e := newEnv(t, nil, svc("a", class(testClass)), node("n1"), node("n2", v1.LabelNodeExcludeBalancers, "true"))
	if err := e.syncSettled(t, "a"); err != nil {
		t.Fatal(err)
	}
	calls := e.lb.Calls()
	if diff := cmp.Diff([]string{"n1"}, calls[len(calls)-1].Nodes); diff != "" {
		t.Errorf("Ensure's nodes (-want +got):\n%s", diff)
	}
	e.drain()

	steps := []struct {
		name   string
		change func(t *testing.T)
		want   []string // UpdateLoadBalancer's nodes; nil = no call
	}{
		{"nothing changed", func(*testing.T) {}, nil},
		{"a node added", func(t *testing.T) { e.addNode(t, node("n3")) }, []string{"n1", "n3"}},
		{"excluded node included", func(t *testing.T) { e.updateNode(t, node("n2", v1.LabelNodeExcludeBalancers, "false")) }, []string{"n1", "n2", "n3"}},
		{"node tainted for deletion", func(t *testing.T) {
			n := node("n1")
			n.Spec.Taints = []v1.Taint{{Key: toBeDeletedTaint, Effect: v1.TaintEffectNoSchedule}}
			e.updateNode(t, n)
		}, []string{"n2", "n3"}},
		{"unparsable exclude label excludes", func(t *testing.T) { e.updateNode(t, node("n3", v1.LabelNodeExcludeBalancers, "maybe")) }, []string{"n2"}},
	}
	for _, st := range steps {
		skip := len(e.lb.Calls())
		st.change(t)
		if err := e.syncSettled(t, "a"); err != nil {
			t.Fatalf("%s: sync: %v", st.name, err)
		}
		var got []string
		n := 0
		for _, c := range e.lb.Calls()[skip:] {
			if c.Method == fake.MethodEnsureLoadBalancer {
				t.Errorf("%s: EnsureLoadBalancer called for a node change", st.name)
			}
			if c.Method == fake.MethodUpdateLoadBalancer {
				n++
				got = slices.Sorted(slices.Values(c.Nodes))
			}
		}
		if diff := cmp.Diff(st.want, got); diff != "" {
			t.Errorf("%s: UpdateLoadBalancer's nodes (-want +got):\n%s", st.name, diff)
		}
		if n > 1 {
			t.Errorf("%s: %d UpdateLoadBalancer calls, want at most 1", st.name, n)
		}
	}
	if diff := cmp.Diff([]string{"Normal UpdatedLoadBalancer", "Normal UpdatedLoadBalancer", "Normal UpdatedLoadBalancer", "Normal UpdatedLoadBalancer"}, e.drain()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}

	// A spec change ensures again, with the current nodes.
	s := e.get(t, "a")
	s.Spec.Ports[0].Port = 8080
	e.update(t, s)
	skip := len(e.lb.Calls())
	if err := e.syncSettled(t, "a"); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"EnsureLoadBalancer"}, methodsOf(e.lb.Calls()[skip:])); diff != "" {
		t.Errorf("after a port change (-want +got):\n%s", diff)
	}
}

func methodsOf(calls []fake.LoadBalancerCall) []string {
	var out []string
	for _, c := range calls {
		out = append(out, c.Method)
	}
	return out
}

func (e *env) addNode(t *testing.T, n *v1.Node) {
	t.Helper()
	got, err := e.client.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.waitNode(t, got)
}

func (e *env) updateNode(t *testing.T, n *v1.Node) {
	t.Helper()
	got, err := e.client.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.waitNode(t, got)
}

func (e *env) waitNode(t *testing.T, want *v1.Node) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, waitBound, true, func(context.Context) (bool, error) {
		n, err := e.c.nodes.Get(want.Name)
		return err == nil && apiequality.Semantic.DeepEqual(n.Labels, want.Labels) && apiequality.Semantic.DeepEqual(n.Spec, want.Spec), nil
	})
	if err != nil {
		t.Fatalf("node %s never reached the cache: %v", want.Name, err)
	}
}

// TestUpdateFailureEnsuresAgain: a failed UpdateLoadBalancer on a load
// balancer that exists is reported, and the retry ensures.
func TestUpdateFailureEnsuresAgain(t *testing.T) {
	e := newEnv(t, nil, svc("a", class(testClass)), node("n1"))
	if err := e.syncSettled(t, "a"); err != nil {
		t.Fatal(err)
	}
	e.drain()
	boom := errors.New("router unreachable")
	e.lb.Intercept(fake.LoadBalancerHooks{UpdateLoadBalancer: func(context.Context, string, *v1.Service, []*v1.Node, fake.UpdateLoadBalancerFunc) error {
		return boom
	}})
	e.addNode(t, node("n2"))
	if err := e.syncSettled(t, "a"); !errors.Is(err, boom) {
		t.Fatalf("sync after a node change = %v, want %v", err, boom)
	}
	e.lb.ClearHooks()
	skip := len(e.lb.Calls())
	if err := e.syncSettled(t, "a"); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"EnsureLoadBalancer"}, methodsOf(e.lb.Calls()[skip:])); diff != "" {
		t.Errorf("retry (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"Warning UpdateLoadBalancerFailed", "Normal EnsuringLoadBalancer", "Normal EnsuredLoadBalancer"}, e.drain()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// TestHandOver walks one Service from this class through ClusterIP to
// another class and to classless: each time it is cleaned up here first,
// and then never touched again.
func TestHandOver(t *testing.T) {
	for _, next := range []struct {
		name  string
		class *string
	}{{"another class", ptr.To(otherClass)}, {"classless", nil}} {
		t.Run(next.name, func(t *testing.T) {
			e := newEnv(t, nil, svc("a", class(testClass)), node("n1"))
			if err := e.syncSettled(t, "a"); err != nil {
				t.Fatal(err)
			}
			// ClusterIP: the API server clears the class.
			s := e.get(t, "a")
			s.Spec.Type, s.Spec.LoadBalancerClass = v1.ServiceTypeClusterIP, nil
			e.update(t, s)
			if err := e.syncSettled(t, "a"); err != nil {
				t.Fatal(err)
			}
			got := e.get(t, "a")
			if slices.Contains(got.Finalizers, testClass) || len(got.Status.LoadBalancer.Ingress) != 0 || len(e.lb.Services()) != 0 {
				t.Fatalf("after ClusterIP: finalizers %v, status %v, load balancers %v; want all empty", got.Finalizers, got.Status.LoadBalancer, e.lb.Services())
			}
			// Back to LoadBalancer under the next owner, which writes
			// its status.
			got.Spec.Type, got.Spec.LoadBalancerClass = v1.ServiceTypeLoadBalancer, next.class
			got.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "198.51.100.1"}}
			e.update(t, got)
			skip := len(e.lb.Calls())
			if err := e.syncSettled(t, "a"); err != nil {
				t.Fatal(err)
			}
			if calls := e.lb.Calls()[skip:]; len(calls) != 0 {
				t.Errorf("calls after the hand-over: %v", methodsOf(calls))
			}
			after := e.get(t, "a")
			if slices.Contains(after.Finalizers, testClass) || after.Status.LoadBalancer.Ingress[0].IP != "198.51.100.1" {
				t.Errorf("after the hand-over: finalizers %v, status %v", after.Finalizers, after.Status.LoadBalancer)
			}
		})
	}
}

// TestDeletedWithoutFinalizer: a Service whose finalizer someone removed
// and which is then deleted is still cleaned up from memory.
func TestDeletedWithoutFinalizer(t *testing.T) {
	e := newEnv(t, nil, svc("a", class(testClass)), node("n1"))
	if err := e.syncSettled(t, "a"); err != nil {
		t.Fatal(err)
	}
	if err := e.client.CoreV1().Services("default").Delete(context.Background(), "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitCache(t, "a", func(_ *v1.Service, ok bool) bool { return !ok })
	if err := e.c.sync(context.Background(), "default/a"); err != nil {
		t.Fatal(err)
	}
	if got := e.lb.Services(); len(got) != 0 {
		t.Errorf("load balancers after the delete: %v", got)
	}
	if e.c.lookup("default/a") != nil {
		t.Error("the Service is still remembered after its clean-up")
	}
}

// TestStaleCacheKeepsOthersFinalizers: a sync from a cache behind the API
// server removes this controller's finalizer only. The cache still shows
// the Service as the clean-up after its switch to ClusterIP left it between
// its two writes (status cleared, finalizer not yet removed), while on the
// API server it is this controller's no more but another class's, whose
// finalizer the cache does not show yet: that finalizer, and the status,
// stay.
func TestStaleCacheKeepsOthersFinalizers(t *testing.T) {
	// The informers read one clientset (the cache), the controller writes
	// another (the API server).
	server := k8sfake.NewClientset(svc("a", class(otherClass), finalizers(otherClass), status("198.51.100.1")), node("n1"))
	e := newEnv(t, func(c *Config) { c.Client = server }, svc("a", clusterIP(), finalizers(testClass)), node("n1"))
	if err := e.c.sync(context.Background(), "default/a"); err != nil {
		t.Fatal(err)
	}
	got, err := server.CoreV1().Services("default").Get(context.Background(), "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Finalizers, []string{otherClass}) || len(got.Status.LoadBalancer.Ingress) != 1 || got.Status.LoadBalancer.Ingress[0].IP != "198.51.100.1" {
		t.Errorf("after a sync from the stale cache: finalizers %v, status %v; want [%s] and the other class's status", got.Finalizers, got.Status.LoadBalancer, otherClass)
	}
}

func TestNewValidates(t *testing.T) {
	client := k8sfake.NewClientset()
	f := informers.NewSharedInformerFactory(client, 0)
	lb := fake.NewLoadBalancer(netip.Addr{})
	tests := []struct {
		name string
		cfg  Config
		want string // in the error; "" = no error
	}{
		{"ok", Config{Class: testClass, LoadBalancer: lb, Client: client, Informers: f}, ""},
		{"no class", Config{LoadBalancer: lb, Client: client, Informers: f}, "Class: Required"},
		{"class without domain", Config{Class: "router", LoadBalancer: lb, Client: client, Informers: f}, "Class: Invalid value"},
		{"no load balancer", Config{Class: testClass, Client: client, Informers: f}, "LoadBalancer: Required"},
		{"no client", Config{Class: testClass, LoadBalancer: lb, Informers: f}, "Client: Required"},
		{"no informers", Config{Class: testClass, LoadBalancer: lb, Client: client}, "Informers: Required"},
		{"upstream's finalizer", Config{Class: testClass, LoadBalancer: lb, Client: client, Informers: f, Finalizer: upstreamFinalizer}, "Finalizer: Invalid value"},
		{"class not a finalizer name", Config{Class: "example.com/a/b", LoadBalancer: lb, Client: client, Informers: f}, "Finalizer: Invalid value"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.cfg)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("New: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("New error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestRun drives the controller through its queue: a RetryError is
// retried after its delay without a Warning, the Service is served, and
// Run returns once ctx is cancelled.
func TestRun(t *testing.T) {
	client := k8sfake.NewClientset(svc("a", class(testClass)), node("n1"))
	factory := informers.NewSharedInformerFactory(client, 0)
	lb := fake.NewLoadBalancer(netip.MustParseAddr(ingressIP))
	first := true
	lb.Intercept(fake.LoadBalancerHooks{EnsureLoadBalancer: func(ctx context.Context, cn string, s *v1.Service, n []*v1.Node, next fake.EnsureLoadBalancerFunc) (*v1.LoadBalancerStatus, error) {
		if first { // one worker: no race
			first = false
			return nil, api.NewRetryError("not yet", time.Millisecond)
		}
		return next(ctx, cn, s, n)
	}})
	c, err := New(Config{Class: testClass, LoadBalancer: lb, Client: client, Informers: factory, MinRetryDelay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	err = wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, waitBound, true, func(ctx context.Context) (bool, error) {
		s, err := client.CoreV1().Services("default").Get(ctx, "a", metav1.GetOptions{})
		return err == nil && len(s.Status.LoadBalancer.Ingress) == 1, nil
	})
	if err != nil {
		t.Fatalf("the Service was never served (a RetryError must requeue after its delay, not the hour of backoff): %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	evs, err := client.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs.Items {
		if ev.Type == v1.EventTypeWarning {
			t.Errorf("Warning event %s: %s", ev.Reason, ev.Message)
		}
	}
	if got := lb.CallCount(fake.MethodEnsureLoadBalancer); got != 2 {
		t.Errorf("EnsureLoadBalancer calls = %d, want 2", got)
	}
}

func ExampleNew() {
	client := k8sfake.NewClientset()
	factory := informers.NewSharedInformerFactory(client, 0)
	c, err := New(Config{
		Class:        "example.com/router",
		LoadBalancer: fake.NewLoadBalancer(netip.Addr{}),
		Client:       client,
		Informers:    factory,
	})
	fmt.Println(c != nil, err)
	// Output: true <nil>
}

// TestResync: with ResyncPeriod, an unchanged Service is ensured again and
// again (its load balancer renewed) without Normal events after the first.
func TestResync(t *testing.T) {
	client := k8sfake.NewClientset(svc("a", class(testClass)), node("n1"))
	factory := informers.NewSharedInformerFactory(client, 0)
	lb := fake.NewLoadBalancer(netip.MustParseAddr(ingressIP))
	c, err := New(Config{Class: testClass, LoadBalancer: lb, Client: client, Informers: factory, ResyncPeriod: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	rec := record.NewFakeRecorder(1000)
	c.recorder = rec
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	err = wait.PollUntilContextTimeout(context.Background(), time.Millisecond, waitBound, true, func(context.Context) (bool, error) {
		return lb.CallCount(fake.MethodEnsureLoadBalancer) >= 3, nil
	})
	cancel()
	if rerr := <-done; rerr != nil {
		t.Errorf("Run: %v", rerr)
	}
	if err != nil {
		t.Fatalf("the Service was not ensured again: %d Ensure calls", lb.CallCount(fake.MethodEnsureLoadBalancer))
	}
	var events []string
	for len(rec.Events) > 0 {
		f := strings.Fields(<-rec.Events)
		events = append(events, f[0]+" "+f[1])
	}
	if diff := cmp.Diff([]string{"Normal EnsuringLoadBalancer", "Normal EnsuredLoadBalancer"}, events); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}
