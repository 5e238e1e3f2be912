package cluster_test

import (
	"context"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/ccmkit/ccmkit/fake/cluster"
	"github.com/ccmkit/ccmkit/provider"
)

// memRoutes is a cloud's route table in memory.
type memRoutes struct {
	mu     sync.Mutex
	routes map[string]cloudprovider.Route // by name
}

func (r *memRoutes) ListRoutes(context.Context, string) ([]*cloudprovider.Route, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*cloudprovider.Route
	for _, rt := range r.routes {
		out = append(out, &rt)
	}
	return out, nil
}

func (r *memRoutes) CreateRoute(_ context.Context, _ string, nameHint string, rt *cloudprovider.Route) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := *rt
	c.Name = nameHint + "-" + rt.DestinationCIDR
	r.routes[c.Name] = c
	return nil
}

func (r *memRoutes) DeleteRoute(_ context.Context, _ string, rt *cloudprovider.Route) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.routes, rt.Name)
	return nil
}

// table returns "node cidr" of every route, sorted.
func (r *memRoutes) table() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for rt := range maps.Values(r.routes) {
		out = append(out, string(rt.TargetNode)+" "+rt.DestinationCIDR)
	}
	slices.Sort(out)
	return out
}

// A cloud with Routes gets the route controller: a route to each node's pod
// CIDR, for nodes there from the start and added later; a route into the
// cluster CIDR to no node is removed, one outside it is left alone.
func TestRoutes(t *testing.T) {
	routes := &memRoutes{routes: map[string]cloudprovider.Route{
		"stale":   {Name: "stale", TargetNode: types.NodeName("gone"), DestinationCIDR: "10.244.9.0/24"},
		"foreign": {Name: "foreign", TargetNode: types.NodeName("elsewhere"), DestinationCIDR: "172.16.0.0/24"},
	}}
	h := startWithRoutes(t, routes, cluster.Config{
		ConfigureCloudRoutes:      true,
		RouteReconciliationPeriod: 50 * time.Millisecond,
		Objects:                   []k8sruntime.Object{cluster.Node("n1", cluster.Initialized(), cluster.InternalIP("192.168.1.10"), cluster.PodCIDRs("10.244.1.0/24"))},
	})
	ctx := t.Context()
	if _, err := h.WaitForRouteCreated(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.AddNode(ctx, cluster.Node("n2", cluster.Initialized(), cluster.InternalIP("192.168.1.11"), cluster.PodCIDRs("10.244.2.0/24"))); err != nil {
		t.Fatal(err)
	}
	if _, err := h.WaitForRouteCreated(ctx, "n2"); err != nil {
		t.Fatal(err)
	}
	want := []string{"elsewhere 172.16.0.0/24", "n1 10.244.1.0/24", "n2 10.244.2.0/24"}
	if err := h.Wait(ctx, "the cloud's routes to be each node's and the foreign one", func(context.Context) (bool, error) {
		return slices.Equal(routes.table(), want), nil
	}); err != nil {
		t.Errorf("%v; routes: %q", err, routes.table())
	}
}

func TestBadClusterCIDR(t *testing.T) {
	cloud, err := provider.New("kit", provider.Config{Routes: &memRoutes{}, ClusterID: true})
	if err != nil {
		t.Fatal(err)
	}
	if h, err := cluster.Start(t.Context(), cluster.Config{Cloud: cloud, ConfigureCloudRoutes: true, ClusterCIDR: "10.244.0.0"}); err == nil {
		h.Stop()
		t.Fatal("Start with ClusterCIDR 10.244.0.0 succeeded")
	}
}

// startWithRoutes starts a harness whose cloud has only routes.
func startWithRoutes(t *testing.T, routes cloudprovider.Routes, cfg cluster.Config) *cluster.Harness {
	t.Helper()
	cloud, err := provider.New("kit", provider.Config{Routes: routes, ClusterID: true})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Cloud = cloud
	return start(t, cfg)
}

// Without ConfigureCloudRoutes, as a cloud-controller-manager by default,
// the cloud's routes are left alone.
func TestRoutesLeftAloneByDefault(t *testing.T) {
	routes := &memRoutes{routes: map[string]cloudprovider.Route{
		"stale": {Name: "stale", TargetNode: types.NodeName("gone"), DestinationCIDR: "10.244.9.0/24"},
	}}
	startWithRoutes(t, routes, cluster.Config{
		RouteReconciliationPeriod: 20 * time.Millisecond,
		Objects:                   []k8sruntime.Object{cluster.Node("n1", cluster.Initialized(), cluster.PodCIDRs("10.244.1.0/24"))},
	})
	time.Sleep(200 * time.Millisecond) // ten reconciliation periods
	if got, want := routes.table(), []string{"gone 10.244.9.0/24"}; !slices.Equal(got, want) {
		t.Errorf("routes = %q, want %q untouched", got, want)
	}
}

// slowRoutes is a route table whose every call takes a while, and which
// records calls that start after stopped is set.
type slowRoutes struct {
	memRoutes
	inflight, afterStop atomic.Int32
	stopped             atomic.Bool
}

func (r *slowRoutes) ListRoutes(ctx context.Context, cluster string) ([]*cloudprovider.Route, error) {
	if r.stopped.Load() {
		r.afterStop.Add(1)
	}
	r.inflight.Add(1)
	defer r.inflight.Add(-1)
	time.Sleep(100 * time.Millisecond) // ignores ctx, as a slow cloud API may
	return r.memRoutes.ListRoutes(ctx, cluster)
}

// Once Stop has returned, no controller calls the cloud: upstream's route
// controller reconciles in a goroutine that outlives its Run.
func TestStopEndsCloudCalls(t *testing.T) {
	routes := &slowRoutes{memRoutes: memRoutes{routes: map[string]cloudprovider.Route{}}}
	h := startWithRoutes(t, routes, cluster.Config{
		ConfigureCloudRoutes:      true,
		RouteReconciliationPeriod: 10 * time.Millisecond,
	})
	for routes.inflight.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	h.Stop()
	routes.stopped.Store(true)
	if n := routes.inflight.Load(); n != 0 {
		t.Errorf("%d ListRoutes calls in flight after Stop returned", n)
	}
	time.Sleep(300 * time.Millisecond) // thirty reconciliation periods
	if n := routes.afterStop.Load(); n != 0 {
		t.Errorf("%d ListRoutes calls started after Stop returned", n)
	}
}
