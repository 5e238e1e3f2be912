package loadbalancer

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/api"
	"k8s.io/klog/v2"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/internal/upnp"
)

func TestNewValidatesConfig(t *testing.T) {
	r := fake.NewRouter(fake.RouterConfig{})
	c := r.Client(addrA)
	tests := []struct {
		name      string
		cfg       Config
		wantField string // "" = valid
	}{
		{"zero but client", Config{Client: c}, ""},
		{"no client", Config{}, "Client"},
		{"permanent", Config{Client: c, Lease: PermanentLease}, ""},
		{"lease too short", Config{Client: c, Lease: 30 * time.Second}, "Lease"},
		{"lease too long", Config{Client: c, Lease: 8 * 24 * time.Hour}, "Lease"},
		{"lease not whole seconds", Config{Client: c, Lease: time.Minute + time.Millisecond}, "Lease"},
		{"renew over half the lease", Config{Client: c, Lease: time.Hour, RenewInterval: 31 * time.Minute}, "RenewInterval"},
		{"bad selection", Config{Client: c, Services: ServiceSelection(7)}, "Services"},
		{"secure mode without node: found lazily", Config{Client: c, SecureMode: true}, ""},
		{"negative retry", Config{Client: c, RetryAfter: -time.Second}, "RetryAfter"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lb, err := New(tt.cfg)
			if tt.wantField == "" {
				if err != nil || lb == nil {
					t.Fatalf("New = %v, %v; want a LoadBalancer", lb, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "Config."+tt.wantField) {
				t.Fatalf("New error = %v; want one naming Config.%s", err, tt.wantField)
			}
		})
	}
}

func TestConfigDefaults(t *testing.T) {
	r := fake.NewRouter(fake.RouterConfig{})
	lb, err := New(Config{Client: r.Client(addrA)})
	if err != nil {
		t.Fatal(err)
	}
	if lb.cfg.Lease != DefaultLease || lb.cfg.RenewInterval != DefaultMaxRenewInterval || lb.cfg.RetryAfter != DefaultRetryAfter || lb.cfg.Clock == nil {
		t.Errorf("defaults: lease %s renew %s retry %s clock %v", lb.cfg.Lease, lb.cfg.RenewInterval, lb.cfg.RetryAfter, lb.cfg.Clock)
	}
	lb, err = New(Config{Client: r.Client(addrA), Lease: 4 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if lb.cfg.RenewInterval != 2*time.Minute {
		t.Errorf("renew interval for a 4m lease = %s, want 2m", lb.cfg.RenewInterval)
	}
	lb, err = New(Config{Client: r.Client(addrA), Lease: 4 * time.Minute, ProbeInterval: ProbeAtRenewal})
	if err != nil {
		t.Fatal(err)
	}
	if lb.cfg.ProbeInterval != 2*time.Minute {
		t.Errorf("ProbeAtRenewal for a 4m lease probes every %s, want 2m (the renewal interval)", lb.cfg.ProbeInterval)
	}
	if calls := r.Calls(); len(calls) != 0 {
		t.Errorf("New made router calls: %v", calls)
	}
}

func TestEnsureCreatesMappingsAndStatus(t *testing.T) {
	e := newEnv(t, Config{}, fake.RouterConfig{})
	svc := newService("default", "web", withPorts(
		port("http", v1.ProtocolTCP, 8080, 30080),
		port("dns", v1.ProtocolUDP, 5353, 30053),
	))
	nodes := threeNodes()
	st := e.mustEnsure(t, svc, nodes)

	ms := e.router.Mappings()
	if len(ms) != 2 {
		t.Fatalf("table = %v, want 2 mappings", e.table())
	}
	to := ms[0].InternalClient
	if to != addrA && to != addrB && to != addrC {
		t.Fatalf("mapping targets %s, not a node", to)
	}
	diffRows(t, "table", e.table(), []string{
		row(igd.TCP, 8080, to, 30080, desc("default", "web", "http")),
		row(igd.UDP, 5353, to, 30053, desc("default", "web", "dns")),
	})
	for _, m := range ms {
		if m.Lease != DefaultLease {
			t.Errorf("%s lease = %s, want %s", m.Key(), m.Lease, DefaultLease)
		}
	}
	if len(st.Ingress) != 1 || st.Ingress[0].IP != fake.DefaultExternalIP.String() {
		t.Fatalf("status = %+v, want ingress %s", st, fake.DefaultExternalIP)
	}
	if st.Ingress[0].IPMode == nil || *st.Ingress[0].IPMode != v1.LoadBalancerIPModeVIP {
		t.Errorf("ipMode = %v, want VIP", st.Ingress[0].IPMode)
	}
	wantPorts := []v1.PortStatus{{Port: 8080, Protocol: v1.ProtocolTCP}, {Port: 5353, Protocol: v1.ProtocolUDP}}
	if got := st.Ingress[0].Ports; len(got) != 2 || got[0] != wantPorts[0] || got[1] != wantPorts[1] {
		t.Errorf("port status = %+v, want %+v", got, wantPorts)
	}
	// One listing per protocol of the Service's ports, never the whole table.
	if c := e.calls(); c[fake.MethodListPortMappings] != 2 || c[fake.MethodAddPortMapping] != 2 || c[fake.MethodDeletePortMapping] != 0 || c[fake.MethodExternalIP] != 1 {
		t.Errorf("router calls = %v, want 1 external IP, 2 lists (TCP, UDP), 2 adds", c)
	}

	// The same Ensure again changes nothing and costs a read of its keys.
	st2 := e.mustEnsure(t, svc, nodes)
	if c := e.calls(); len(c) != 2 || c[fake.MethodExternalIP] != 1 || c[fake.MethodListPortMappings] != 2 {
		t.Errorf("no-op Ensure router calls = %v, want exactly 2 lists (TCP, UDP) and the external IP", c)
	}
	if st2.Ingress[0].IP != st.Ingress[0].IP {
		t.Errorf("status changed on no-op: %+v", st2)
	}
}

func TestEnsureRefusesBadInputWithoutTouchingRouter(t *testing.T) {
	tests := []struct {
		name  string
		svc   *v1.Service
		field string
	}{
		{"SCTP", newService("default", "s", withPorts(port("x", v1.ProtocolSCTP, 9000, 30900))), "spec.ports[0].protocol"},
		{"no nodePort", newService("default", "s", withPorts(port("http", v1.ProtocolTCP, 80, 30080), port("x", v1.ProtocolTCP, 9000, 0))), "spec.ports[1].nodePort"},
		{"IPv6 only", newService("default", "s", func(s *v1.Service) { s.Spec.IPFamilies = []v1.IPFamily{v1.IPv6Protocol} }), "spec.ipFamilies"},
		{"source ranges", newService("default", "s", func(s *v1.Service) { s.Spec.LoadBalancerSourceRanges = []string{"203.0.113.0/24"} }), "spec.loadBalancerSourceRanges"},
		{"source ranges annotation", newService("default", "s", withAnnotation(annotationSourceRanges, "203.0.113.0/24")), "metadata.annotations[" + annotationSourceRanges + "]"},
		{"loadBalancerIP of another address", newService("default", "s", func(s *v1.Service) { s.Spec.LoadBalancerIP = "198.51.101.8" }), "spec.loadBalancerIP"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, Config{}, fake.RouterConfig{})
			_, err := e.ensure(t, tt.svc, threeNodes())
			if !errors.Is(err, ErrInvalidService) {
				t.Fatalf("Ensure error = %v, want ErrInvalidService", err)
			}
			var se *ServiceError
			if !errors.As(err, &se) || se.Field != tt.field || se.Service != "default/s" {
				t.Fatalf("Ensure error = %v, want a ServiceError for default/s field %s", err, tt.field)
			}
			if !strings.Contains(err.Error(), "default/s") || !strings.Contains(err.Error(), tt.field) {
				t.Errorf("error %q does not name the Service and field", err)
			}
			if n := e.router.CallCount(fake.MethodAddPortMapping) + e.router.CallCount(fake.MethodDeletePortMapping); n != 0 {
				t.Errorf("router was changed: %v", e.router.Calls())
			}
		})
	}
}

// Every problem of a Service's spec is reported, each as a ServiceError
// naming its field, not only the first found.
func TestEnsureNamesEveryBadField(t *testing.T) {
	tests := []struct {
		name   string
		svc    *v1.Service
		fields []string
	}{
		{"IPv6 only (no pinhole client), no nodePort", newService("default", "s", withFamilies(v1.IPv6Protocol), withPorts(port("x", v1.ProtocolTCP, 9000, 0))),
			[]string{"spec.ipFamilies", "spec.ports[0].nodePort"}},
		{"SCTP, source ranges", newService("default", "s", withPorts(port("x", v1.ProtocolSCTP, 9000, 30900)), func(s *v1.Service) { s.Spec.LoadBalancerSourceRanges = []string{"203.0.113.0/24"} }),
			[]string{"spec.loadBalancerSourceRanges", "spec.ports[0].protocol"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, Config{}, fake.RouterConfig{})
			_, err := e.ensure(t, tt.svc, threeNodes())
			var fields []string
			var walk func(error)
			walk = func(err error) {
				if se, ok := err.(*ServiceError); ok {
					fields = append(fields, se.Field)
				}
				if j, ok := err.(interface{ Unwrap() []error }); ok {
					for _, e := range j.Unwrap() {
						walk(e)
					}
				} else if e := errors.Unwrap(err); e != nil {
					walk(e)
				}
			}
			walk(err)
			slices.Sort(fields)
			if diff := cmp.Diff(tt.fields, fields); diff != "" {
				t.Errorf("fields named by the ServiceErrors of %v (-want +got):\n%s", err, diff)
			}
		})
	}
}

func TestEnsureAcceptsOwnLoadBalancerIP(t *testing.T) {
	e := newEnv(t, Config{}, fake.RouterConfig{})
	svc := newService("default", "web", func(s *v1.Service) { s.Spec.LoadBalancerIP = fake.DefaultExternalIP.String() })
	e.mustEnsure(t, svc, threeNodes())
	if len(e.router.Mappings()) != 1 {
		t.Fatalf("table = %v", e.table())
	}
}

// Foreign mappings: another host; our host with another description; our
// description pointing at a non-node address; another cluster; another
// Service of this cluster. None may be deleted or overwritten by any
// operation, and the Service's other ports still converge.
func TestForeignMappingsAreNeverTouched(t *testing.T) {
	e := newEnv(t, Config{}, fake.RouterConfig{})
	other := newOwner("other-cluster", "default", "web")
	foreign := []igd.Mapping{
		{Protocol: igd.TCP, ExternalPort: 80, InternalClient: addrStranger, InternalPort: 80, Description: "game console"},
		{Protocol: igd.TCP, ExternalPort: 81, InternalClient: addrA, InternalPort: 8081, Description: "someone else on node-a"},
		{Protocol: igd.TCP, ExternalPort: 82, InternalClient: addrStranger, InternalPort: 30082, Description: desc("default", "web", "c")},
		{Protocol: igd.TCP, ExternalPort: 83, InternalClient: addrB, InternalPort: 30083, Description: other.description("d")},
		{Protocol: igd.TCP, ExternalPort: 84, InternalClient: addrB, InternalPort: 30084, Description: desc("default", "api", "e")},
	}
	var want []string
	for _, m := range foreign {
		m.Lease = 0
		e.router.Put(m)
		want = append(want, row(m.Protocol, m.ExternalPort, m.InternalClient, m.InternalPort, m.Description))
	}
	svc := newService("default", "web", withPorts(
		port("a", v1.ProtocolTCP, 80, 30080),
		port("b", v1.ProtocolTCP, 81, 30081),
		port("c", v1.ProtocolTCP, 82, 30082),
		port("d", v1.ProtocolTCP, 83, 30083),
		port("e", v1.ProtocolTCP, 84, 30084),
		port("f", v1.ProtocolTCP, 85, 30085),
	))
	nodes := threeNodes()
	_, err := e.ensure(t, svc, nodes)
	err = notForwarded(e.lb, svc, err) // the free port is served; the held ones say why
	if !errors.Is(err, ErrPortInUse) {
		t.Fatalf("Ensure error = %v, want ErrPortInUse", err)
	}
	for _, m := range foreign {
		var found bool
		for _, line := range strings.Split(err.Error(), "\n") {
			if strings.Contains(line, "default/web") && strings.Contains(line, m.Key().String()) &&
				strings.Contains(line, m.InternalClient.String()) && strings.Contains(line, m.Description) {
				found = true
			}
		}
		if !found {
			t.Errorf("error does not name service, port %s and holder %s %q:\n%v", m.Key(), m.InternalClient, m.Description, err)
		}
	}
	// Port 85 converged; everything else as it was.
	var to netip.Addr
	for _, m := range e.router.Mappings() {
		if m.ExternalPort == 85 {
			to = m.InternalClient
		}
	}
	if !to.IsValid() {
		t.Fatalf("port 85 not mapped: %v", e.table())
	}
	diffRows(t, "table after Ensure", e.table(), append(want[:len(want):len(want)], row(igd.TCP, 85, to, 30085, desc("default", "web", "f"))))

	// Update with fewer ports: drops our 85 only.
	svc2 := svc.DeepCopy()
	svc2.Spec.Ports = svc2.Spec.Ports[:5]
	if err := e.lb.UpdateLoadBalancer(context.Background(), testCluster, svc2, nodes); !errors.Is(err, ErrPortInUse) {
		t.Fatalf("Update error = %v, want ErrPortInUse", err)
	}
	diffRows(t, "table after Update", e.table(), want)

	// Delete: nothing of ours left, nothing foreign touched.
	e.mustEnsure(t, newService("default", "web", withPorts(port("f", v1.ProtocolTCP, 85, 30085))), nodes)
	if err := e.lb.EnsureLoadBalancerDeleted(context.Background(), testCluster, svc); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	diffRows(t, "table after Delete", e.table(), want)
	for _, c := range e.router.Calls() {
		if c.Method == fake.MethodDeletePortMapping && c.Key.ExternalPort != 85 {
			t.Errorf("deleted foreign key %s", c.Key)
		}
		if c.Method == fake.MethodAddPortMapping && c.Key.ExternalPort != 85 {
			t.Errorf("wrote foreign key %s", c.Key)
		}
	}
}

func TestUpdateConvergesPorts(t *testing.T) {
	e := newEnv(t, Config{}, fake.RouterConfig{})
	nodes := threeNodes()
	svc := newService("default", "web", withPorts(
		port("a", v1.ProtocolTCP, 80, 30080),
		port("b", v1.ProtocolTCP, 81, 30081),
		port("c", v1.ProtocolUDP, 82, 30082),
	))
	e.mustEnsure(t, svc, nodes)
	to := e.router.Mappings()[0].InternalClient
	e.calls()

	// Port b removed, c's nodePort changed, d added.
	svc2 := newService("default", "web", withPorts(
		port("a", v1.ProtocolTCP, 80, 30080),
		port("c", v1.ProtocolUDP, 82, 31082),
		port("d", v1.ProtocolTCP, 83, 30083),
	))
	if err := e.lb.UpdateLoadBalancer(context.Background(), testCluster, svc2, nodes); err != nil {
		t.Fatal(err)
	}
	diffRows(t, "table", e.table(), []string{
		row(igd.TCP, 80, to, 30080, desc("default", "web", "a")),
		row(igd.UDP, 82, to, 31082, desc("default", "web", "c")),
		row(igd.TCP, 83, to, 30083, desc("default", "web", "d")),
	})
	if c := e.calls(); c[fake.MethodListPortMappings] != 2 || c[fake.MethodAddPortMapping] != 2 || c[fake.MethodDeletePortMapping] != 1 {
		t.Errorf("router calls = %v, want 2 lists (TCP, UDP), 2 adds (c updated in place, d), 1 delete (b)", c)
	}
}

// TestRenamedPortRelabelsOnce renames a Service port, which changes only the
// description of its mapping. miniupnpd (and the fake) keep the description
// of a mapping re-added with the same internal client and port, so the
// mapping is deleted and added again; the next Ensure must find it up to
// date rather than rewrite it on every pass.
func TestRenamedPortRelabelsOnce(t *testing.T) {
	tests := []struct {
		name        string
		cfg         Config
		rc          fake.RouterConfig
		newNodePort int32
		wantAdds    int
		wantDeletes int
	}{
		{"same nodePort: delete and add", Config{}, fake.RouterConfig{}, 30080, 1, 1},
		{"secure mode, same nodePort: delete and add", Config{SecureMode: true, NodeName: "node-a"}, fake.RouterConfig{SecureMode: true}, 30080, 1, 1},
		{"new nodePort: replaced in place", Config{}, fake.RouterConfig{}, 31080, 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, tt.cfg, tt.rc)
			nodes := threeNodes()
			dns := port("dns", v1.ProtocolUDP, 5353, 30053)
			e.mustEnsure(t, newService("default", "web", withPorts(port("http", v1.ProtocolTCP, 8080, 30080), dns)), nodes)
			to := e.router.Mappings()[0].InternalClient
			e.calls()

			renamed := newService("default", "web", withPorts(port("web", v1.ProtocolTCP, 8080, tt.newNodePort), dns))
			e.mustEnsure(t, renamed, nodes)
			diffRows(t, "table after rename", e.table(), []string{
				row(igd.TCP, 8080, to, uint16(tt.newNodePort), desc("default", "web", "web")),
				row(igd.UDP, 5353, to, 30053, desc("default", "web", "dns")),
			})
			if c := e.calls(); c[fake.MethodListPortMappings] != 2 || c[fake.MethodAddPortMapping] != tt.wantAdds || c[fake.MethodDeletePortMapping] != tt.wantDeletes {
				t.Errorf("rename: router calls = %v, want 2 lists, %d add, %d delete", c, tt.wantAdds, tt.wantDeletes)
			}
			if ms := e.router.Mappings(); len(ms) == 2 {
				for _, m := range ms {
					if m.Lease != DefaultLease {
						t.Errorf("%s lease = %s, want %s", m.Key(), m.Lease, DefaultLease)
					}
				}
			}

			// Converged: the next Ensure only reads its keys.
			e.mustEnsure(t, renamed, nodes)
			if c := e.calls(); len(c) != 2 || c[fake.MethodExternalIP] != 1 || c[fake.MethodListPortMappings] != 2 {
				t.Errorf("Ensure after rename: router calls = %v, want exactly 2 lists and the external IP", c)
			}

			// Renamed back: the old name is written again.
			e.mustEnsure(t, newService("default", "web", withPorts(port("http", v1.ProtocolTCP, 8080, 30080), dns)), nodes)
			diffRows(t, "table after renaming back", e.table(), []string{
				row(igd.TCP, 8080, to, 30080, desc("default", "web", "http")),
				row(igd.UDP, 5353, to, 30053, desc("default", "web", "dns")),
			})
		})
	}
}

// cutDescriptions makes a router store every description cut to keep
// bytes, as some routers do.
func cutDescriptions(keep int) fake.RouterHooks {
	return fake.RouterHooks{AddPortMapping: func(ctx context.Context, _ netip.Addr, m igd.Mapping, next fake.AddFunc) (igd.Mapping, error) {
		m.Description = m.Description[:min(keep, len(m.Description))]
		return next(ctx, m)
	}}
}

// TestRouterAlteringDescriptionsDoesNotChurn uses a router that stores
// descriptions cut short: what it reports never equals what was written, and
// the mapping must not be deleted and re-added on every pass for that.
func TestRouterAlteringDescriptionsDoesNotChurn(t *testing.T) {
	e := newEnv(t, Config{}, fake.RouterConfig{})
	const keep = 28 // "ck1 kubernetes/default/web h"
	e.router.Intercept(cutDescriptions(keep))
	nodes := threeNodes()
	svc := newService("default", "web", withPorts(port("http", v1.ProtocolTCP, 8080, 30080)))
	e.mustEnsure(t, svc, nodes)
	if ms := e.router.Mappings(); len(ms) != 1 || len(ms[0].Description) != keep {
		t.Fatalf("table = %v, want one mapping with a description cut to %d bytes", e.table(), keep)
	}
	e.calls()
	for i := range 3 {
		e.mustEnsure(t, svc, nodes)
		if c := e.calls(); len(c) != 2 || c[fake.MethodExternalIP] != 1 || c[fake.MethodListPortMappings] != 1 {
			t.Errorf("Ensure %d: router calls = %v, want exactly 1 list and the external IP", i+2, c)
		}
	}

	// A rename is still written (as far as the router keeps it), once.
	renamed := newService("default", "web", withPorts(port("www", v1.ProtocolTCP, 8080, 30080)))
	e.mustEnsure(t, renamed, nodes)
	if c := e.calls(); c[fake.MethodAddPortMapping] != 1 || c[fake.MethodDeletePortMapping] != 1 {
		t.Errorf("rename: router calls = %v, want 1 delete, 1 add", c)
	}
	if ms := e.router.Mappings(); len(ms) != 1 || ms[0].Description != desc("default", "web", "www")[:keep] {
		t.Errorf("table after rename = %v, want the new description cut to %d bytes", e.table(), keep)
	}
	e.mustEnsure(t, renamed, nodes)
	if c := e.calls(); len(c) != 2 || c[fake.MethodExternalIP] != 1 || c[fake.MethodListPortMappings] != 1 {
		t.Errorf("Ensure after rename: router calls = %v, want exactly 1 list and the external IP", c)
	}
}

// A router that keeps fewer bytes of a description than the owner and the
// space after it still lets the Service recognise, renew and delete its own
// mapping (cut just after the owner: "ck1 kubernetes/default/webx ").
func TestRouterCuttingDescriptionsAfterTheOwner(t *testing.T) {
	e := newEnv(t, Config{}, fake.RouterConfig{})
	const keep = 28
	e.router.Intercept(cutDescriptions(keep))
	nodes := threeNodes()
	svc := newService("default", "webx", withPorts(port("http", v1.ProtocolTCP, 8080, 30080)))
	e.mustEnsure(t, svc, nodes)
	if ms := e.router.Mappings(); len(ms) != 1 || ms[0].Description != "ck1 kubernetes/default/webx " {
		t.Fatalf("table = %v, want one mapping cut after the owner", e.table())
	}
	e.mustEnsure(t, svc, nodes)
	if err := e.lb.EnsureLoadBalancerDeleted(context.Background(), testCluster, svc); err != nil {
		t.Fatal(err)
	}
	diffRows(t, "table after delete", e.table(), nil)
}

func TestNodeChoice(t *testing.T) {
	t.Run("deterministic whatever the node order", func(t *testing.T) {
		nodes := threeNodes()
		reversed := []*v1.Node{nodes[2], nodes[1], nodes[0]}
		for _, name := range []string{"a", "b", "web", "api", "db"} {
			e1 := newEnv(t, Config{}, fake.RouterConfig{})
			e2 := newEnv(t, Config{}, fake.RouterConfig{})
			e1.mustEnsure(t, newService("default", name), nodes)
			e2.mustEnsure(t, newService("default", name), reversed)
			if a, b := e1.router.Mappings()[0].InternalClient, e2.router.Mappings()[0].InternalClient; a != b {
				t.Errorf("service %s: %s with one node order, %s with another", name, a, b)
			}
		}
	})
	t.Run("spreads Services over nodes", func(t *testing.T) {
		e := newEnv(t, Config{}, fake.RouterConfig{})
		used := map[netip.Addr]int{}
		for i := range 30 {
			svc := newService("default", "svc"+string(rune('a'+i%26))+string(rune('a'+i/26)), withPorts(port("p", v1.ProtocolTCP, int32(9000+i), int32(30000+i))))
			e.mustEnsure(t, svc, threeNodes())
		}
		for _, m := range e.router.Mappings() {
			used[m.InternalClient]++
		}
		if len(used) != 3 {
			t.Errorf("30 Services used nodes %v, want all three", used)
		}
	})
	t.Run("only Ready nodes with an IPv4 InternalIP", func(t *testing.T) {
		e := newEnv(t, Config{}, fake.RouterConfig{})
		v6 := newNode("node-v6", addrA)
		v6.Status.Addresses = []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "2001:db8::1"}}
		excludedNode := newNode("node-x", addrA, func(n *v1.Node) { n.Labels = map[string]string{v1.LabelNodeExcludeBalancers: "true"} })
		tainted := newNode("node-t", addrA, func(n *v1.Node) { n.Spec.Taints = []v1.Taint{{Key: toBeDeletedTaint}} })
		nodes := []*v1.Node{newNode("node-a", addrA, notReady), v6, excludedNode, tainted, newNode("node-c", addrC)}
		for i := range 5 {
			e.mustEnsure(t, newService("default", "s"+string(rune('a'+i)), withPorts(port("p", v1.ProtocolTCP, int32(80+i), 30080))), nodes)
		}
		for _, m := range e.router.Mappings() {
			if m.InternalClient != addrC {
				t.Errorf("%s maps to %s; only node-c (%s) is eligible", m.Key(), m.InternalClient, addrC)
			}
		}
	})
	t.Run("sticky: a new node moves nothing; a NotReady node is left", func(t *testing.T) {
		e := newEnv(t, Config{}, fake.RouterConfig{})
		svc := newService("default", "web", withPorts(port("a", v1.ProtocolTCP, 80, 30080), port("b", v1.ProtocolTCP, 81, 30081)))
		e.mustEnsure(t, svc, []*v1.Node{newNode("node-a", addrA)})
		nodes := append(threeNodes(), newNode("node-d", netip.MustParseAddr("192.0.2.13")), newNode("node-e", netip.MustParseAddr("192.0.2.14")))
		e.calls()
		if err := e.lb.UpdateLoadBalancer(context.Background(), testCluster, svc, nodes); err != nil {
			t.Fatal(err)
		}
		for _, m := range e.router.Mappings() {
			if m.InternalClient != addrA {
				t.Fatalf("a new node moved %s to %s", m.Key(), m.InternalClient)
			}
		}
		if c := e.calls(); c[fake.MethodAddPortMapping]+c[fake.MethodDeletePortMapping] != 0 {
			t.Errorf("calls %v: nothing should change", c)
		}
		nodes[0] = newNode("node-a", addrA, notReady)
		if err := e.lb.UpdateLoadBalancer(context.Background(), testCluster, svc, nodes); err != nil {
			t.Fatal(err)
		}
		ms := e.router.Mappings()
		if len(ms) != 2 || ms[0].InternalClient == addrA || ms[0].InternalClient != ms[1].InternalClient {
			t.Fatalf("after node-a went NotReady: %v", e.table())
		}
		if c := e.calls(); c[fake.MethodDeletePortMapping] != 2 || c[fake.MethodAddPortMapping] != 2 || c[fake.MethodListPortMappings] != 1 {
			t.Errorf("re-point calls = %v, want 1 list, 2 deletes, 2 adds", c)
		}
	})
}

func TestNoEligibleNodeAsksForRetry(t *testing.T) {
	e := newEnv(t, Config{RetryAfter: 7 * time.Second}, fake.RouterConfig{})
	nodes := []*v1.Node{newNode("node-a", addrA, notReady)}
	_, err := e.ensure(t, newService("default", "web"), nodes)
	if !errors.Is(err, ErrNoEligibleNode) {
		t.Fatalf("error = %v, want ErrNoEligibleNode", err)
	}
	var re *api.RetryError
	if !errors.As(err, &re) || re.RetryAfter() != 7*time.Second {
		t.Fatalf("error = %v, want an api.RetryError after 7s", err)
	}
	if !strings.Contains(err.Error(), "node node-a is not Ready") || !strings.Contains(err.Error(), "default/web") {
		t.Errorf("error %q does not say which Service and why node-a is not eligible", err)
	}
	if n := e.router.CallCount(fake.MethodAddPortMapping); n != 0 {
		t.Errorf("%d adds with no eligible node", n)
	}
}

func TestDelete(t *testing.T) {
	e := newEnv(t, Config{}, fake.RouterConfig{})
	nodes := threeNodes()
	web := newService("default", "web", withPorts(port("a", v1.ProtocolTCP, 80, 30080), port("b", v1.ProtocolUDP, 80, 30081)))
	api := newService("default", "api", withPorts(port("a", v1.ProtocolTCP, 81, 30090)))
	e.mustEnsure(t, web, nodes)
	e.mustEnsure(t, api, nodes)
	apiRows := []string{}
	for _, m := range e.router.Mappings() {
		if m.ExternalPort == 81 {
			apiRows = append(apiRows, row(m.Protocol, m.ExternalPort, m.InternalClient, m.InternalPort, m.Description))
		}
	}

	// The Service is no longer valid: type changed, ports and nodePorts gone.
	invalid := web.DeepCopy()
	invalid.Spec.Type = v1.ServiceTypeClusterIP
	invalid.Spec.Ports = []v1.ServicePort{port("x", v1.ProtocolSCTP, 1, 0)}
	e.calls()
	if err := e.lb.EnsureLoadBalancerDeleted(context.Background(), testCluster, invalid); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	diffRows(t, "table", e.table(), apiRows)
	if c := e.calls(); c[fake.MethodListPortMappings] != 2 || c[fake.MethodDeletePortMapping] != 2 || c[fake.MethodAddPortMapping] != 0 {
		t.Errorf("Delete calls = %v, want 2 lists (TCP, UDP) + 2 deletes", c)
	}
	// Idempotent.
	if err := e.lb.EnsureLoadBalancerDeleted(context.Background(), testCluster, invalid); err != nil {
		t.Fatalf("second Delete: %v", err)
	}
	if c := e.calls(); c[fake.MethodDeletePortMapping] != 0 {
		t.Errorf("second Delete calls = %v, want no delete", c)
	}
	// The freed port can be taken by another Service.
	e.mustEnsure(t, newService("default", "other", withPorts(port("a", v1.ProtocolTCP, 80, 30100))), nodes)
}

func TestServiceSelection(t *testing.T) {
	for _, key := range []string{AnnotationLoadBalancerType, LegacyAnnotationLoadBalancerType} {
		t.Run(key, func(t *testing.T) {
			e := newEnv(t, Config{Services: AnnotatedServices}, fake.RouterConfig{})
			nodes := threeNodes()
			plain := newService("default", "plain", unannotated)
			if _, err := e.ensure(t, plain, nodes); err != cloudprovider.ImplementedElsewhere { //nolint:errorlint // upstream compares with ==
				t.Fatalf("unannotated Ensure = %v, want exactly ImplementedElsewhere", err)
			}
			if err := e.lb.UpdateLoadBalancer(context.Background(), testCluster, plain, nodes); err != cloudprovider.ImplementedElsewhere { //nolint:errorlint
				t.Fatalf("unannotated Update = %v, want exactly ImplementedElsewhere", err)
			}
			if len(e.router.Mappings()) != 0 {
				t.Fatalf("unannotated Service mapped: %v", e.table())
			}
			svc := newService("default", "web", unannotated, withAnnotation(key, AnnotationValue))
			e.mustEnsure(t, svc, nodes)
			if len(e.router.Mappings()) != 1 {
				t.Fatalf("annotated Service not mapped: %v", e.table())
			}
			// Annotation removed: upstream calls Ensure, not Delete.
			delete(svc.Annotations, key)
			if _, err := e.ensure(t, svc, nodes); err != cloudprovider.ImplementedElsewhere { //nolint:errorlint
				t.Fatalf("Ensure after opt-out = %v, want exactly ImplementedElsewhere", err)
			}
			if len(e.router.Mappings()) != 0 {
				t.Fatalf("mappings left after opt-out: %v", e.table())
			}
		})
	}
}

func TestRouterRefusedPortNamesReason(t *testing.T) {
	e := newEnv(t, Config{}, fake.RouterConfig{})
	// miniupnpd answers 606 for ports outside its allow rules (below 1024 in the lab).
	e.router.Intercept(fake.RouterHooks{AddPortMapping: func(ctx context.Context, _ netip.Addr, m igd.Mapping, next fake.AddFunc) (igd.Mapping, error) {
		if m.ExternalPort < 1024 {
			return igd.Mapping{}, &igd.UPnPError{Action: "AddPortMapping", Code: upnp.CodeNotAuthorized, Description: "Action not authorized"}
		}
		return next(ctx, m)
	}})
	svc := newService("default", "web", withPorts(port("low", v1.ProtocolTCP, 80, 30080), port("high", v1.ProtocolTCP, 8080, 30081)))
	_, err := e.ensure(t, svc, threeNodes())
	err = notForwarded(e.lb, svc, err) // 8080 is served; 80 says why
	if !errors.Is(err, igd.ErrNotAuthorized) {
		t.Fatalf("error = %v, want igd.ErrNotAuthorized", err)
	}
	var pe *PortError
	if !errors.As(err, &pe) || pe.Service != "default/web" || pe.Key != (igd.Key{Protocol: igd.TCP, ExternalPort: 80}) {
		t.Fatalf("error = %v, want a PortError for default/web TCP/80", err)
	}
	if !strings.Contains(err.Error(), "Action not authorized") {
		t.Errorf("error %q does not carry the router's reason", err)
	}
	if ms := e.router.Mappings(); len(ms) != 1 || ms[0].ExternalPort != 8080 {
		t.Errorf("table = %v, want only 8080", e.table())
	}
	// The refused port holds no reservation: another Service may try it.
	if _, ok := e.lb.heldKeys()[igd.Key{Protocol: igd.TCP, ExternalPort: 80}]; ok {
		t.Error("a refused port stays reserved")
	}
}

func TestFailurePartWayConverges(t *testing.T) {
	e := newEnv(t, Config{}, fake.RouterConfig{})
	second := fake.Nth(2)
	e.router.Intercept(fake.RouterHooks{AddPortMapping: func(ctx context.Context, _ netip.Addr, m igd.Mapping, next fake.AddFunc) (igd.Mapping, error) {
		if second() {
			return igd.Mapping{}, errors.New("connection reset")
		}
		return next(ctx, m)
	}})
	svc := newService("default", "web", withPorts(port("a", v1.ProtocolTCP, 80, 30080), port("b", v1.ProtocolTCP, 81, 30081), port("c", v1.ProtocolTCP, 82, 30082)))
	if _, err := e.ensure(t, svc, threeNodes()); err == nil || !strings.Contains(err.Error(), "TCP/81") {
		t.Fatalf("Ensure error = %v, want a failure naming TCP/81", err)
	}
	if n := len(e.router.Mappings()); n != 2 {
		t.Fatalf("table = %v, want 2 mappings", e.table())
	}
	e.calls()
	e.mustEnsure(t, svc, threeNodes())
	if c := e.calls(); c[fake.MethodListPortMappings] != 1 || c[fake.MethodAddPortMapping] != 1 {
		t.Errorf("retry calls = %v, want 1 list + 1 add", c)
	}
	if n := len(e.router.Mappings()); n != 3 {
		t.Fatalf("table = %v, want 3 mappings", e.table())
	}
}

func TestConflictFromRouterNamesHolder(t *testing.T) {
	e := newEnv(t, Config{}, fake.RouterConfig{})
	// Another host takes the port between our table read and our add.
	stranger := e.router.Client(addrStranger)
	first := fake.Nth(1)
	e.router.Intercept(fake.RouterHooks{AddPortMapping: func(ctx context.Context, _ netip.Addr, m igd.Mapping, next fake.AddFunc) (igd.Mapping, error) {
		if first() {
			if _, err := stranger.AddPortMapping(ctx, igd.Mapping{Protocol: igd.TCP, ExternalPort: 80, InternalClient: addrStranger, InternalPort: 80, Description: "sneaky"}); err != nil {
				return igd.Mapping{}, err
			}
		}
		return next(ctx, m)
	}})
	_, err := e.ensure(t, newService("default", "web", withPorts(port("a", v1.ProtocolTCP, 80, 30080))), threeNodes())
	var pe *PortError
	if !errors.As(err, &pe) || !errors.Is(err, ErrPortInUse) || !errors.Is(err, igd.ErrConflict) || pe.Holder == nil || pe.Holder.Description != "sneaky" {
		t.Fatalf("error = %v, want a PortError naming the holder (sneaky)", err)
	}
}

func TestGetLoadBalancer(t *testing.T) {
	e := newEnv(t, Config{}, fake.RouterConfig{})
	svc := newService("default", "web", withPorts(port("a", v1.ProtocolTCP, 80, 30080), port("b", v1.ProtocolUDP, 81, 30081)))
	ctx := context.Background()
	e.lb.seeNodes(threeNodes()) // as an Ensure of another Service would
	if st, exists, err := e.lb.GetLoadBalancer(ctx, testCluster, svc); err != nil || exists || st != nil {
		t.Fatalf("before Ensure: %v, %v, %v", st, exists, err)
	}
	want := e.mustEnsure(t, svc, threeNodes())
	e.calls()
	st, exists, err := e.lb.GetLoadBalancer(ctx, testCluster, svc)
	if err != nil || !exists {
		t.Fatalf("after Ensure: %v, %v", exists, err)
	}
	if st.Ingress[0].IP != want.Ingress[0].IP || len(st.Ingress[0].Ports) != 2 {
		t.Errorf("status = %+v, want %+v", st, want)
	}
	// This process holds the keys: the Service exists without a read.
	if c := e.calls(); len(c) != 1 || c[fake.MethodExternalIP] != 1 {
		t.Errorf("Get calls = %v, want the external IP only", c)
	}
	// A process that holds nothing (a restart, a fail-over) reads them.
	fresh, err := New(Config{Client: e.router.Client(addrA), Clock: e.clock})
	if err != nil {
		t.Fatal(err)
	}
	fresh.seeNodes(threeNodes())
	if st, exists, err := fresh.GetLoadBalancer(ctx, testCluster, svc); err != nil || !exists || len(st.Ingress[0].Ports) != 2 {
		t.Errorf("Get of a fresh process = %+v, %v, %v; want both ports", st, exists, err)
	}
	if c := e.calls(); len(c) != 2 || c[fake.MethodExternalIP] != 1 || c[fake.MethodListPortMappings] != 2 {
		t.Errorf("Get calls of a fresh process = %v, want 2 lists (TCP, UDP) and the external IP", c)
	}
	// The router lost the mappings: this process still says the Service
	// exists (wrong only toward "exists"), and the delete that follows
	// reads, finds nothing and succeeds.
	e.router.Reboot()
	if _, exists, err := e.lb.GetLoadBalancer(ctx, testCluster, svc); err != nil || !exists {
		t.Errorf("Get after a reboot = %v, %v; want exists (from this process's keys)", exists, err)
	}
	if err := e.lb.EnsureLoadBalancerDeleted(ctx, testCluster, svc); err != nil {
		t.Errorf("Delete after a reboot = %v", err)
	}
	if _, exists, err := e.lb.GetLoadBalancer(ctx, testCluster, svc); err != nil || exists {
		t.Errorf("Get after the delete = %v, %v; want none", exists, err)
	}
	// Another cluster's Service of the same name does not exist.
	if _, exists, _ := e.lb.GetLoadBalancer(ctx, "other", svc); exists {
		t.Error("another cluster's Service reported as existing")
	}
	// The name is the owner token, stable across spec changes.
	svc2 := svc.DeepCopy()
	svc2.UID = "another-uid"
	svc2.Spec.Ports = nil
	if a, b := e.lb.GetLoadBalancerName(ctx, testCluster, svc), e.lb.GetLoadBalancerName(ctx, testCluster, svc2); a != b || a != "kubernetes/default/web" {
		t.Errorf("GetLoadBalancerName = %q and %q, want kubernetes/default/web", a, b)
	}
}

func TestStatelessAcrossRestart(t *testing.T) {
	e := newEnv(t, Config{}, fake.RouterConfig{})
	svc := newService("default", "web", withPorts(port("a", v1.ProtocolTCP, 80, 30080)))
	e.mustEnsure(t, svc, threeNodes())

	// A new process learns the nodes from its informers, then finds and
	// removes the mappings made by the old one.
	lb2, err := New(Config{Client: e.router.Client(addrA), Clock: e.clock})
	if err != nil {
		t.Fatal(err)
	}
	nodes := threeNodes()
	startBackground(t, &env{lb: lb2, router: e.router, clock: e.clock}, nodes[0], nodes[1], nodes[2])
	if _, exists, err := lb2.GetLoadBalancer(context.Background(), testCluster, svc); err != nil || !exists {
		t.Fatalf("restarted GetLoadBalancer = %v, %v; want exists", exists, err)
	}
	if err := lb2.EnsureLoadBalancerDeleted(context.Background(), testCluster, svc); err != nil {
		t.Fatal(err)
	}
	if len(e.router.Mappings()) != 0 {
		t.Fatalf("left behind: %v", e.table())
	}
}

// A fresh process without background work knows no node until an Ensure
// or Update passes them: until then Get and Delete ask to be called again
// rather than report "no mappings" (upstream would then drop the cleanup
// finalizer and the mappings would stay open).
func TestRestartWithoutBackgroundWork(t *testing.T) {
	e := newEnv(t, Config{}, fake.RouterConfig{})
	web := newService("default", "web", withPorts(port("a", v1.ProtocolTCP, 80, 30080), port("b", v1.ProtocolUDP, 53, 30053)))
	e.mustEnsure(t, web, threeNodes())
	before := e.table()

	lb2, err := New(Config{Client: e.router.Client(addrA), Clock: e.clock})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var re *api.RetryError
	if _, exists, err := lb2.GetLoadBalancer(ctx, testCluster, web); !errors.As(err, &re) || exists || !strings.Contains(err.Error(), "default/web") {
		t.Fatalf("fresh Get = %v, %v; want an api.RetryError naming default/web", exists, err)
	}
	if err := lb2.EnsureLoadBalancerDeleted(ctx, testCluster, web); !errors.As(err, &re) {
		t.Fatalf("fresh Delete = %v; want an api.RetryError", err)
	}
	diffRows(t, "table after the refused calls", e.table(), before)

	// Another Service is ensured (upstream syncs every Service at start):
	// now web's mappings are recognised and removed.
	e2 := &env{lb: lb2, router: e.router, clock: e.clock}
	e2.mustEnsure(t, newService("default", "api", withPorts(port("a", v1.ProtocolTCP, 81, 30081))), threeNodes())
	if _, exists, err := lb2.GetLoadBalancer(ctx, testCluster, web); err != nil || !exists {
		t.Fatalf("Get after nodes were seen = %v, %v; want exists", exists, err)
	}
	if err := lb2.EnsureLoadBalancerDeleted(ctx, testCluster, web); err != nil {
		t.Fatal(err)
	}
	for _, m := range e.router.Mappings() {
		if m.ExternalPort != 81 {
			t.Errorf("left behind: %v", m)
		}
	}
}

func TestSecureMode(t *testing.T) {
	t.Run("maps to own node even when another is preferred", func(t *testing.T) {
		e := newEnv(t, Config{SecureMode: true, NodeName: "node-a"}, fake.RouterConfig{SecureMode: true})
		for i := range 6 {
			e.mustEnsure(t, newService("default", "s"+string(rune('a'+i)), withPorts(port("p", v1.ProtocolTCP, int32(80+i), 30080))), threeNodes())
		}
		for _, m := range e.router.Mappings() {
			if m.InternalClient != addrA {
				t.Errorf("%s targets %s, want node-a", m.Key(), m.InternalClient)
			}
		}
	})
	t.Run("own node not eligible", func(t *testing.T) {
		e := newEnv(t, Config{SecureMode: true, NodeName: "node-a"}, fake.RouterConfig{SecureMode: true})
		nodes := threeNodes()
		nodes[0] = newNode("node-a", addrA, notReady)
		_, err := e.ensure(t, newService("default", "web"), nodes)
		var re *api.RetryError
		if !errors.Is(err, ErrNoEligibleNode) || !errors.As(err, &re) || !strings.Contains(err.Error(), "node-a") || !strings.Contains(err.Error(), "secure mode") || !strings.Contains(err.Error(), "not Ready") {
			t.Fatalf("error = %v; want ErrNoEligibleNode naming node-a, secure mode and why", err)
		}
	})
	t.Run("previous leader's mapping: wait for its lease", func(t *testing.T) {
		e := newEnv(t, Config{SecureMode: true, NodeName: "node-a"}, fake.RouterConfig{SecureMode: true})
		// node-b was the leader and mapped the Service to itself.
		old := igd.Mapping{Protocol: igd.TCP, ExternalPort: 8080, InternalClient: addrB, InternalPort: 30080, Description: desc("default", "web", "http"), Lease: 4 * time.Minute}
		e.router.Put(old)
		_, err := e.ensure(t, newService("default", "web"), threeNodes())
		var re *api.RetryError
		if !errors.As(err, &re) || re.RetryAfter() < 4*time.Minute || re.RetryAfter() > maxSecureWait {
			t.Fatalf("error = %v; want an api.RetryError until the old lease expires", err)
		}
		if !errors.Is(err, igd.ErrNotAuthorized) || !strings.Contains(err.Error(), addrB.String()) {
			t.Errorf("error %q should say the router refused and name the old holder", err)
		}
		// Once the lease runs out, the new leader serves the Service.
		e.clock.Step(re.RetryAfter())
		e.mustEnsure(t, newService("default", "web"), threeNodes())
		if ms := e.router.Mappings(); len(ms) != 1 || ms[0].InternalClient != addrA {
			t.Errorf("table = %v, want one mapping to node-a", e.table())
		}
	})
}

func TestLeases(t *testing.T) {
	t.Run("renewed once below half-life, not before", func(t *testing.T) {
		e := newEnv(t, Config{Lease: time.Hour, RenewInterval: 10 * time.Minute}, fake.RouterConfig{})
		svc := newService("default", "web")
		e.mustEnsure(t, svc, threeNodes())
		e.calls()
		e.clock.Step(20 * time.Minute) // 40m left: above 30m + 5m
		e.mustEnsure(t, svc, threeNodes())
		if c := e.calls(); c[fake.MethodAddPortMapping] != 0 {
			t.Errorf("renewed too early: %v", c)
		}
		e.clock.Step(10 * time.Minute) // 30m left
		e.mustEnsure(t, svc, threeNodes())
		if c := e.calls(); c[fake.MethodAddPortMapping] != 1 {
			t.Errorf("not renewed at 30m left: %v", c)
		}
		if ms := e.router.Mappings(); ms[0].Lease != time.Hour {
			t.Errorf("lease after renewal = %s", ms[0].Lease)
		}
	})
	t.Run("router that reports the lease as granted", func(t *testing.T) {
		e := newEnv(t, Config{Lease: time.Hour, RenewInterval: 10 * time.Minute}, fake.RouterConfig{})
		e.router.Intercept(fake.RouterHooks{ListPortMappings: func(ctx context.Context, _ netip.Addr, proto igd.Protocol, ports igd.PortRange, next fake.ListFunc) ([]igd.Mapping, error) {
			ms, err := next(ctx, proto, ports)
			for i := range ms {
				ms[i].Lease = time.Hour
			}
			return ms, err
		}})
		svc := newService("default", "web")
		e.mustEnsure(t, svc, threeNodes())
		e.calls()
		e.clock.Step(20 * time.Minute)
		e.mustEnsure(t, svc, threeNodes())
		if c := e.calls(); c[fake.MethodAddPortMapping] != 0 {
			t.Errorf("renewed too early: %v", c)
		}
		e.clock.Step(10 * time.Minute)
		e.mustEnsure(t, svc, threeNodes())
		if c := e.calls(); c[fake.MethodAddPortMapping] != 1 {
			t.Errorf("not renewed 30 minutes into a 1h lease: %v", c)
		}
	})
	t.Run("router with only permanent leases", func(t *testing.T) {
		e := newEnv(t, Config{}, fake.RouterConfig{OnlyPermanentLeases: true})
		svc := newService("default", "web")
		e.mustEnsure(t, svc, threeNodes())
		if ms := e.router.Mappings(); len(ms) != 1 || ms[0].Lease != 0 {
			t.Fatalf("table = %v", e.router.Mappings())
		}
		e.calls()
		e.clock.Step(48 * time.Hour)
		e.mustEnsure(t, svc, threeNodes())
		if c := e.calls(); c[fake.MethodAddPortMapping] != 0 {
			t.Errorf("permanent mapping re-added: %v", c)
		}
	})
	t.Run("permanent-only fallback logged once", func(t *testing.T) {
		e := newEnv(t, Config{}, fake.RouterConfig{OnlyPermanentLeases: true})
		var mu sync.Mutex
		fallbacks := 0
		ctx := klog.NewContext(context.Background(), funcr.New(func(_, args string) {
			if strings.Contains(args, "only accepts permanent leases") {
				mu.Lock()
				fallbacks++
				mu.Unlock()
			}
		}, funcr.Options{}))
		for _, name := range []string{"a", "b", "c"} {
			svc := newService("default", name, withPorts(port("http", v1.ProtocolTCP, int32(8000+int(name[0])), 30080)))
			if _, err := e.lb.EnsureLoadBalancer(ctx, testCluster, svc, threeNodes()); err != nil {
				t.Fatal(err)
			}
		}
		if n := len(e.router.Mappings()); n != 3 {
			t.Fatalf("%d mappings, want 3", n)
		}
		if fallbacks != 1 {
			t.Errorf("fallback to permanent leases logged %d times, want once", fallbacks)
		}
	})
	t.Run("permanent lease requested", func(t *testing.T) {
		e := newEnv(t, Config{Lease: PermanentLease}, fake.RouterConfig{})
		e.mustEnsure(t, newService("default", "web"), threeNodes())
		calls := e.router.Calls()
		for _, c := range calls {
			if c.Method == fake.MethodAddPortMapping && c.Mapping.Lease != 0 {
				t.Errorf("asked for lease %s, want 0", c.Mapping.Lease)
			}
		}
	})
}

func TestOperationsOnOneServiceAreSerialised(t *testing.T) {
	e := newEnv(t, Config{}, fake.RouterConfig{})
	release := make(chan struct{})
	e.router.Intercept(fake.RouterHooks{AddPortMapping: func(ctx context.Context, _ netip.Addr, m igd.Mapping, next fake.AddFunc) (igd.Mapping, error) {
		if err := fake.Hold(ctx, release); err != nil {
			return igd.Mapping{}, err
		}
		return next(ctx, m)
	}})
	svc := newService("default", "web")
	done := make(chan error, 1)
	go func() { _, err := e.ensure(t, svc, threeNodes()); done <- err }()
	for e.router.CallCount(fake.MethodListPortMappings) == 0 {
		time.Sleep(time.Millisecond)
	}
	// The Service is busy: a background attempt gives up, a controller call waits.
	if e.lb.tryAcquire(newOwner(testCluster, "default", "web"), svc) != nil {
		t.Fatal("tryAcquire succeeded while an Ensure is in flight")
	}
	// Other Services are not blocked by it.
	if e.lb.tryAcquire(newOwner(testCluster, "default", "other"), newService("default", "other")) == nil {
		t.Fatal("another Service is blocked")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := e.lb.EnsureLoadBalancerDeleted(ctx, testCluster, svc); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Delete during Ensure = %v, want it to wait (and time out)", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
