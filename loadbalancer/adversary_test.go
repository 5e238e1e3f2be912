package loadbalancer

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/cloud-provider/api"

	"github.com/ccmkit/ccmkit/fake"
	fakecluster "github.com/ccmkit/ccmkit/fake/cluster"
	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/internal/igderr"
)

// These tests act as the adversary: someone acts between the LoadBalancer's
// read of the router and its write. Each reproduces a hazard found in an
// earlier design (see DESIGN.md).

// A background pass lists the table, then serves Service after Service. If
// it deleted from that listing, a port the user removed from a Service (and
// Ensure withdrew) and a LAN host then took would be deleted when the pass
// reaches the Service. The pass must delete only what a fresh read proves
// ours.
func TestPassNeverDeletesFromAStaleListing(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{}, fake.RouterConfig{})
	nodes := threeNodes()
	web := lbService("default", "web", withPorts(port("a", v1.ProtocolTCP, 80, 30080), port("b", v1.ProtocolTCP, 81, 30081)))
	web.Status.LoadBalancer = *e.mustEnsure(t, web, nodes)
	webNow := web.DeepCopy() // the user removes port 81
	webNow.Spec.Ports = webNow.Spec.Ports[:1]
	console := igd.Mapping{Protocol: igd.TCP, ExternalPort: 81, InternalClient: addrStranger, InternalPort: 81, Description: "game console", Enabled: true}

	var fired atomic.Bool
	e.router.Intercept(fake.RouterHooks{ListPortMappings: func(ctx context.Context, _ netip.Addr, proto igd.Protocol, ports igd.PortRange, next fake.ListFunc) ([]igd.Mapping, error) {
		if fired.Swap(true) {
			return next(ctx, proto, ports)
		}
		// The pass's listing answers with the table as it is now; then,
		// before the pass reaches web, the service controller withdraws
		// port 81 and a game console maps it.
		listed := e.router.Mappings()
		if _, err := e.lb.EnsureLoadBalancer(ctx, testCluster, webNow, nodes); err != nil {
			t.Errorf("Ensure without port 81: %v", err)
		}
		e.router.Put(console)
		return listed, nil
	}})
	e.lb.pass(ctx, staticWatch(t, nodes, []*v1.Service{webNow}))
	if !fired.Load() {
		t.Fatal("the pass did not list the table")
	}
	if m, err := e.router.Client(addrStranger).GetPortMapping(ctx, igd.TCP, 81); err != nil || m.Description != console.Description {
		t.Errorf("console's mapping after the pass = %v, %v; want it untouched", m, err)
	}
}

// Several workers of the service controller delete Services at once. On a
// router that can only be read entry by entry (IGD:1), a walk of the table
// skips rows when another delete shifts the indexes under it. No Service may
// keep a mapping after its delete returned nil.
func TestConcurrentDeletesLeaveNothingOnIGD1(t *testing.T) {
	for round := range 5 {
		t.Run(fmt.Sprint("round ", round), func(t *testing.T) {
			r := fake.NewRouter(fake.RouterConfig{})
			// Let the workers' calls interleave, as on a real router.
			r.Intercept(fake.RouterHooks{
				GetGenericPortMappingEntry: func(ctx context.Context, _ netip.Addr, i int, next fake.EntryFunc) (igd.Mapping, error) {
					if err := fake.Sleep(ctx, 200*time.Microsecond); err != nil {
						return igd.Mapping{}, err
					}
					return next(ctx, i)
				},
				DeletePortMapping: func(ctx context.Context, _ netip.Addr, k igd.Key, next fake.DeleteFunc) error {
					if err := fake.Sleep(ctx, 200*time.Microsecond); err != nil {
						return err
					}
					return next(ctx, k)
				},
			})
			lb := overSOAP(t, r, fake.WANIPConnection1)
			ensureThenDeleteConcurrently(t, lb, threeNodes(), "s", 1000)
			if ms := r.Mappings(); len(ms) != 0 {
				t.Errorf("%d mappings left after every delete returned: %v", len(ms), ms)
			}
		})
	}
}

// A port removed from a Service, or a nodePort changed, must stop being
// forwarded even while no node can take the Service's traffic: the old
// nodePort may be given to another Service.
func TestWithdrawalsDoNotWaitForAnEligibleNode(t *testing.T) {
	for _, tt := range []struct {
		name  string
		ports []v1.ServicePort
		want  func(to netip.Addr) []string
	}{
		{
			name:  "port removed",
			ports: []v1.ServicePort{port("a", v1.ProtocolTCP, 80, 30080)},
			want: func(to netip.Addr) []string {
				return []string{row(igd.TCP, 80, to, 30080, desc("default", "web", "a"))}
			},
		},
		{
			name:  "nodePort changed",
			ports: []v1.ServicePort{port("a", v1.ProtocolTCP, 80, 31080), port("b", v1.ProtocolTCP, 81, 30081)},
			want: func(to netip.Addr) []string {
				return []string{row(igd.TCP, 81, to, 30081, desc("default", "web", "b"))}
			},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, Config{}, fake.RouterConfig{})
			web := newService("default", "web", withPorts(port("a", v1.ProtocolTCP, 80, 30080), port("b", v1.ProtocolTCP, 81, 30081)))
			web.Status.LoadBalancer = *e.mustEnsure(t, web, threeNodes())
			to := e.router.Mappings()[0].InternalClient
			down := []*v1.Node{newNode("node-a", addrA, notReady), newNode("node-b", addrB, notReady), newNode("node-c", addrC, notReady)}
			web.Spec.Ports = tt.ports
			_, err := e.ensure(t, web, down)
			if !errors.Is(err, ErrNoEligibleNode) {
				t.Errorf("Ensure with every node NotReady = %v, want ErrNoEligibleNode", err)
			}
			diffRows(t, "table", e.table(), tt.want(to))
		})
	}
}

// Routers answer GetExternalIPAddress with 0.0.0.0 while their WAN link is
// down. Neither Ensure nor a background pass may report such an address, or
// a private one (unless allowed): the Service waits, with a Warning event.
func TestUnusableExternalIPIsNeverReported(t *testing.T) {
	for _, tt := range []struct {
		ip         string
		allowed    bool
		wantServed bool
	}{
		{ip: "0.0.0.0"},
		{ip: "0.0.0.0", allowed: true},
		{ip: "192.168.1.2"},
		{ip: "100.64.7.7"},
		{ip: "192.168.1.2", allowed: true, wantServed: true},
	} {
		t.Run(fmt.Sprintf("%s allowed=%v", tt.ip, tt.allowed), func(t *testing.T) {
			e := newEnv(t, Config{AllowNonPublicExternalIP: tt.allowed}, fake.RouterConfig{})
			nodes := threeNodes()
			web := lbService("default", "web")
			web.Status.LoadBalancer = *e.mustEnsure(t, web, nodes)
			good := web.Status.LoadBalancer.Ingress[0].IP
			r := startBackground(t, e, nodes[0], nodes[1], nodes[2], web)

			e.router.SetExternalIP(netip.MustParseAddr(tt.ip))
			r.tick(t)
			st, err := e.ensure(t, r.service(t, "default", "web"), nodes)
			if tt.wantServed {
				if err != nil || st.Ingress[0].IP != tt.ip {
					t.Fatalf("Ensure = %v, %v; want ingress %s", st, err, tt.ip)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrExternalIPNotUsable) {
				t.Errorf("Ensure = %+v, %v; want ErrExternalIPNotUsable", st, err)
			}
			if got := r.service(t, "default", "web").Status.LoadBalancer.Ingress[0].IP; got != good {
				t.Errorf("status after a pass = %s, want %s kept", got, good)
			}
			if len(e.router.Mappings()) != 1 {
				t.Errorf("table = %v, want the mapping kept, ready for when the address is usable", e.table())
			}
			eventually(t, "a Warning event", func() bool {
				evs, err := r.client.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{})
				if err != nil {
					return false
				}
				for _, ev := range evs.Items {
					if ev.Reason == EventReasonExternalIPNotPublic && ev.Type == v1.EventTypeWarning {
						return true
					}
				}
				return false
			})
		})
	}
}

// A served Service switched to externalTrafficPolicy Local cannot be served
// without background work (nothing watches its endpoints): like every
// invalid Service, it loses its mappings.
func TestServiceThatCannotBeServedLosesItsMappings(t *testing.T) {
	e := newEnv(t, Config{}, fake.RouterConfig{})
	web := newService("default", "web")
	e.mustEnsure(t, web, threeNodes())
	web.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
	if _, err := e.ensure(t, web, threeNodes()); !errors.Is(err, ErrInvalidService) {
		t.Errorf("Ensure = %v, want ErrInvalidService", err)
	}
	diffRows(t, "table", e.table(), nil)
}

// Two LoadBalancers of one cluster on one router (a leader fail-over
// overlap) ensure different Services on the same external port, and both
// read the port free before either writes. The router cannot tell their
// adds apart (both map to the cluster's node, so the second replaces the
// first); the API server decides: the Service whose status records the port
// gets it (though the other is older), and the other gets a PortError naming
// it, whichever process is faster.
func TestTwoLoadBalancersServeOnlyTheHolderOfAContendedKey(t *testing.T) {
	for round := range 4 {
		t.Run(fmt.Sprint("round ", round), func(t *testing.T) {
			r := fake.NewRouter(fake.RouterConfig{})
			node := newNode("node-a", addrA)
			holder, newcomer := holderAndNewcomer(80)
			cluster := k8sfake.NewClientset(node, holder, newcomer)

			// Both adds wait until both Ensures have read the port free.
			var adds sync.WaitGroup
			adds.Add(2)
			r.Intercept(fake.RouterHooks{AddPortMapping: func(ctx context.Context, _ netip.Addr, m igd.Mapping, next fake.AddFunc) (igd.Mapping, error) {
				adds.Done()
				done := make(chan struct{})
				go func() { adds.Wait(); close(done) }()
				select {
				case <-done:
				case <-time.After(200 * time.Millisecond): // the other never writes
				}
				return next(ctx, m)
			}})
			svcs := []*v1.Service{holder, newcomer}
			errs := make([]error, 2)
			order := []int{0, 1}
			if round%2 == 1 {
				order = []int{1, 0}
			}
			var wg sync.WaitGroup
			for _, i := range order {
				host := []netip.Addr{addrB, addrC}[i] // each process on its own host
				lb, err := New(Config{Client: r.Client(host)})
				if err != nil {
					t.Fatal(err)
				}
				if err := lb.Initialize(context.Background(), fakecluster.ClientBuilder(cluster)); err != nil {
					t.Fatal(err)
				}
				wg.Go(func() {
					_, errs[i] = lb.EnsureLoadBalancer(context.Background(), testCluster, svcs[i], []*v1.Node{node})
				})
			}
			wg.Wait()
			wantServed(t, "default/holder", map[string]error{"default/holder": errs[0], "default/newcomer": errs[1]})
			diffRows(t, "table", e2eTable(r), []string{row(igd.TCP, 80, addrA, 30080, desc("default", "holder", "http"))})
		})
	}
}

// e2eTable is the table of r as diffRows lines.
func e2eTable(r *fake.Router) []string {
	return (&env{router: r}).table()
}

// The igd client itself refuses an unusable answer (0.0.0.0 from a real
// router); the LoadBalancer waits for a usable one rather than failing as if
// the router were down.
func TestClientRefusingTheExternalIPMakesServicesWait(t *testing.T) {
	r := fake.NewRouter(fake.RouterConfig{})
	lb := overSOAP(t, r, fake.WANIPConnection2)
	ctx := context.Background()
	web := newService("default", "web")
	if _, err := lb.EnsureLoadBalancer(ctx, testCluster, web, threeNodes()); err != nil {
		t.Fatal(err)
	}
	r.SetExternalIP(netip.MustParseAddr("0.0.0.0"))
	lb.mu.Lock()
	lb.external = netip.Addr{} // as after a pass's refresh
	lb.mu.Unlock()
	st, err := lb.EnsureLoadBalancer(ctx, testCluster, web, threeNodes())
	if !errors.Is(err, ErrExternalIPNotUsable) || !errors.Is(err, igd.ErrInvalidExternalIP) || st != nil {
		t.Errorf("Ensure = %v, %v; want ErrExternalIPNotUsable from the client's ErrInvalidExternalIP", st, err)
	}
	if len(r.Mappings()) != 1 {
		t.Errorf("table = %v, want the Service's mapping kept", r.Mappings())
	}
}

// overSOAP returns a LoadBalancer whose real igd client talks, from node-a,
// to r served over SOAP as a router offering service.
func overSOAP(t *testing.T, r *fake.Router, service fake.UPnPService) *LoadBalancer {
	t.Helper()
	s := fake.NewServer(r, fake.ServerOptions{Service: service, ClientAddr: func(*http.Request) netip.Addr { return addrA }})
	t.Cleanup(s.Close)
	c, err := igd.NewClient(igd.Config{RootDescURL: s.RootDescURL})
	if err != nil {
		t.Fatal(err)
	}
	lb, err := New(Config{Client: c})
	if err != nil {
		t.Fatal(err)
	}
	return lb
}

// After a restart the service controller ensures every Service in turn. If
// each Ensure read the whole table, the resync would cost the square of the
// table: each Ensure must read only what its own ports need.
func TestResyncReadsOnlyEachServicesKeys(t *testing.T) {
	e := newEnv(t, Config{}, fake.RouterConfig{})
	nodes := threeNodes()
	var svcs []*v1.Service
	for i := range 40 {
		svc := newService("resync", fmt.Sprintf("s%02d", i), withPorts(
			port("web", v1.ProtocolTCP, int32(20000+10*i), int32(30000+i)),
			port("dns", v1.ProtocolUDP, int32(20000+10*i), int32(31000+i))))
		svc.Status.LoadBalancer = *e.mustEnsure(t, svc, nodes)
		svcs = append(svcs, svc)
	}
	restarted, err := New(Config{Client: e.router.Client(addrA), Clock: e.clock})
	if err != nil {
		t.Fatal(err)
	}
	for _, svc := range svcs {
		e.router.ResetCalls()
		if _, err := restarted.EnsureLoadBalancer(context.Background(), testCluster, svc, nodes); err != nil {
			t.Fatal(err)
		}
		read := 0
		for _, c := range e.router.Calls() {
			read += len(c.Mappings)
			if c.Method == fake.MethodGetPortMapping && c.Err == nil {
				read++
			}
		}
		if read > 2 {
			t.Fatalf("Ensure of %s read %d mappings, want at most its own 2 (of %d in the table)", svc.Name, read, len(e.router.Mappings()))
		}
	}
}

// A router that reboots (or wipes its table) loses every mapping: the
// Services must be served again within one probe interval, not one renewal
// interval.
func TestRebootRepairedWithinAProbeInterval(t *testing.T) {
	e := newEnv(t, Config{}, fake.RouterConfig{})
	nodes := threeNodes()
	web := lbService("default", "web", withPorts(port("http", v1.ProtocolTCP, 80, 30080)))
	web.Status.LoadBalancer = *e.mustEnsure(t, web, nodes)
	before := e.table()
	r := startBackground(t, e, nodes[0], nodes[1], nodes[2], web)
	e.router.Reboot()
	r.clock.Step(DefaultProbeInterval)
	eventually(t, "the mapping restored after one probe interval", func() bool {
		return len(e.router.Mappings()) == len(before)
	})
	diffRows(t, "table", e.table(), before)
}

// A pass works from a list of Services that may predate what the service
// controller did since. It must serve each Service as the API server has it
// now, or it revives what the controller removed.
func TestPassServesTheServiceAsItIsNow(t *testing.T) {
	ctx := context.Background()
	nodes := threeNodes()
	for _, tt := range []struct {
		name string
		// now changes the API server's copy of web after the pass listed it
		// (and after the service controller acted), and returns the table
		// the pass must leave.
		now func(t *testing.T, e *env, w *watch, web *v1.Service) []string
	}{
		{
			// The router lost the mappings, then the user deleted web:
			// a process holding nothing of web (another replica)
			// answered GetLoadBalancer with none, so the controller
			// dropped the finalizer without calling
			// EnsureLoadBalancerDeleted.
			name: "deleted while the router had lost its mappings",
			now: func(t *testing.T, e *env, w *watch, web *v1.Service) []string {
				e.router.Reboot()
				other, err := New(Config{Client: e.router.Client(addrA), Clock: e.clock})
				if err != nil {
					t.Fatal(err)
				}
				other.seeNodes(threeNodes())
				if _, exists, err := other.GetLoadBalancer(ctx, testCluster, web); err != nil || exists {
					t.Fatalf("GetLoadBalancer = %v, %v; want none", exists, err)
				}
				if err := w.client.CoreV1().Services("default").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
				return nil
			},
		},
		{
			name: "port changed",
			now: func(t *testing.T, e *env, w *watch, web *v1.Service) []string {
				v2 := web.DeepCopy()
				v2.Spec.Ports = []v1.ServicePort{port("http", v1.ProtocolTCP, 81, 30081)}
				v2.Status.LoadBalancer = *e.mustEnsure(t, v2, nodes)
				if _, err := w.client.CoreV1().Services("default").Update(ctx, v2, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
				to := e.router.Mappings()[0].InternalClient
				return []string{row(igd.TCP, 81, to, 30081, desc("default", "web", "http"))}
			},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, Config{}, fake.RouterConfig{})
			web := lbService("default", "web", withPorts(port("http", v1.ProtocolTCP, 80, 30080)))
			web.Status.LoadBalancer = *e.mustEnsure(t, web, nodes)
			w := staticWatch(t, nodes, []*v1.Service{web}) // the pass's list
			want := tt.now(t, e, w, web)
			e.lb.pass(ctx, w)
			diffRows(t, "table after the pass", e.table(), want)
		})
	}
}

// A LoadBalancer serves one cluster name: calls with another would make a
// second owner of the same Services, whose guards (gate, deleted marker,
// reservations) the background work, using the first name, never sees.
func TestOneClusterNamePerLoadBalancer(t *testing.T) {
	e := newEnv(t, Config{ClusterName: "home"}, fake.RouterConfig{})
	web := newService("default", "web")
	ctx := context.Background()
	_, err := e.lb.EnsureLoadBalancer(ctx, testCluster, web, threeNodes())
	if err == nil || !strings.Contains(err.Error(), `"home"`) || !strings.Contains(err.Error(), `"kubernetes"`) {
		t.Errorf("Ensure with another cluster name = %v, want an error naming both", err)
	}
	if _, _, err := e.lb.GetLoadBalancer(ctx, testCluster, web); err == nil {
		t.Error("GetLoadBalancer with another cluster name succeeded")
	}
	if err := e.lb.EnsureLoadBalancerDeleted(ctx, testCluster, web); err == nil {
		t.Error("EnsureLoadBalancerDeleted with another cluster name succeeded")
	}
	if len(e.router.Calls()) != 0 {
		t.Errorf("router calls = %v, want none", e.router.Calls())
	}
	if _, err := e.lb.EnsureLoadBalancer(ctx, "home", web, threeNodes()); err != nil {
		t.Errorf("Ensure with the configured name: %v", err)
	}
}

// A router that reports internal port 0 (miniupnpd 2.3.6) hides which
// nodePort a mapping forwards to. While no node is eligible, a mapping of
// unknown nodePort is withdrawn like one of a stale nodePort; one this
// process wrote with the wanted nodePort is kept.
func TestInternalPortZeroWithoutEligibleNode(t *testing.T) {
	down := []*v1.Node{newNode("node-a", addrA, notReady), newNode("node-b", addrB, notReady), newNode("node-c", addrC, notReady)}
	for _, tt := range []struct {
		name     string
		restart  bool // a new process: it wrote nothing
		wantKept bool
	}{
		{name: "written by this process", wantKept: true},
		{name: "written before a restart", restart: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, Config{}, fake.RouterConfig{ReportInternalPortZero: true})
			web := newService("default", "web", withPorts(port("http", v1.ProtocolTCP, 80, 30080)))
			web.Status.LoadBalancer = *e.mustEnsure(t, web, threeNodes())
			lb := e.lb
			if tt.restart {
				var err error
				if lb, err = New(Config{Client: e.router.Client(addrA), Clock: e.clock}); err != nil {
					t.Fatal(err)
				}
				lb.seeNodes(threeNodes())
			}
			_, err := lb.EnsureLoadBalancer(context.Background(), testCluster, web, down)
			if !errors.Is(err, ErrNoEligibleNode) {
				t.Errorf("Ensure = %v, want ErrNoEligibleNode", err)
			}
			if kept := len(e.router.Mappings()) == 1; kept != tt.wantKept {
				t.Errorf("mapping kept = %v, want %v (table %q)", kept, tt.wantKept, e.table())
			}
		})
	}
}

// An older Service that asks for another address than the router's
// (spec.loadBalancerIP) is never served, so it does not keep a younger one
// off the port it wants.
func TestArbitrationIgnoresServicesThatCannotBeServed(t *testing.T) {
	e := newEnv(t, Config{}, fake.RouterConfig{})
	node := newNode("node-a", addrA)
	older := newService("default", "older", withPorts(port("http", v1.ProtocolTCP, 80, 30080)))
	older.CreationTimestamp = metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	older.Spec.LoadBalancerIP = "203.0.113.7" // not the router's
	younger := newService("default", "younger", withPorts(port("http", v1.ProtocolTCP, 80, 30081)))
	younger.CreationTimestamp = metav1.NewTime(older.CreationTimestamp.Add(time.Second))
	if err := e.lb.Initialize(context.Background(), fakecluster.ClientBuilder(k8sfake.NewClientset(node, older, younger))); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ensure(t, older, []*v1.Node{node}); !errors.Is(err, ErrInvalidService) {
		t.Errorf("older Service: %v, want ErrInvalidService", err)
	}
	if _, err := e.ensure(t, younger, []*v1.Node{node}); err != nil {
		t.Errorf("younger Service: %v, want it served", err)
	}
}

// A deleted node's address may be given to another LAN host, which may write
// any description: a mapping to it counts as a Service's only when this
// process made it, or found it as the Service's while the node was one (so
// that it can be moved off the deleted node).
func TestDeletedNodesAddressIsNoLongerTrusted(t *testing.T) {
	e := newEnv(t, Config{}, fake.RouterConfig{})
	nodes := []*v1.Node{newNode("node-a", addrA), newNode("node-b", addrB)}
	web := lbService("default", "web", withPorts(port("http", v1.ProtocolTCP, 80, 30080)))
	e.mustEnsure(t, web, nodes)
	from := e.router.Mappings()[0].InternalClient
	gone, stays := nodes[0], nodes[1]
	if from == addrB {
		gone, stays = nodes[1], nodes[0]
	}
	e.lb.forgetNode(gone.Name) // as the node informer does on delete
	// web's own mapping moves off the deleted node.
	e.mustEnsure(t, web, []*v1.Node{stays})
	if ms := e.router.Mappings(); len(ms) != 1 || ms[0].InternalClient == from {
		t.Fatalf("table = %q, want web's mapping moved off %s", e.table(), from)
	}
	// A host now at the deleted node's address writes a description naming
	// another Service: not that Service's.
	forged := igd.Mapping{Protocol: igd.TCP, ExternalPort: 81, InternalClient: from, InternalPort: 81, Description: desc("default", "api", "http"), Enabled: true}
	e.router.Put(forged)
	api := newService("default", "api", withPorts(port("http", v1.ProtocolTCP, 81, 30081)))
	if _, err := e.ensure(t, api, []*v1.Node{stays}); !errors.Is(err, ErrPortInUse) {
		t.Errorf("Ensure of api = %v, want ErrPortInUse (the port is the LAN host's)", err)
	}
	if m, err := e.router.Client(from).GetPortMapping(context.Background(), igd.TCP, 81); err != nil || m.InternalClient != from {
		t.Errorf("the LAN host's mapping = %v, %v; want it untouched", m, err)
	}
}

// A mapping of ours whose lease is about to run out may expire, and a LAN
// host take its key, before a delete lands: it is left to expire, and the
// caller is told to come back after it.
func TestExpiringMappingIsLeftToExpire(t *testing.T) {
	e := newEnv(t, Config{Lease: time.Minute, RenewInterval: 30 * time.Second}, fake.RouterConfig{})
	web := newService("default", "web", withPorts(port("a", v1.ProtocolTCP, 80, 30080), port("b", v1.ProtocolTCP, 81, 30081)))
	e.mustEnsure(t, web, threeNodes())
	e.clock.Step(time.Minute - 2*time.Second) // 2 s of lease left
	e.calls()
	web.Spec.Ports = web.Spec.Ports[:1]
	_, err := e.ensure(t, web, threeNodes())
	var re *api.RetryError
	if !errors.As(err, &re) || re.RetryAfter() < 2*time.Second || re.RetryAfter() > 5*time.Second {
		t.Errorf("Ensure = %v, want a RetryError after the lease (2 s + 1 s)", err)
	}
	if c := e.calls(); c[fake.MethodDeletePortMapping] != 0 {
		t.Errorf("router calls = %v, want no delete of an expiring mapping", c)
	}
}

// Keys are read in ranges built from sorted runs, whatever order the caller
// gives them in.
func TestReadSortsItsKeys(t *testing.T) {
	e := newEnv(t, Config{}, fake.RouterConfig{})
	web := newService("default", "web", withPorts(port("b", v1.ProtocolTCP, 90, 30090), port("a", v1.ProtocolTCP, 80, 30080)))
	e.mustEnsure(t, web, threeNodes())
	got, err := e.lb.read(context.Background(), newOwner(testCluster, "default", "web"), []igd.Key{k(igd.TCP, 90), k(igd.TCP, 80), k(igd.TCP, 90)})
	if err != nil || len(got.mappings) != 2 {
		t.Errorf("read = %v, %v; want both mappings", got, err)
	}
}

// A router answer the igd client refuses (0.0.0.0) gives no address: the
// Service is still warned once, not on every call.
func TestUnusableExternalIPWarnedOnce(t *testing.T) {
	e := newEnv(t, Config{}, fake.RouterConfig{})
	nodes := threeNodes()
	web := lbService("default", "web")
	web.Status.LoadBalancer = *e.mustEnsure(t, web, nodes)
	r := startBackground(t, e, nodes[0], nodes[1], nodes[2], web)
	e.router.Intercept(fake.RouterHooks{ExternalIP: func(context.Context, netip.Addr, fake.AddrFunc) (netip.Addr, error) {
		return netip.Addr{}, &igderr.ExternalIPError{Value: "0.0.0.0", Reason: "unspecified"}
	}})
	for range 3 {
		r.tick(t)
		if _, err := e.ensure(t, r.service(t, "default", "web"), nodes); !errors.Is(err, ErrExternalIPNotUsable) {
			t.Fatalf("Ensure = %v, want ErrExternalIPNotUsable", err)
		}
	}
	// Events reach the API server asynchronously, and repeats are folded
	// into one event's count: give them time, then count occurrences.
	time.Sleep(500 * time.Millisecond)
	evs, err := r.client.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := int32(0)
	for _, ev := range evs.Items {
		if ev.Reason == EventReasonExternalIPNotPublic {
			n += max(ev.Count, 1)
		}
	}
	if n != 1 {
		t.Errorf("%d Warning events, want 1", n)
	}
}

// ensureThenDeleteConcurrently ensures six Services of three ports each
// (named prefix0..prefix5, external ports from base), then deletes them all
// at once, newest first: their mappings hold the lowest entry indexes
// (miniupnpd lists newest first), so on an IGD:1 router their deletes shift
// the entries under the older Services' reads.
func ensureThenDeleteConcurrently(t *testing.T, lb *LoadBalancer, nodes []*v1.Node, prefix string, base int32) {
	t.Helper()
	ctx := context.Background()
	var svcs []*v1.Service
	for i := range int32(6) {
		svc := lbService("default", fmt.Sprint(prefix, i), withPorts(
			port("a", v1.ProtocolTCP, base+i, 30000),
			port("b", v1.ProtocolTCP, base+1000+i, 30001),
			port("c", v1.ProtocolUDP, base+2000+i, 30002)))
		st, err := lb.EnsureLoadBalancer(ctx, testCluster, svc, nodes)
		if err != nil {
			t.Fatal(err)
		}
		svc.Status.LoadBalancer = *st
		svcs = append(svcs, svc)
	}
	var wg sync.WaitGroup
	for i, svc := range svcs {
		wg.Go(func() {
			time.Sleep(time.Duration(len(svcs)-1-i) * 8 * time.Millisecond)
			if err := lb.EnsureLoadBalancerDeleted(ctx, testCluster, svc); err != nil {
				t.Errorf("delete %s: %v", svc.Name, err)
			}
		})
	}
	wg.Wait()
}

// holderAndNewcomer returns two served Services of one cluster wanting TCP
// external port ext (to nodePorts 30080 and 30081): the holder's status
// lists the port, the newcomer is the older; neither status nor age gives a
// key that no process holds to one of them.
func holderAndNewcomer(ext int32) (holder, newcomer *v1.Service) {
	holder = lbService("default", "holder", withPorts(port("http", v1.ProtocolTCP, ext, 30080)))
	holder.CreationTimestamp = metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 1, 0, time.UTC))
	holder.Status.LoadBalancer = v1.LoadBalancerStatus{Ingress: []v1.LoadBalancerIngress{{IP: "198.51.100.1",
		Ports: []v1.PortStatus{{Port: ext, Protocol: v1.ProtocolTCP}}}}}
	newcomer = lbService("default", "newcomer", withPorts(port("http", v1.ProtocolTCP, ext, 30081)))
	newcomer.CreationTimestamp = metav1.NewTime(holder.CreationTimestamp.Add(-time.Second))
	return holder, newcomer
}
