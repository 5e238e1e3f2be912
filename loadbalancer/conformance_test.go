package loadbalancer_test

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/fake/cluster"
	"github.com/ccmkit/ccmkit/fake/conformance"
	"github.com/ccmkit/ccmkit/loadbalancer"
)

// This file runs the kit's conformance suite for CCM authors
// (fake/conformance) against this package's LoadBalancer.

// routerBackend sees a Service's load balancer as the router's mappings of
// its ports (the suite's Services use distinct ports).
type routerBackend struct {
	r     *fake.Router
	nodes []*v1.Node
}

func (b routerBackend) Exists(_ context.Context, svc *v1.Service) (bool, error) {
	for _, m := range b.r.Mappings() {
		for _, p := range svc.Spec.Ports {
			if int32(m.ExternalPort) == p.Port {
				return true, nil
			}
		}
	}
	return false, nil
}

// Forwards reads the mappings of svc's ports (by external port) as
// forwards to the node whose InternalIP is the mapping's internal client.
func (b routerBackend) Forwards(_ context.Context, svc *v1.Service) ([]conformance.Forward, error) {
	byIP := map[netip.Addr]string{}
	for _, n := range b.nodes {
		for _, a := range n.Status.Addresses {
			if ip, err := netip.ParseAddr(a.Address); err == nil && a.Type == v1.NodeInternalIP {
				byIP[ip] = n.Name
			}
		}
	}
	var out []conformance.Forward
	for _, m := range b.r.Mappings() {
		for _, p := range svc.Spec.Ports {
			if int32(m.ExternalPort) != p.Port || string(m.Protocol) != string(p.Protocol) {
				continue
			}
			node, ok := byIP[m.InternalClient]
			if !ok {
				node = m.InternalClient.String() // no node's: shows as removed
			}
			out = append(out, conformance.Forward{Protocol: p.Protocol, Port: p.Port, NodePort: int32(m.InternalPort), Nodes: []string{node}})
		}
	}
	return out, nil
}

// Leftovers is every mapping on the router.
func (b routerBackend) Leftovers(context.Context) ([]string, error) {
	var out []string
	for _, m := range b.r.Mappings() {
		out = append(out, fmt.Sprintf("%s %d -> %s:%d %q", m.Protocol, m.ExternalPort, m.InternalClient, m.InternalPort, m.Description))
	}
	return out, nil
}

// ccmkitSetup is ccmkit's load balancer over a fake router, serving only
// annotated Services, with its background work running on a fake
// clientset holding the suite's nodes.
//
// With lazyRun, the background work starts in ProvokeRetry instead, on a
// clientset that answers node lists only after listDelay: until its node
// cache has synced, the load balancer asks the caller to retry.
func ccmkitSetup(t testing.TB, lazyRun bool) (conformance.LoadBalancerSetup, *fake.Router) {
	router := fake.NewRouter(fake.RouterConfig{})
	lb, err := loadbalancer.New(loadbalancer.Config{
		Client:     router.Client(netip.MustParseAddr("192.168.1.2")),
		Services:   loadbalancer.AnnotatedServices,
		RetryAfter: 20 * time.Millisecond, // the node cache syncs within a few
	})
	if err != nil {
		t.Fatal(err)
	}
	nodes := conformance.DefaultNodes()
	var objs []k8sruntime.Object
	for _, n := range nodes {
		objs = append(objs, n)
	}
	client := k8sfake.NewClientset(objs...)
	if lazyRun {
		client.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, k8sruntime.Object, error) {
			time.Sleep(listDelay)
			return false, nil, nil
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := lb.Initialize(ctx, cluster.ClientBuilder(client)); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var once sync.Once
	start := func() {
		once.Do(func() {
			go func() {
				defer close(done)
				lb.Run(ctx)
			}()
		})
	}
	t.Cleanup(func() {
		cancel()
		start() // so that done closes
		<-done
	})
	var provoke func(context.Context, *v1.Service) func() error
	if lazyRun {
		// Until the node cache has synced, deleting cannot tell the
		// Service's mappings from another's: a retry.
		provoke = func(ctx context.Context, svc *v1.Service) func() error {
			start()
			return func() error { return lb.EnsureLoadBalancerDeleted(ctx, "kubernetes", svc) }
		}
	} else {
		start()
	}
	backend := routerBackend{router, nodes}
	return conformance.LoadBalancerSetup{
		ProvokeRetry: provoke,
		LoadBalancer: lb,
		Backend:      backend,
		Forwards:     backend.Forwards,
		Leftovers:    backend.Leftovers,
		Nodes:        nodes,
		Service: func(namespace, name string, i int) *v1.Service {
			s := conformance.DefaultService(namespace, name, i)
			s.Annotations = map[string]string{loadbalancer.AnnotationLoadBalancerType: loadbalancer.AnnotationValue}
			return s
		},
		// Not annotated: left to another load balancer.
		Elsewhere: conformance.DefaultService("conformance", "not-annotated", 99),
	}, router
}

// listDelay is how long the lazy setup's clientset takes to list nodes.
const listDelay = 200 * time.Millisecond

func TestConformance(t *testing.T) {
	conformance.RunLoadBalancer(t, func(t testing.TB) conformance.LoadBalancerSetup {
		s, _ := ccmkitSetup(t, false)
		s.Skip = []string{conformance.PromiseRetry} // TestConformanceRetry checks it
		return s
	})
}

// TestConformanceRetry checks that the load balancer's "node cache
// not synced yet" answer is an *api.RetryError the service controller sees,
// and that the retried call succeeds.
func TestConformanceRetry(t *testing.T) {
	for _, c := range conformance.LoadBalancerChecks() {
		if c.Promise != conformance.PromiseRetry {
			continue
		}
		s, _ := ccmkitSetup(t, true)
		if err := c.Run(t.Context(), s); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatal("no RetryError check")
}
