package loadbalancer

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
)

// countingClient counts the igd.Client calls made through it: the router
// calls of an operation, whatever the backend (in-memory fake, the real
// client over the fake SOAP server, or the real client on miniupnpd).
type countingClient struct {
	igd.Client
	mu    sync.Mutex
	calls map[string]int
}

func newCounting(c igd.Client) *countingClient {
	return &countingClient{Client: c, calls: map[string]int{}}
}

// count records a call of method m.
func (c *countingClient) count(m string) {
	c.mu.Lock()
	c.calls[m]++
	c.mu.Unlock()
}

// take returns the counts since the last take and resets them.
func (c *countingClient) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.calls
	c.calls = map[string]int{}
	return out
}

func (c *countingClient) ExternalIP(ctx context.Context) (netip.Addr, error) {
	c.count(fake.MethodExternalIP)
	return c.Client.ExternalIP(ctx)
}

func (c *countingClient) AddPortMapping(ctx context.Context, m igd.Mapping) (igd.Mapping, error) {
	c.count(fake.MethodAddPortMapping)
	return c.Client.AddPortMapping(ctx, m)
}

func (c *countingClient) DeletePortMapping(ctx context.Context, p igd.Protocol, port uint16) error {
	c.count(fake.MethodDeletePortMapping)
	return c.Client.DeletePortMapping(ctx, p, port)
}

func (c *countingClient) GetPortMapping(ctx context.Context, p igd.Protocol, port uint16) (igd.Mapping, error) {
	c.count(fake.MethodGetPortMapping)
	return c.Client.GetPortMapping(ctx, p, port)
}

func (c *countingClient) ListPortMappings(ctx context.Context, proto igd.Protocol, ports igd.PortRange) ([]igd.Mapping, error) {
	l, ok := c.Client.(igd.Lister)
	if !ok {
		return nil, igd.ErrNotSupported
	}
	c.count(fake.MethodListPortMappings)
	return l.ListPortMappings(ctx, proto, ports)
}

// tally accumulates router calls over a benchmark and reports them per op.
type tally map[string]int

func (t tally) add(m map[string]int) {
	for k, v := range m {
		t[k] += v
	}
}

func (t tally) report(b *testing.B) {
	b.Helper()
	n := float64(b.N)
	b.ReportMetric(float64(t[fake.MethodAddPortMapping])/n, "adds/op")
	b.ReportMetric(float64(t[fake.MethodListPortMappings])/n, "reads/op")
	b.ReportMetric(float64(t[fake.MethodDeletePortMapping])/n, "deletes/op")
	total := 0
	for _, v := range t {
		total += v
	}
	b.ReportMetric(float64(total)/n, "routercalls/op")
}

// backend is a router to benchmark against.
type backend struct {
	name   string
	client func(b *testing.B, r *fake.Router) igd.Client
}

var benchBackends = []backend{
	{"fake", func(_ *testing.B, r *fake.Router) igd.Client { return r.Client(addrA) }},
	{"soap", func(b *testing.B, r *fake.Router) igd.Client {
		// The real client over HTTP against the fake IGD server.
		s := fake.NewServer(r, fake.ServerOptions{ClientAddr: func(*http.Request) netip.Addr { return addrA }})
		b.Cleanup(s.Close)
		c, err := igd.NewClient(igd.Config{RootDescURL: s.RootDescURL})
		if err != nil {
			b.Fatal(err)
		}
		return c
	}},
}

// benchLB returns a LoadBalancer on a fresh fake router through be, with
// the external IP already cached (as after the first operation).
func benchLB(b *testing.B, be backend) (*LoadBalancer, *countingClient, *fake.Router) {
	b.Helper()
	r := fake.NewRouter(fake.RouterConfig{})
	cc := newCounting(be.client(b, r))
	lb, err := New(Config{Client: cc})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := lb.refreshExternalIP(context.Background()); err != nil {
		b.Fatal(err)
	}
	cc.take()
	return lb, cc, r
}

func benchService(name string, ports int) *v1.Service {
	ps := make([]v1.ServicePort, ports)
	for i := range ps {
		ps[i] = port(fmt.Sprintf("p%d", i), v1.ProtocolTCP, int32(10000+i), int32(30000+i))
	}
	return newService("bench", name, withPorts(ps...))
}

// BenchmarkEnsureNew: a new N-port Service. Target: N adds + 1 table read.
func BenchmarkEnsureNew(b *testing.B) {
	for _, be := range benchBackends {
		for _, n := range []int{1, 10, 50} {
			b.Run(fmt.Sprintf("%s/ports=%d", be.name, n), func(b *testing.B) {
				lb, cc, _ := benchLB(b, be)
				ctx := context.Background()
				nodes := threeNodes()
				svc := benchService("new", n)
				t := tally{}
				b.ResetTimer()
				for range b.N {
					if _, err := lb.EnsureLoadBalancer(ctx, testCluster, svc, nodes); err != nil {
						b.Fatal(err)
					}
					t.add(cc.take())
					b.StopTimer()
					if err := lb.EnsureLoadBalancerDeleted(ctx, testCluster, svc); err != nil {
						b.Fatal(err)
					}
					cc.take()
					b.StartTimer()
				}
				t.report(b)
			})
		}
	}
}

// BenchmarkEnsureNoop: Ensure of a Service that is already served. Target:
// no add, at most 1 table read.
func BenchmarkEnsureNoop(b *testing.B) {
	for _, be := range benchBackends {
		b.Run(be.name+"/ports=10", func(b *testing.B) {
			lb, cc, _ := benchLB(b, be)
			ctx := context.Background()
			nodes := threeNodes()
			svc := benchService("noop", 10)
			if _, err := lb.EnsureLoadBalancer(ctx, testCluster, svc, nodes); err != nil {
				b.Fatal(err)
			}
			cc.take()
			t := tally{}
			b.ResetTimer()
			for range b.N {
				if _, err := lb.EnsureLoadBalancer(ctx, testCluster, svc, nodes); err != nil {
					b.Fatal(err)
				}
			}
			t.add(cc.take())
			t.report(b)
		})
	}
}

// BenchmarkDelete: Delete of a 10-port Service, as the service controller
// makes it (after-get: GetLoadBalancer, then EnsureLoadBalancerDeleted, which
// uses the Get's read; target: 1 read in the Get, 10 deletes and no read in
// the Delete) and called alone (target: 10 deletes + 1 read). The metrics
// count the Delete's calls; get-reads/op counts the Get's.
func BenchmarkDelete(b *testing.B) {
	for _, be := range benchBackends {
		for _, afterGet := range []bool{true, false} {
			name := be.name + "/ports=10/alone"
			if afterGet {
				name = be.name + "/ports=10/after-get"
			}
			b.Run(name, func(b *testing.B) {
				lb, cc, _ := benchLB(b, be)
				ctx := context.Background()
				nodes := threeNodes()
				svc := benchService("del", 10)
				t, gets := tally{}, tally{}
				b.ResetTimer()
				for range b.N {
					b.StopTimer()
					if _, err := lb.EnsureLoadBalancer(ctx, testCluster, svc, nodes); err != nil {
						b.Fatal(err)
					}
					cc.take()
					b.StartTimer()
					if afterGet {
						if _, _, err := lb.GetLoadBalancer(ctx, testCluster, svc); err != nil {
							b.Fatal(err)
						}
						gets.add(cc.take())
					}
					if err := lb.EnsureLoadBalancerDeleted(ctx, testCluster, svc); err != nil {
						b.Fatal(err)
					}
					t.add(cc.take())
				}
				t.report(b)
				b.ReportMetric(float64(gets[fake.MethodListPortMappings])/float64(b.N), "get-reads/op")
			})
		}
	}
}

// staticWatch is a background view over fixed objects (no informers); its
// API client holds the Services too, which a pass re-reads.
func staticWatch(b testing.TB, nodes []*v1.Node, svcs []*v1.Service) *watch {
	b.Helper()
	nodeIdx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	svcIdx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, n := range nodes {
		if err := nodeIdx.Add(n); err != nil {
			b.Fatal(err)
		}
	}
	var objs []k8sruntime.Object
	for _, s := range svcs {
		if err := svcIdx.Add(s); err != nil {
			b.Fatal(err)
		}
		objs = append(objs, s)
	}
	return &watch{
		client:   k8sfake.NewClientset(objs...),
		nodes:    corelisters.NewNodeLister(nodeIdx),
		services: corelisters.NewServiceLister(svcIdx),
		slices:   discoverylisters.NewEndpointSliceLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})),
		recorder: record.NewFakeRecorder(100),
	}
}

// ensureRebootServices ensures the 10 Services x 3 ports (base+1000+i,
// base+2000+i TCP, base+3000+i UDP for Service si) the reboot benchmarks
// repair, and returns them with their load-balancer status set.
func ensureRebootServices(b testing.TB, lb *LoadBalancer, nodes []*v1.Node, base int32) []*v1.Service {
	b.Helper()
	var svcs []*v1.Service
	for i := range int32(10) {
		s := lbService("bench", fmt.Sprintf("s%d", i), withPorts(
			port("a", v1.ProtocolTCP, base+1000+i, 30000),
			port("b", v1.ProtocolTCP, base+2000+i, 30001),
			port("c", v1.ProtocolUDP, base+3000+i, 30002),
		))
		st, err := lb.EnsureLoadBalancer(context.Background(), testCluster, s, nodes)
		if err != nil {
			b.Fatal(err)
		}
		s.Status.LoadBalancer = *st
		svcs = append(svcs, s)
	}
	return svcs
}

// BenchmarkRepairAfterReboot: one background pass after a router reboot
// wiped 10 Services x 3 ports. Target: 30 adds + 1 table read (+ the
// external IP refresh every pass makes).
func BenchmarkRepairAfterReboot(b *testing.B) {
	for _, be := range benchBackends {
		b.Run(be.name+"/services=10x3", func(b *testing.B) {
			lb, cc, r := benchLB(b, be)
			ctx := context.Background()
			nodes := threeNodes()
			svcs := ensureRebootServices(b, lb, nodes, 0)
			w := staticWatch(b, nodes, svcs)
			cc.take()
			t := tally{}
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				r.Reboot()
				b.StartTimer()
				lb.pass(ctx, w)
				t.add(cc.take())
			}
			b.StopTimer()
			if got := len(r.Mappings()); got != 30 {
				b.Fatalf("after repair: %d mappings, want 30", got)
			}
			t.report(b)
		})
	}
}
