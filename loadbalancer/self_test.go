package loadbalancer

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	v1 "k8s.io/api/core/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cloud-provider/api"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
)

// withExternalIP gives a node an ExternalIP as well.
func withExternalIP(a netip.Addr) nodeOpt {
	return func(n *v1.Node) {
		n.Status.Addresses = append(n.Status.Addresses, v1.NodeAddress{Type: v1.NodeExternalIP, Address: a.String()})
	}
}

// envAt is newEnv with the LoadBalancer's client acting from host local.
func envAt(t testing.TB, local netip.Addr, cfg Config, rc fake.RouterConfig) *env {
	t.Helper()
	e := newEnv(t, cfg, rc)
	cfg.Client, cfg.Clock = e.router.Client(local), e.clock
	lb, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	e.lb = lb
	return e
}

// Without Config.NodeName, a secure-mode LoadBalancer finds its node by its
// address toward the router (the fake client acts from addrB: node-b).
func TestSecureModeFindsOwnNode(t *testing.T) {
	tests := []struct {
		name  string
		local netip.Addr
		nodes func() []*v1.Node
		want  netip.Addr // target of the mappings
	}{
		{name: "by InternalIP", local: addrB, nodes: threeNodes, want: addrB},
		// The host talks to the router from its ExternalIP: mappings
		// target that address, the only one the router lets it map to.
		{name: "by ExternalIP", local: netip.MustParseAddr("192.0.2.50"), nodes: func() []*v1.Node {
			return []*v1.Node{newNode("node-a", addrA), newNode("node-b", addrB), newNode("node-c", addrC, withExternalIP(netip.MustParseAddr("192.0.2.50")))}
		}, want: netip.MustParseAddr("192.0.2.50")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := envAt(t, tt.local, Config{SecureMode: true}, fake.RouterConfig{SecureMode: true})
			r := e.router
			for i := range 4 {
				svc := newService("default", "s"+string(rune('a'+i)), withPorts(port("p", v1.ProtocolTCP, int32(80+i), 30080)))
				e.mustEnsure(t, svc, tt.nodes())
			}
			ms := r.Mappings()
			if len(ms) != 4 {
				t.Fatalf("table = %v, want 4 mappings", ms)
			}
			for _, m := range ms {
				if m.InternalClient != tt.want {
					t.Errorf("%s targets %s, want %s", m.Key(), m.InternalClient, tt.want)
				}
			}
			// Found once, then cached: no further LocalAddr call.
			if n := r.CallCount(fake.MethodLocalAddr); n != 1 {
				t.Errorf("LocalAddr called %d times, want 1 (cached)", n)
			}
		})
	}
}

func TestSecureModeOwnNodeNotFound(t *testing.T) {
	stranger := netip.MustParseAddr("192.0.2.99")
	t.Run("no node has the address: retry, router untouched", func(t *testing.T) {
		e := envAt(t, stranger, Config{SecureMode: true}, fake.RouterConfig{SecureMode: true})
		r := e.router
		_, err := e.lb.EnsureLoadBalancer(context.Background(), testCluster, newService("default", "web"), threeNodes())
		var re *api.RetryError
		if !errors.Is(err, ErrOwnNodeUnknown) || !errors.As(err, &re) {
			t.Fatalf("error = %v; want ErrOwnNodeUnknown with an api.RetryError", err)
		}
		for _, s := range []string{"default/web", stranger.String(), "node-a", addrA.String(), "NodeName"} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("error %q does not mention %q", err, s)
			}
		}
		if n := len(r.Mappings()); n != 0 {
			t.Errorf("router has %d mappings, want none", n)
		}
		// The node registers with that address: found on the next call.
		nodes := append(threeNodes(), newNode("node-d", stranger))
		e.mustEnsure(t, newService("default", "web"), nodes)
		if ms := r.Mappings(); len(ms) != 1 || ms[0].InternalClient != stranger {
			t.Errorf("table = %v, want one mapping to node-d", ms)
		}
	})
	t.Run("two nodes have the address", func(t *testing.T) {
		e := envAt(t, addrA, Config{SecureMode: true}, fake.RouterConfig{SecureMode: true})
		r := e.router
		nodes := append(threeNodes(), newNode("node-a2", addrA))
		_, err := e.lb.EnsureLoadBalancer(context.Background(), testCluster, newService("default", "web"), nodes)
		if !errors.Is(err, ErrOwnNodeUnknown) || !strings.Contains(err.Error(), "node-a, node-a2") {
			t.Fatalf("error = %v; want ErrOwnNodeUnknown naming node-a and node-a2", err)
		}
		if n := len(r.Mappings()); n != 0 {
			t.Errorf("router has %d mappings, want none", n)
		}
	})
	t.Run("client fails", func(t *testing.T) {
		boom := &igd.UPnPError{Action: "LocalAddr", Code: 501, Description: "ActionFailed"}
		e := envAt(t, addrA, Config{SecureMode: true}, fake.RouterConfig{SecureMode: true})
		e.router.Intercept(fake.RouterHooks{LocalAddr: func(context.Context, netip.Addr, fake.AddrFunc) (netip.Addr, error) {
			return netip.Addr{}, boom
		}})
		_, err := e.lb.EnsureLoadBalancer(context.Background(), testCluster, newService("default", "web"), threeNodes())
		var re *api.RetryError
		if !errors.Is(err, boom) || errors.As(err, &re) || !strings.Contains(err.Error(), "default/web") {
			t.Fatalf("error = %v; want the client's error, naming the Service, without a RetryError (back off)", err)
		}
	})
	t.Run("not in secure mode: never asked", func(t *testing.T) {
		e := envAt(t, stranger, Config{}, fake.RouterConfig{})
		r := e.router
		e.mustEnsure(t, newService("default", "web"), threeNodes())
		if n := r.CallCount(fake.MethodLocalAddr); n != 0 {
			t.Errorf("LocalAddr called %d times outside secure mode", n)
		}
	})
}

// The background work finds the node among the nodes it watches.
func TestBackgroundFindsOwnNode(t *testing.T) {
	e := envAt(t, addrC, Config{ClusterName: testCluster, SecureMode: true}, fake.RouterConfig{SecureMode: true})
	r := e.router
	nodes := threeNodes()
	svc := lbService("default", "web")
	startBackground(t, e, []k8sruntime.Object{nodes[0], nodes[1], nodes[2], svc}...)
	eventually(t, "the Service mapped to node-c", func() bool {
		ms := r.Mappings()
		return len(ms) == 1 && ms[0].InternalClient == addrC
	})
}

// The addresses a node no longer reports stop being trusted as a node's;
// other nodes' stay, and an address two nodes report is the later one's.
func TestSeeNodesForgetsOldAddresses(t *testing.T) {
	e := newEnv(t, Config{}, fake.RouterConfig{})
	a, b, c := netip.MustParseAddr("192.168.1.10"), netip.MustParseAddr("192.168.1.11"), netip.MustParseAddr("192.168.1.12")
	e.lb.seeNodes([]*v1.Node{newNode("n1", a), newNode("n2", c)})
	e.lb.seeNodes([]*v1.Node{newNode("n1", b)}) // n1 moved from a to b
	for _, tt := range []struct {
		addr netip.Addr
		want bool
	}{{a, false}, {b, true}, {c, true}} {
		if got := e.lb.isNodeAddr(tt.addr); got != tt.want {
			t.Errorf("isNodeAddr(%s) = %v, want %v", tt.addr, got, tt.want)
		}
	}
	e.lb.seeNodes([]*v1.Node{newNode("n2", b), newNode("n3", b)})
	var owner string
	e.lb.mu.Lock()
	owner = e.lb.nodeAddrs[b]
	e.lb.mu.Unlock()
	if owner != "n3" {
		t.Errorf("%s is recorded as %q's, want n3's (the later node that reports it)", b, owner)
	}
}

// Without Config.NodeName, through a pinhole client that opens pinholes for
// its own host only and says that host's global IPv6 addresses (UPnP), the
// LoadBalancer also finds its node by them: the one Node reporting one, when
// none reports its IPv4 address toward the router (Nodes that list only their
// IPv6 address, kubelet's --node-ip being it). Its IPv6 family is served at
// that address; in secure mode its IPv4 mappings still target the address
// toward the router, the only one the router maps to.
func TestFindsOwnNodeByItsGlobalIPv6Address(t *testing.T) {
	stranger := netip.MustParseAddr("192.0.2.99") // no node reports it
	v4, v6 := v1.IPv4Protocol, v1.IPv6Protocol
	ext := fake.DefaultExternalIP.String()
	tests := []struct {
		name     string
		local    netip.Addr // the router client's address toward the router
		secure   bool
		families []v1.IPFamily
		nodes    []*v1.Node
		want     []v1.LoadBalancerIngress
		wantOpen []string
		wantMaps []netip.Addr // the mappings' targets
	}{
		{name: "nodes report only their IPv6 address", local: addrA, families: []v1.IPFamily{v6},
			nodes: []*v1.Node{newNode("node-a", guaA), newNode("node-b", guaB)},
			want:  []v1.LoadBalancerIngress{ingress(guaA.String(), tcp(8080))}, wantOpen: []string{pin(igd.TCP, guaA, 8080)}},
		{name: "no node reports the IPv4 address toward the router", local: stranger, families: []v1.IPFamily{v6},
			nodes: []*v1.Node{newNode("node-a", addrA, withIPv6(guaA)), newNode("node-b", addrB, withIPv6(guaB))},
			want:  []v1.LoadBalancerIngress{ingress(guaA.String(), tcp(8080))}, wantOpen: []string{pin(igd.TCP, guaA, 8080)}},
		{name: "secure mode: IPv4 mappings target the address toward the router", local: stranger, secure: true, families: []v1.IPFamily{v4, v6},
			nodes:    []*v1.Node{newNode("node-a", addrA, withIPv6(guaA)), newNode("node-b", addrB, withIPv6(guaB))},
			want:     []v1.LoadBalancerIngress{ingress(ext, tcp(8080)), ingress(guaA.String(), tcp(8080))},
			wantOpen: []string{pin(igd.TCP, guaA, 8080)}, wantMaps: []netip.Addr{stranger}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, f := newDualEnvAt(t, tt.local, Config{SecureMode: tt.secure}, fake.RouterConfig{SecureMode: tt.secure}, ownNodePinholes)
			st := e.mustEnsure(t, newService("default", "web", withFamilies(tt.families...)), tt.nodes)
			if diff := cmp.Diff(tt.want, st.Ingress); diff != "" {
				t.Errorf("status ingress (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantOpen, f.Open()); diff != "" {
				t.Errorf("pinholes open (-want +got):\n%s", diff)
			}
			var maps []netip.Addr
			for _, m := range e.router.Mappings() {
				maps = append(maps, m.InternalClient)
			}
			if diff := cmp.Diff(tt.wantMaps, maps, cmpopts.EquateComparable(netip.Addr{})); diff != "" {
				t.Errorf("mappings' targets (-want +got):\n%s", diff)
			}
		})
	}
}

// When neither this host's IPv4 address toward the router nor its global
// IPv6 address is a node's, the error names both, the nodes' addresses and
// Config.NodeName, and asks to retry: the node may register later. A
// router client that gives no IPv4 address does not stop the IPv6 match.
func TestOwnNodeUnknownByEitherFamily(t *testing.T) {
	boom := &igd.UPnPError{Action: "LocalAddr", Code: 501, Description: "ActionFailed"}
	others := []*v1.Node{newNode("node-b", addrB, withIPv6(guaB)), newNode("node-c", addrC)}
	t.Run("neither matches", func(t *testing.T) {
		e, f := newDualEnv(t, Config{}, fake.RouterConfig{}, ownNodePinholes)
		_, err := e.ensure(t, newService("default", "web", withFamilies(v1.IPv6Protocol)), others)
		var re *api.RetryError
		if !errors.Is(err, ErrOwnNodeUnknown) || !errors.As(err, &re) {
			t.Fatalf("error = %v; want ErrOwnNodeUnknown with an api.RetryError", err)
		}
		for _, s := range []string{"default/web", "NodeName", addrA.String(), guaA.String(), "node-b", guaB.String(), "node-c", addrC.String()} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("error %q does not mention %q", err, s)
			}
		}
		if open := f.Open(); len(open) != 0 {
			t.Errorf("pinholes open: %v, want none", open)
		}
	})
	t.Run("no IPv4 address toward the router, IPv6 matches", func(t *testing.T) {
		e, f := newDualEnv(t, Config{}, fake.RouterConfig{}, ownNodePinholes)
		e.router.Intercept(fake.RouterHooks{LocalAddr: func(context.Context, netip.Addr, fake.AddrFunc) (netip.Addr, error) {
			return netip.Addr{}, boom
		}})
		nodes := append([]*v1.Node{newNode("node-a", guaA)}, others...)
		st := e.mustEnsure(t, newService("default", "web", withFamilies(v1.IPv6Protocol)), nodes)
		if diff := cmp.Diff([]v1.LoadBalancerIngress{ingress(guaA.String(), tcp(8080))}, st.Ingress); diff != "" {
			t.Errorf("status ingress (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{pin(igd.TCP, guaA, 8080)}, f.Open()); diff != "" {
			t.Errorf("pinholes open (-want +got):\n%s", diff)
		}
	})
	t.Run("no IPv4 address toward the router, IPv6 matches none", func(t *testing.T) {
		e, _ := newDualEnv(t, Config{}, fake.RouterConfig{}, ownNodePinholes)
		e.router.Intercept(fake.RouterHooks{LocalAddr: func(context.Context, netip.Addr, fake.AddrFunc) (netip.Addr, error) {
			return netip.Addr{}, boom
		}})
		_, err := e.ensure(t, newService("default", "web", withFamilies(v1.IPv6Protocol)), others)
		if !errors.Is(err, ErrOwnNodeUnknown) || !errors.Is(err, boom) {
			t.Fatalf("error = %v; want ErrOwnNodeUnknown and the client's error", err)
		}
		for _, s := range []string{"NodeName", guaA.String(), "node-b"} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("error %q does not mention %q", err, s)
			}
		}
	})
	t.Run("two nodes report the global address", func(t *testing.T) {
		e, _ := newDualEnv(t, Config{}, fake.RouterConfig{}, ownNodePinholes)
		nodes := append([]*v1.Node{newNode("node-a", guaA), newNode("node-a2", guaA)}, others...)
		_, err := e.ensure(t, newService("default", "web", withFamilies(v1.IPv6Protocol)), nodes)
		if !errors.Is(err, ErrOwnNodeUnknown) || !strings.Contains(err.Error(), "node-a, node-a2") {
			t.Fatalf("error = %v; want ErrOwnNodeUnknown naming node-a and node-a2", err)
		}
	})
	t.Run("pinhole client fails", func(t *testing.T) {
		e, f := newDualEnv(t, Config{}, fake.RouterConfig{}, ownNodePinholes)
		f.Fail(errRouterDown)
		_, err := e.ensure(t, newService("default", "web", withFamilies(v1.IPv6Protocol)), others)
		var re *api.RetryError
		if !errors.Is(err, errRouterDown) || errors.As(err, &re) || !strings.Contains(err.Error(), addrA.String()) {
			t.Fatalf("error = %v; want the pinhole client's error, naming %s, without a RetryError (back off)", err, addrA)
		}
	})
}
