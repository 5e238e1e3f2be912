package loadbalancer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sfake "k8s.io/client-go/kubernetes/fake"

	fakecluster "github.com/ccmkit/ccmkit/fake/cluster"
	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/igdtest"
	"github.com/ccmkit/ccmkit/internal/pcplab"
)

// The service controller's workers delete several Services at once from an
// IGD:1 router (miniupnpd with force_igd_desc_v1), which can only be read
// entry by entry. Every delete that returns nil leaves nothing behind.
func TestLabConcurrentDeletesOnIGD1LeaveNothing(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{Nodes: 1, ForceIGDv1: true})
	ctx := labContext(t)
	lb, err := New(Config{Client: pcplab.UPnPClient(t, lab, 0)})
	if err != nil {
		t.Fatal(err)
	}
	nodes := labNodes(lab)
	for round := range 4 {
		ensureThenDeleteConcurrently(t, lb, nodes, fmt.Sprintf("r%ds", round), 21000)
		if ms, err := igd.ReadTable(ctx, pcplab.UPnPClient(t, lab, 0)); err != nil || len(ms) != 0 {
			t.Fatalf("round %d: table after every delete returned = %v, %v; want empty", round, ms, err)
		}
	}
}

// Two LoadBalancers of one cluster, on two hosts, ensure different Services
// on the same external port of a real miniupnpd, and both read the port free
// before either writes (their adds wait for each other). Exactly one is
// served: the holder (its status records the port), though the other is
// older; the other gets a PortError naming it.
func TestLabTwoLoadBalancersServeOnlyTheHolderOfAContendedKey(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{Nodes: 2})
	ctx := labContext(t)
	node := labNodes(lab)[0]
	holder, newcomer := holderAndNewcomer(44100)
	cluster := k8sfake.NewClientset(node, holder, newcomer)

	var adds sync.WaitGroup
	adds.Add(2)
	svcs := []*v1.Service{holder, newcomer}
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range 2 {
		lb, err := New(Config{Client: &barrierClient{UPnPClient: pcplab.UPnPClient(t, lab, i), adds: &adds}})
		if err != nil {
			t.Fatal(err)
		}
		if err := lb.Initialize(ctx, fakecluster.ClientBuilder(cluster)); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { _, errs[i] = lb.EnsureLoadBalancer(ctx, testCluster, svcs[i], []*v1.Node{node}) })
	}
	wg.Wait()
	wantServed(t, "default/holder", map[string]error{"default/holder": errs[0], "default/newcomer": errs[1]})
	m, err := pcplab.UPnPClient(t, lab, 0).GetPortMapping(ctx, igd.TCP, 44100)
	if err != nil || m.Description != desc("default", "holder", "http") || m.InternalPort != 30080 {
		t.Errorf("router holds %v, %v; want the holder's mapping", m, err)
	}
}

// barrierClient holds each AddPortMapping until adds is done (both
// LoadBalancers reached their add) or 500 ms pass (the other never adds).
type barrierClient struct {
	*igd.UPnPClient
	adds *sync.WaitGroup
	once sync.Once
}

func (c *barrierClient) AddPortMapping(ctx context.Context, m igd.Mapping) (igd.Mapping, error) {
	c.once.Do(func() {
		c.adds.Done()
		done := make(chan struct{})
		go func() { c.adds.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(500 * time.Millisecond):
		}
	})
	return c.UPnPClient.AddPortMapping(ctx, m)
}

// The service controller's resync after a restart, on a real miniupnpd
// holding 120 mappings: each Ensure reads only its own Service's keys.
func TestLabResyncReadsOnlyEachServicesKeys(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{Nodes: 1, Daemonize: true})
	ctx := labContext(t)
	nodes := labNodes(lab)
	setup, err := New(Config{Client: pcplab.UPnPClient(t, lab, 0)})
	if err != nil {
		t.Fatal(err)
	}
	var svcs []*v1.Service
	for i := range 60 {
		svc := lbService("resync", fmt.Sprintf("s%02d", i), withPorts(
			port("web", v1.ProtocolTCP, int32(20000+i), int32(30000+i)),
			port("dns", v1.ProtocolUDP, int32(20000+i), int32(31000+i))))
		st, err := setup.EnsureLoadBalancer(ctx, testCluster, svc, nodes)
		if err != nil {
			t.Fatal(err)
		}
		svc.Status.LoadBalancer = *st
		svcs = append(svcs, svc)
	}
	counter := &entryCounter{UPnPClient: pcplab.UPnPClient(t, lab, 0)}
	restarted, err := New(Config{Client: counter})
	if err != nil {
		t.Fatal(err)
	}
	for _, svc := range svcs {
		counter.read.Store(0)
		if _, err := restarted.EnsureLoadBalancer(ctx, testCluster, svc, nodes); err != nil {
			t.Fatal(err)
		}
		if n := counter.read.Load(); n > 2 {
			t.Fatalf("Ensure of %s read %d mappings, want at most its own 2 (of 120 on the router)", svc.Name, n)
		}
	}
}

// entryCounter counts the mappings its client's reads return.
type entryCounter struct {
	*igd.UPnPClient
	read atomic.Int64
}

func (c *entryCounter) GetPortMapping(ctx context.Context, p igd.Protocol, port uint16) (igd.Mapping, error) {
	m, err := c.UPnPClient.GetPortMapping(ctx, p, port)
	if err == nil {
		c.read.Add(1)
	}
	return m, err
}

func (c *entryCounter) ListPortMappings(ctx context.Context, p igd.Protocol, r igd.PortRange) ([]igd.Mapping, error) {
	ms, err := c.UPnPClient.ListPortMappings(ctx, p, r)
	c.read.Add(int64(len(ms)))
	return ms, err
}

// On a real miniupnpd: a holds TCP/44200 (its status records it); b, older,
// wants it too and waits. The router reboots (its table is gone): a gets
// the port back whichever Service is served first, and b keeps waiting,
// named.
func TestLabRebootGivesAContendedKeyBackToItsHolder(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{Nodes: 1})
	ctx := labContext(t)
	nodes := labNodes(lab)
	lb, err := New(Config{Client: pcplab.UPnPClient(t, lab, 0)})
	if err != nil {
		t.Fatal(err)
	}
	created := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	a := lbService("default", "a", withPorts(port("http", v1.ProtocolTCP, 44200, 30080)))
	b := lbService("default", "b", withPorts(port("http", v1.ProtocolTCP, 44200, 30081)))
	a.CreationTimestamp, b.CreationTimestamp = created, metav1.NewTime(created.Add(-time.Hour))
	st, err := lb.EnsureLoadBalancer(ctx, testCluster, a, nodes) // before b exists
	if err != nil {
		t.Fatal(err)
	}
	a.Status.LoadBalancer = *st
	if err := lb.Initialize(ctx, fakecluster.ClientBuilder(k8sfake.NewClientset(nodes[0], a, b))); err != nil {
		t.Fatal(err)
	}
	if _, err := lb.EnsureLoadBalancer(ctx, testCluster, b, nodes); !errors.Is(err, ErrPortInUse) {
		t.Fatalf("b while a holds the port: %v, want ErrPortInUse", err)
	}
	lab.Reboot(t)
	errs := map[string]error{}
	for _, s := range []*v1.Service{b, a} {
		_, errs[s.Namespace+"/"+s.Name] = lb.EnsureLoadBalancer(ctx, testCluster, s, nodes)
	}
	wantServed(t, "default/a", errs)
	m, err := pcplab.UPnPClient(t, lab, 0).GetPortMapping(ctx, igd.TCP, 44200)
	if err != nil || m.Description != desc("default", "a", "http") {
		t.Errorf("router holds %v, %v; want a's mapping", m, err)
	}
}

// hookClient runs before once, before its first AddPortMapping.
type hookClient struct {
	*igd.UPnPClient
	before func()
	once   sync.Once
}

func (c *hookClient) AddPortMapping(ctx context.Context, m igd.Mapping) (igd.Mapping, error) {
	c.once.Do(c.before)
	return c.UPnPClient.AddPortMapping(ctx, m)
}

// Two LoadBalancers of one cluster (a fail-over overlap) on a real
// miniupnpd, both mapping to one node (the router lets the second add
// replace the first). p1 serves b on TCP/44300 and lists the Services while
// a, older, wants another port; before p1's add lands, a moves to 44300 and
// p2 serves it: p2's list shows a older, and the router the port free. The
// two Services are never both served: p1's list after its add names a, and
// p1 removes its mapping; a's next Ensure (its process's probe finds the
// mapping gone) has the port.
func TestLabTwoLoadBalancersNeverBothTakeAKeyWantedDuringTheOthersAdd(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{Nodes: 2})
	ctx := labContext(t)
	node := labNodes(lab)[0]
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a := lbService("default", "a", withPorts(port("http", v1.ProtocolTCP, 44301, 30080)))
	b := lbService("default", "b", withPorts(port("http", v1.ProtocolTCP, 44300, 30081)))
	a.CreationTimestamp, b.CreationTimestamp = metav1.NewTime(t0), metav1.NewTime(t0.Add(10*time.Second))
	cluster := k8sfake.NewClientset(node, a, b)
	process := func(c igd.Client) *LoadBalancer {
		lb, err := New(Config{Client: c})
		if err != nil {
			t.Fatal(err)
		}
		if err := lb.Initialize(ctx, fakecluster.ClientBuilder(cluster)); err != nil {
			t.Fatal(err)
		}
		return lb
	}
	p2 := process(pcplab.UPnPClient(t, lab, 1))
	var errA error
	a.Spec.Ports[0].Port = 44300
	p1 := process(&hookClient{UPnPClient: pcplab.UPnPClient(t, lab, 0), before: func() {
		updateSpec(t, cluster, a)
		_, errA = p2.EnsureLoadBalancer(ctx, testCluster, a, []*v1.Node{node})
	}})
	_, errB := p1.EnsureLoadBalancer(ctx, testCluster, b, []*v1.Node{node})
	wantServed(t, "default/a", map[string]error{"default/a": errA, "default/b": errB})
	if _, err := p2.EnsureLoadBalancer(ctx, testCluster, a, []*v1.Node{node}); err != nil {
		t.Fatalf("a's next Ensure: %v", err)
	}
	m, err := pcplab.UPnPClient(t, lab, 0).GetPortMapping(ctx, igd.TCP, 44300)
	if err != nil || m.Description != desc("default", "a", "http") {
		t.Errorf("router holds %v, %v; want a's mapping", m, err)
	}
}
