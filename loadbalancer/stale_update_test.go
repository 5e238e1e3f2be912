package loadbalancer

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"

	"github.com/ccmkit/ccmkit/fake"
)

// TestUpdateAfterDeleteWithStaleServiceAddsNothing pins that an
// UpdateLoadBalancer carrying the Service as it was before its
// EnsureLoadBalancerDeleted (the service controller's node sync works from a
// list taken before the delete, and waits for the delete's turn) does not
// put the mappings back when the API server says the Service no longer wants
// them: nothing else would remove them before their lease ends, while the
// freed nodePort may go to another Service. A Service that wants a load
// balancer again (type changed back) is served.
func TestUpdateAfterDeleteWithStaleServiceAddsNothing(t *testing.T) {
	ctx := context.Background()
	nodes := threeNodes()
	for _, tt := range []struct {
		name string
		// live is what the API server holds after the delete (nil: gone).
		live func(web *v1.Service) *v1.Service
		want []string // the router's table after the stale Update
	}{
		{
			name: "deleted",
			live: func(*v1.Service) *v1.Service { return nil },
		},
		{
			name: "being deleted, finalizer still on",
			live: func(web *v1.Service) *v1.Service {
				s := web.DeepCopy()
				now := metav1.Now()
				s.DeletionTimestamp = &now
				return s
			},
		},
		{
			name: "type changed to ClusterIP",
			live: func(web *v1.Service) *v1.Service {
				s := web.DeepCopy()
				s.Spec.Type = v1.ServiceTypeClusterIP
				return s
			},
		},
		{
			name: "type changed back to LoadBalancer",
			live: func(web *v1.Service) *v1.Service { return web.DeepCopy() },
			want: []string{"TCP/80"},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, Config{}, fake.RouterConfig{})
			web := lbService("default", "web", withPorts(port("http", v1.ProtocolTCP, 80, 30080)))
			web.UID = "uid-web"
			objs := []k8sruntime.Object{}
			for _, n := range nodes {
				objs = append(objs, n)
			}
			if live := tt.live(web); live != nil {
				objs = append(objs, live)
			}
			startBackground(t, e, objs...)
			e.mustEnsure(t, web, nodes)
			if err := e.lb.EnsureLoadBalancerDeleted(ctx, testCluster, web); err != nil {
				t.Fatalf("EnsureLoadBalancerDeleted: %v", err)
			}
			if err := e.lb.UpdateLoadBalancer(ctx, testCluster, web, nodes); err != nil {
				t.Fatalf("UpdateLoadBalancer: %v", err)
			}
			var got []string
			for _, m := range e.router.Mappings() {
				got = append(got, m.Key().String())
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("router's table after the stale Update (-want +got):\n%s", diff)
			}
		})
	}
}

// The deleted mark outlives the passes that follow the delete: a pass forgets
// the state of a Service the API server no longer has, but not the mark that
// a stale UpdateLoadBalancer of it (the node sync's list, taken before the
// delete) is checked against, or that Update would put its mappings back,
// for no one to remove before their lease ends.
func TestUpdateAfterDeleteWithStaleServiceAddsNothingAfterAPass(t *testing.T) {
	ctx := context.Background()
	nodes := threeNodes()
	e := newEnv(t, Config{}, fake.RouterConfig{})
	web := lbService("default", "web", withPorts(port("http", v1.ProtocolTCP, 80, 30080)))
	r := startBackground(t, e, nodes[0], nodes[1], nodes[2]) // web is gone from the API server
	e.mustEnsure(t, web, nodes)
	if err := e.lb.EnsureLoadBalancerDeleted(ctx, testCluster, web); err != nil {
		t.Fatalf("EnsureLoadBalancerDeleted: %v", err)
	}
	r.tick(t)
	if err := e.lb.UpdateLoadBalancer(ctx, testCluster, web, nodes); err != nil {
		t.Fatalf("UpdateLoadBalancer: %v", err)
	}
	if got := e.table(); len(got) != 0 {
		t.Errorf("router's table after a pass and a stale Update = %q, want empty", got)
	}
}

// A Service being deleted (deletionTimestamp set, its finalizer still on) is
// not served: the service controller's node sync still calls
// UpdateLoadBalancer for it, also in a process that took over after another
// removed its mappings and never saw that delete; served, it would put them
// back for no one to remove before their lease ends.
func TestUpdateOfServiceBeingDeletedAddsNothing(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{}, fake.RouterConfig{})
	web := lbService("default", "web", withPorts(port("http", v1.ProtocolTCP, 80, 30080)))
	now := metav1.Now()
	web.DeletionTimestamp = &now
	if err := e.lb.UpdateLoadBalancer(ctx, testCluster, web, threeNodes()); err != nil {
		t.Fatalf("UpdateLoadBalancer: %v", err)
	}
	if got := e.table(); len(got) != 0 {
		t.Errorf("router's table after an Update of a Service being deleted = %q, want empty", got)
	}
}
