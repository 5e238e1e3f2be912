package cluster_test

import (
	"context"
	"errors"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	cloudprovider "k8s.io/cloud-provider"
	servicehelper "k8s.io/cloud-provider/service/helpers"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/fake/cluster"
	"github.com/ccmkit/ccmkit/provider"
)

// newCloud returns a provider.Cloud with fake.LoadBalancer and ccmkit's
// InstancesV2 named "kit".
func newCloud(t *testing.T, lb cloudprovider.LoadBalancer) *provider.Cloud {
	t.Helper()
	inst, err := provider.NewInstancesV2("kit", provider.InstancesV2Config{Zone: "lab"})
	if err != nil {
		t.Fatal(err)
	}
	cloud, err := provider.New("kit", provider.Config{LoadBalancer: lb, InstancesV2: inst, ClusterID: true})
	if err != nil {
		t.Fatal(err)
	}
	return cloud
}

func start(t *testing.T, cfg cluster.Config) *cluster.Harness {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := cluster.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Stop)
	return h
}

func TestServiceAndNodeLifecycle(t *testing.T) {
	lb := fake.NewLoadBalancer(fake.DefaultExternalIP)
	h := start(t, cluster.Config{
		Cloud:   newCloud(t, lb),
		Objects: []k8sruntime.Object{cluster.Node("n1", cluster.InternalIP("192.168.1.10"))},
	})
	ctx := t.Context()

	n, err := h.WaitForNodeInitialized(ctx, "n1")
	if err != nil {
		t.Fatal(err)
	}
	if n.Spec.ProviderID != "kit://n1" || n.Labels[v1.LabelTopologyZone] != "lab" {
		t.Errorf("node n1 initialized with providerID %q, zone %q; want kit://n1, lab", n.Spec.ProviderID, n.Labels[v1.LabelTopologyZone])
	}

	svc := cluster.Service("default", "web", cluster.Port("http", v1.ProtocolTCP, 80, 30080))
	if _, err := h.Client.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := h.WaitForIngress(ctx, "default", "web")
	if err != nil {
		t.Fatal(err)
	}
	if ip := got.Status.LoadBalancer.Ingress[0].IP; ip != fake.DefaultExternalIP.String() {
		t.Errorf("ingress IP %s, want %s", ip, fake.DefaultExternalIP)
	}
	if _, err := h.WaitForService(ctx, "default", "web", "the finalizer", servicehelper.HasLBFinalizer); err != nil {
		t.Fatal(err)
	}

	if _, err := h.AddNode(ctx, cluster.Node("n2", cluster.InternalIP("192.168.1.11"))); err != nil {
		t.Fatal(err)
	}

	if err := h.DeleteService(ctx, "default", "web"); err != nil {
		t.Fatal(err)
	}
	if s := lb.Services(); len(s) != 0 {
		t.Errorf("load balancers left after DeleteService: %v", s)
	}
	if _, err := h.Client.CoreV1().Services("default").Get(ctx, "web", metav1.GetOptions{}); err == nil {
		t.Error("Service still exists after DeleteService")
	}
}

// goneInstances is an InstancesV2 whose instances are all gone.
type goneInstances struct{}

func (goneInstances) InstanceExists(context.Context, *v1.Node) (bool, error) { return false, nil }
func (goneInstances) InstanceShutdown(context.Context, *v1.Node) (bool, error) {
	return false, nil
}
func (goneInstances) InstanceMetadata(context.Context, *v1.Node) (*cloudprovider.InstanceMetadata, error) {
	return nil, errors.New("gone")
}

func TestNodeLifecycleDeletesGoneNode(t *testing.T) {
	cloud, err := provider.New("kit", provider.Config{InstancesV2: goneInstances{}, ClusterID: true})
	if err != nil {
		t.Fatal(err)
	}
	h := start(t, cluster.Config{
		Cloud:             cloud,
		NodeMonitorPeriod: 50 * time.Millisecond,
		Objects:           []k8sruntime.Object{cluster.Node("n1", cluster.Initialized(), cluster.NotReady(), cluster.ProviderID("kit://n1"))},
	})
	if err := h.WaitForNodeDeleted(t.Context(), "n1"); err != nil {
		t.Fatal(err)
	}
}

// failingLB fails every call.
type failingLB struct{ fake.LoadBalancer }

var errNoCapacity = errors.New("no capacity left in region lab")

func (*failingLB) EnsureLoadBalancer(context.Context, string, *v1.Service, []*v1.Node) (*v1.LoadBalancerStatus, error) {
	return nil, errNoCapacity
}

func TestWaitSaysWhatItSaw(t *testing.T) {
	h := start(t, cluster.Config{
		Cloud:   newCloud(t, &failingLB{*fake.NewLoadBalancer(fake.DefaultExternalIP)}),
		Timeout: 2 * time.Second,
		Objects: []k8sruntime.Object{
			cluster.Node("n1", cluster.InternalIP("192.168.1.10")),
			cluster.Service("default", "web", cluster.Port("http", v1.ProtocolTCP, 80, 30080)),
		},
	})
	_, err := h.WaitForIngress(t.Context(), "default", "web")
	if err == nil {
		t.Fatal("WaitForIngress succeeded against a load balancer that always fails")
	}
	for _, want := range []string{"Service default/web to have an ingress", "last seen", "finalizers", "SyncLoadBalancerFailed", errNoCapacity.Error()} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestStopLeaksNoGoroutine(t *testing.T) {
	before := runtime.NumGoroutine()
	// Every controller runs: node, node lifecycle, route and service.
	inst, err := provider.NewInstancesV2("kit", provider.InstancesV2Config{Zone: "lab"})
	if err != nil {
		t.Fatal(err)
	}
	cloud, err := provider.New("kit", provider.Config{
		LoadBalancer: fake.NewLoadBalancer(fake.DefaultExternalIP), InstancesV2: inst,
		Routes: &memRoutes{routes: map[string]cloudprovider.Route{}}, ClusterID: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	h := start(t, cluster.Config{
		Cloud:                cloud,
		ConfigureCloudRoutes: true,
		Objects:              []k8sruntime.Object{cluster.Node("n1", cluster.InternalIP("192.168.1.10"), cluster.PodCIDRs("10.244.1.0/24"))},
	})
	if _, err := h.WaitForNodeInitialized(t.Context(), "n1"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.WaitForRouteCreated(t.Context(), "n1"); err != nil {
		t.Fatal(err)
	}
	h.Stop()
	h.Stop() // idempotent
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines before Start, %d 10 s after Stop:\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A nil cloud, or a typed nil (what a failed provider.New returns, put
// into Config.Cloud), is an error, not a panic.
func TestStartRejectsNilCloud(t *testing.T) {
	var typedNil *provider.Cloud
	for name, cloud := range map[string]cloudprovider.Interface{"nil": nil, "typed nil": typedNil} {
		if _, err := cluster.Start(t.Context(), cluster.Config{Cloud: cloud}); err == nil || !strings.Contains(err.Error(), "Config.Cloud is nil") {
			t.Errorf("Start with a %s cloud = %v, want an error naming Config.Cloud", name, err)
		}
	}
}

// Like the API server, the harness gives objects created without a UID a
// new one, in Objects and through Client, and leaves the caller's objects
// and given UIDs alone.
func TestObjectsGetUIDs(t *testing.T) {
	cloud, err := provider.New("kit", provider.Config{LoadBalancer: fake.NewLoadBalancer(fake.DefaultExternalIP), ClusterID: true})
	if err != nil {
		t.Fatal(err)
	}
	node := cluster.Node("n1", cluster.Initialized(), cluster.InternalIP("192.168.1.10"))
	node.UID = ""
	initial := cluster.Service("default", "initial")
	initial.UID = ""
	kept := cluster.Service("default", "kept")
	h := start(t, cluster.Config{Cloud: cloud, Objects: []k8sruntime.Object{node, initial, kept}})
	ctx := t.Context()

	created := cluster.Service("default", "created")
	created.UID = ""
	if _, err := h.Client.CoreV1().Services("default").Create(ctx, created, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if node.UID != "" || initial.UID != "" || created.UID != "" {
		t.Errorf("the caller's objects were given UIDs: %q, %q, %q", node.UID, initial.UID, created.UID)
	}
	n, err := h.Client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	uids := map[string]bool{string(n.UID): true}
	for _, name := range []string{"initial", "created"} {
		s, err := h.Client.CoreV1().Services("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		uids[string(s.UID)] = true
	}
	if len(uids) != 3 || uids[""] {
		t.Errorf("UIDs of node n1 and Services initial, created: %v, want three distinct non-empty ones", uids)
	}
	s, err := h.Client.CoreV1().Services("default").Get(ctx, "kept", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s.UID != kept.UID {
		t.Errorf("Service kept has UID %q, want the given %q", s.UID, kept.UID)
	}
}

// Wait polls until its condition holds, outlives the condition's errors,
// and on timeout names what it waited for and the last error.
func TestWait(t *testing.T) {
	cloud, err := provider.New("kit", provider.Config{LoadBalancer: fake.NewLoadBalancer(fake.DefaultExternalIP), ClusterID: true})
	if err != nil {
		t.Fatal(err)
	}
	h := start(t, cluster.Config{Cloud: cloud, Timeout: time.Second})
	calls := 0
	err = h.Wait(t.Context(), "the third call", func(context.Context) (bool, error) {
		calls++
		if calls == 1 {
			return false, errors.New("first call fails")
		}
		return calls == 3, nil
	})
	if err != nil || calls != 3 {
		t.Errorf("Wait = %v after %d calls, want nil after 3", err, calls)
	}

	refused := errors.New("connection refused")
	err = h.Wait(t.Context(), "the router to answer", func(context.Context) (bool, error) {
		return false, refused
	})
	if err == nil || !strings.Contains(err.Error(), "waiting for the router to answer") || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("Wait = %v, want a timeout naming what it waited for and the last error", err)
	}
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, refused) {
		t.Errorf("Wait = %v, want it to wrap context.DeadlineExceeded and the last error", err)
	}
}

// A Harness started on another's Client runs a second process's controllers
// on the same cluster: once the first stops, the second serves the Services
// created then, as after a leader hand-over.
func TestHarnessOnAnotherHarnesssClientTakesOver(t *testing.T) {
	first := start(t, cluster.Config{
		Cloud:   newCloud(t, fake.NewLoadBalancer(fake.DefaultExternalIP)),
		Objects: []k8sruntime.Object{cluster.Node("n1", cluster.InternalIP("192.168.1.10"))},
	})
	ctx := t.Context()
	if _, err := first.WaitForNodeInitialized(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	second := start(t, cluster.Config{Cloud: newCloud(t, fake.NewLoadBalancer(testExternalIP2)), Client: first.Client})
	first.Stop()
	svc := cluster.Service("default", "web", cluster.Port("http", v1.ProtocolTCP, 80, 30080))
	if _, err := second.Client.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := second.WaitForIngress(ctx, "default", "web")
	if err != nil {
		t.Fatal(err)
	}
	if ip := got.Status.LoadBalancer.Ingress[0].IP; ip != testExternalIP2.String() {
		t.Errorf("ingress IP %s, want %s (the second process's load balancer)", ip, testExternalIP2)
	}
}

func TestStartRefusesObjectsWithAClient(t *testing.T) {
	first := start(t, cluster.Config{Cloud: newCloud(t, fake.NewLoadBalancer(fake.DefaultExternalIP))})
	_, err := cluster.Start(t.Context(), cluster.Config{
		Cloud:   newCloud(t, fake.NewLoadBalancer(fake.DefaultExternalIP)),
		Client:  first.Client,
		Objects: []k8sruntime.Object{cluster.Node("n1")},
	})
	if err == nil || !strings.Contains(err.Error(), "Config.Objects") {
		t.Errorf("Start with Objects and Client: %v, want an error naming Config.Objects", err)
	}
}

// testExternalIP2 is a second load balancer's external address.
var testExternalIP2 = netip.MustParseAddr("198.51.101.8")
