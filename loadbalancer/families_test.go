package loadbalancer

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
)

// pinholeMode is which PinholeClient a test's LoadBalancer has.
type pinholeMode int

const (
	noPinholes      pinholeMode = iota // Config.Pinholes nil
	ownNodePinholes                    // UPnP: node-a's GUA only, ports from 1024
	anyHostPinhole                     // PCP with THIRD_PARTY
	checkingPinhole                    // any host, and a PinholeProber
)

// newDualEnv is newEnv with a fake PinholeClient as mode says (nil for
// noPinholes), whose own address is node-a's GUA.
func newDualEnv(t *testing.T, cfg Config, rc fake.RouterConfig, mode pinholeMode) (*env, *fakePinholes) {
	t.Helper()
	return newDualEnvAt(t, addrA, cfg, rc, mode)
}

// newDualEnvAt is newDualEnv with the router client acting from host local.
func newDualEnvAt(t *testing.T, local netip.Addr, cfg Config, rc fake.RouterConfig, mode pinholeMode) (*env, *fakePinholes) {
	t.Helper()
	var f *fakePinholes
	e := newEnv(t, Config{}, rc) // for the clock only
	f = newFakePinholes(e.clock, guaA)
	switch mode {
	case ownNodePinholes:
		cfg.Pinholes = f
	case anyHostPinhole:
		cfg.Pinholes = anyHostPinholes{f}
	case checkingPinhole:
		cfg.Pinholes = checkingPinholes{anyHostPinholes{f}}
	}
	cfg.Client = e.router.Client(local)
	cfg.Clock = e.clock
	lb, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	e.lb = lb
	return e, f
}

// ingress is a status ingress at ip with ports (ipMode VIP).
func ingress(ip string, ports ...v1.PortStatus) v1.LoadBalancerIngress {
	mode := v1.LoadBalancerIPModeVIP
	return v1.LoadBalancerIngress{IP: ip, IPMode: &mode, Ports: ports}
}

func tcp(p int32) v1.PortStatus { return v1.PortStatus{Port: p, Protocol: v1.ProtocolTCP} }

func tcpFailed(p int32, reason string) v1.PortStatus {
	return v1.PortStatus{Port: p, Protocol: v1.ProtocolTCP, Error: &reason}
}

// A Service is served on each family of spec.ipFamilies the router can
// serve, with one ingress per family, in the order of spec.ipFamilies; the
// IPv6 ingress is the chosen node's global address, opened by a pinhole per
// port. A family that cannot be served is left out and the other is served;
// a Service with no family served fails.
func TestStatusHasOneIngressPerFamilyServed(t *testing.T) {
	ext := fake.DefaultExternalIP.String()
	cgnat := netip.MustParseAddr("100.64.1.1")
	bothGUA := []*v1.Node{newNode("node-a", addrA, withIPv6(guaA)), newNode("node-b", addrB, withIPv6(guaB))}
	ownULA := []*v1.Node{newNode("node-a", addrA, withIPv6(netip.MustParseAddr("fd00:1::10"))), newNode("node-b", addrB, withIPv6(guaB))}
	noGUA := []*v1.Node{newNode("node-a", addrA, withIPv6(ulaB)), newNode("node-c", addrC, withIPv6(llC))}
	v4, v6 := v1.IPv4Protocol, v1.IPv6Protocol
	tests := []struct {
		name     string
		mode     pinholeMode
		external netip.Addr
		families []v1.IPFamily
		ports    []v1.ServicePort
		nodes    []*v1.Node
		want     []v1.LoadBalancerIngress
		wantOpen []string
		wantErr  error
		failing  error // every pinhole call fails so
	}{
		{name: "IPv6 single stack", mode: anyHostPinhole, families: []v1.IPFamily{v6}, nodes: dualNodes(),
			want: []v1.LoadBalancerIngress{ingress(guaA.String(), tcp(8080))}, wantOpen: []string{pin(igd.TCP, guaA, 8080)}},
		{name: "dual stack, IPv4 first", mode: anyHostPinhole, families: []v1.IPFamily{v4, v6}, nodes: dualNodes(),
			want: []v1.LoadBalancerIngress{ingress(ext, tcp(8080)), ingress(guaA.String(), tcp(8080))}, wantOpen: []string{pin(igd.TCP, guaA, 8080)}},
		{name: "dual stack, IPv6 first", mode: anyHostPinhole, families: []v1.IPFamily{v6, v4}, nodes: dualNodes(),
			want: []v1.LoadBalancerIngress{ingress(guaA.String(), tcp(8080)), ingress(ext, tcp(8080))}, wantOpen: []string{pin(igd.TCP, guaA, 8080)}},
		{name: "dual stack without a PinholeClient: IPv4 only", mode: noPinholes, families: []v1.IPFamily{v4, v6}, nodes: dualNodes(),
			want: []v1.LoadBalancerIngress{ingress(ext, tcp(8080))}},
		{name: "dual stack, no node with a global IPv6 address: IPv4 only", mode: anyHostPinhole, families: []v1.IPFamily{v4, v6}, nodes: noGUA,
			want: []v1.LoadBalancerIngress{ingress(ext, tcp(8080))}},
		{name: "UPnP pinholes go to this process's node only", mode: ownNodePinholes, families: []v1.IPFamily{v6}, nodes: bothGUA,
			want: []v1.LoadBalancerIngress{ingress(guaA.String(), tcp(8080))}, wantOpen: []string{pin(igd.TCP, guaA, 8080)}},
		{name: "UPnP pinholes, own node without a global address: IPv4 only", mode: ownNodePinholes, families: []v1.IPFamily{v4, v6}, nodes: ownULA,
			want: []v1.LoadBalancerIngress{ingress(ext, tcp(8080))}},
		{name: "UPnP pinholes open no port below 1024", mode: ownNodePinholes, families: []v1.IPFamily{v6}, nodes: dualNodes(),
			ports: []v1.ServicePort{port("http", v1.ProtocolTCP, 80, 30080), port("alt", v1.ProtocolTCP, 8080, 30081)},
			want:  []v1.LoadBalancerIngress{ingress(guaA.String(), tcpFailed(80, PortErrorNotAuthorized), tcp(8080))}, wantOpen: []string{pin(igd.TCP, guaA, 8080)}},
		{name: "carrier-grade NAT IPv4 with IPv6: IPv6 only", mode: anyHostPinhole, external: cgnat, families: []v1.IPFamily{v4, v6}, nodes: dualNodes(),
			want: []v1.LoadBalancerIngress{ingress(guaA.String(), tcp(8080))}, wantOpen: []string{pin(igd.TCP, guaA, 8080)}},
		{name: "carrier-grade NAT IPv4 without IPv6: fails as today", mode: noPinholes, external: cgnat, families: []v1.IPFamily{v4, v6}, nodes: dualNodes(),
			wantErr: ErrExternalIPNotUsable},
		{name: "IPv6 single stack, no node with a global IPv6 address: fails", mode: anyHostPinhole, families: []v1.IPFamily{v6}, nodes: noGUA,
			wantErr: ErrNoEligibleNode},
		{name: "dual stack, pinhole calls failing: IPv4 only", mode: anyHostPinhole, families: []v1.IPFamily{v4, v6}, nodes: dualNodes(),
			failing: errRouterDown, want: []v1.LoadBalancerIngress{ingress(ext, tcp(8080))}},
		{name: "IPv6 single stack, pinhole calls failing: fails", mode: anyHostPinhole, families: []v1.IPFamily{v6}, nodes: dualNodes(),
			failing: errRouterDown, wantErr: errRouterDown},
		{name: "IPv6 single stack without a PinholeClient: invalid as today", mode: noPinholes, families: []v1.IPFamily{v6}, nodes: dualNodes(),
			wantErr: ErrInvalidService},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, f := newDualEnv(t, Config{}, fake.RouterConfig{ExternalIP: tt.external}, tt.mode)
			f.Fail(tt.failing)
			opts := []svcOpt{withFamilies(tt.families...)}
			if tt.ports != nil {
				opts = append(opts, withPorts(tt.ports...))
			}
			st, err := e.ensure(t, newService("default", "web", opts...), tt.nodes)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Ensure error = %v, want %v", err, tt.wantErr)
				}
			} else if err != nil {
				t.Fatalf("Ensure: %v", err)
			} else if diff := cmp.Diff(tt.want, st.Ingress); diff != "" {
				t.Errorf("status ingress (-want +got):\n%s", diff)
			}
			if tt.wantOpen == nil {
				tt.wantOpen = []string{}
			}
			f.Fail(nil)
			if diff := cmp.Diff(tt.wantOpen, f.Open()); diff != "" {
				t.Errorf("pinholes open (-want +got):\n%s", diff)
			}
		})
	}
}

var errRouterDown = errors.New("router unreachable")

// With Config.Pinholes, the renewal interval must renew a pinhole before its
// lease (at most MaxPinholeLease) ends, also when mappings are permanent.
func TestNewValidatesRenewIntervalAgainstPinholeLease(t *testing.T) {
	r := fake.NewRouter(fake.RouterConfig{})
	f := newFakePinholes(nil, guaA)
	tests := []struct {
		name    string
		cfg     Config
		wantErr bool
	}{
		{"permanent leases, default renewal", Config{Client: r.Client(addrA), Pinholes: f, Lease: PermanentLease}, false},
		{"permanent leases, renewal past half a pinhole's lease", Config{Client: r.Client(addrA), Pinholes: f, Lease: PermanentLease, RenewInterval: 13 * time.Hour}, true},
		{"permanent leases, same renewal without pinholes", Config{Client: r.Client(addrA), Lease: PermanentLease, RenewInterval: 13 * time.Hour}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.cfg)
			if got := err != nil && strings.Contains(err.Error(), "Config.RenewInterval"); got != tt.wantErr {
				t.Errorf("New error = %v; want an error naming Config.RenewInterval: %v", err, tt.wantErr)
			}
		})
	}
}

// Two LoadBalancers (a fail-over) choose the same node's address for a
// Service's IPv6 family; with the node serving its IPv4 family eligible for
// both, it is the same node.
func TestIPv6NodeChoiceIsDeterministic(t *testing.T) {
	nodes := []*v1.Node{newNode("node-a", addrA, withIPv6(guaA)), newNode("node-b", addrB, withIPv6(guaB))}
	var got []string
	for range 2 {
		e, _ := newDualEnv(t, Config{}, fake.RouterConfig{}, anyHostPinhole)
		st := e.mustEnsure(t, newService("default", "web", withFamilies(v1.IPv4Protocol, v1.IPv6Protocol)), nodes)
		if len(st.Ingress) != 2 {
			t.Fatalf("status %s, want two ingress entries", describeStatus(*st))
		}
		v4node := e.lb.nodeName(e.router.Mappings()[0].InternalClient)
		v6node := map[string]string{guaA.String(): "node-a", guaB.String(): "node-b"}[st.Ingress[1].IP]
		got = append(got, v4node+" "+v6node)
	}
	if got[0] != got[1] {
		t.Errorf("nodes of IPv4 and IPv6 in two processes: %q and %q, want the same", got[0], got[1])
	}
	if f := strings.Fields(got[0]); len(f) != 2 || f[0] != f[1] {
		t.Errorf("nodes of IPv4 and IPv6: %q, want one node for both", got[0])
	}
}

// A family that cannot be served gets a Warning event naming the family and
// why, while the other family is served.
func TestUnservedFamilyGetsWarningEvent(t *testing.T) {
	tests := []struct {
		name     string
		mode     pinholeMode
		external netip.Addr
		want     []string // substrings of the event's message
	}{
		{"IPv6 without a PinholeClient", noPinholes, netip.Addr{}, []string{"IPv6", "gateway.ipv6.enabled"}},
		{"IPv4 behind carrier-grade NAT", anyHostPinhole, netip.MustParseAddr("100.64.1.1"), []string{"IPv4", "100.64.1.1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, _ := newDualEnv(t, Config{}, fake.RouterConfig{ExternalIP: tt.external}, tt.mode)
			nodes := dualNodes()
			svc := lbService("default", "web", withFamilies(v1.IPv4Protocol, v1.IPv6Protocol))
			r := startBackground(t, e, nodes[0], nodes[1], nodes[2], svc)
			if _, err := e.ensure(t, svc, nodes); err != nil {
				t.Fatalf("Ensure: %v", err)
			}
			eventually(t, "a Warning event "+EventReasonIPFamilyNotServed, func() bool {
				evs, err := r.client.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{})
				if err != nil {
					return false
				}
				for _, ev := range evs.Items {
					if ev.Reason != EventReasonIPFamilyNotServed || ev.Type != v1.EventTypeWarning {
						continue
					}
					ok := true
					for _, s := range tt.want {
						ok = ok && strings.Contains(ev.Message, s)
					}
					if ok {
						return true
					}
					t.Logf("event message %q lacks one of %q", ev.Message, tt.want)
				}
				return false
			})
		})
	}
}

// A family not served while the other is, is retried in the background as
// ports not forwarded are (every 30 s at least), not only at the next
// renewal: once the router's IPv4 address is public, the status gains it.
func TestUnservedFamilyIsRetriedInTheBackground(t *testing.T) {
	e, _ := newDualEnv(t, Config{ClusterName: testCluster, Lease: time.Hour, RenewInterval: 5 * time.Minute},
		fake.RouterConfig{ExternalIP: netip.MustParseAddr("100.64.1.1")}, anyHostPinhole)
	nodes := dualNodes()
	svc := lbService("default", "web", withFamilies(v1.IPv4Protocol, v1.IPv6Protocol))
	r := startBackground(t, e, nodes[0], nodes[1], nodes[2], svc)
	eventually(t, "the IPv6 ingress in the status", func() bool {
		return len(r.service(t, "default", "web").Status.LoadBalancer.Ingress) == 1
	})
	e.router.SetExternalIP(fake.DefaultExternalIP)
	before := e.lb.passes.Load()
	e.clock.Step(portRetryInterval)
	eventually(t, "a retry pass", func() bool { return e.lb.passes.Load() > before })
	want := []v1.LoadBalancerIngress{ingress(fake.DefaultExternalIP.String(), tcp(8080)), ingress(guaA.String(), tcp(8080))}
	if diff := cmp.Diff(want, r.service(t, "default", "web").Status.LoadBalancer.Ingress); diff != "" {
		t.Errorf("status 30 s after the IPv4 address became public (-want +got):\n%s", diff)
	}
}

// A Service that drops the family it was not served on is no longer
// retried in the background for it.
func TestDroppedFamilyIsNoLongerRetried(t *testing.T) {
	noGUA := []*v1.Node{newNode("node-a", addrA, withIPv6(ulaB))}
	tests := []struct {
		name     string
		external netip.Addr
		nodes    []*v1.Node
		from, to []v1.IPFamily
	}{
		{"IPv4 behind CGNAT dropped", netip.MustParseAddr("100.64.1.1"), dualNodes(),
			[]v1.IPFamily{v1.IPv6Protocol, v1.IPv4Protocol}, []v1.IPFamily{v1.IPv6Protocol}},
		{"IPv6 without a global address dropped", netip.Addr{}, noGUA,
			[]v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}, []v1.IPFamily{v1.IPv4Protocol}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, _ := newDualEnv(t, Config{}, fake.RouterConfig{ExternalIP: tt.external}, anyHostPinhole)
			svc := lbService("default", "web", withFamilies(tt.from...))
			e.mustEnsure(t, svc, tt.nodes)
			if !e.lb.anyFailedPorts() {
				t.Fatal("a Service served on one family of two is not retried")
			}
			svc.Spec.IPFamilies = tt.to
			e.mustEnsure(t, svc, tt.nodes)
			if e.lb.anyFailedPorts() {
				t.Error("a Service that dropped its unserved family is still retried")
			}
		})
	}
}

// A Service served on one family of two (the other retried in the
// background) that is then withdrawn from every family (it became invalid,
// or was deleted) is no longer retried: nothing of it is served, so there is
// no family to retry, and its state is not kept for a retry.
func TestWithdrawnServiceIsNoLongerRetriedForAFamily(t *testing.T) {
	noGUA := []*v1.Node{newNode("node-a", addrA, withIPv6(ulaB))}
	v4, v6 := v1.IPv4Protocol, v1.IPv6Protocol
	tests := []struct {
		name     string
		families []v1.IPFamily
		change   func(*v1.Service)
		delete   bool // EnsureLoadBalancerDeleted instead of an Ensure
	}{
		{name: "IPv4 only now, with a port without a nodePort", families: []v1.IPFamily{v4},
			change: func(s *v1.Service) { s.Spec.Ports[0].NodePort = 0 }},
		{name: "IPv4 only now, with a loadBalancerIP not the router's", families: []v1.IPFamily{v4},
			change: func(s *v1.Service) { s.Spec.LoadBalancerIP = "203.0.113.99" }},
		{name: "still dual stack, with a port without a nodePort", families: []v1.IPFamily{v4, v6},
			change: func(s *v1.Service) { s.Spec.Ports[0].NodePort = 0 }},
		{name: "still dual stack, with a loadBalancerIP not the router's", families: []v1.IPFamily{v4, v6},
			change: func(s *v1.Service) { s.Spec.LoadBalancerIP = "203.0.113.99" }},
		{name: "deleted", families: []v1.IPFamily{v4, v6}, delete: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, _ := newDualEnv(t, Config{}, fake.RouterConfig{}, anyHostPinhole)
			svc := lbService("default", "web", withFamilies(v4, v6))
			e.mustEnsure(t, svc, noGUA)
			if !e.lb.anyFailedPorts() {
				t.Fatal("a Service served on IPv4 only, of two families, is not retried")
			}
			svc = svc.DeepCopy()
			svc.Spec.IPFamilies = tt.families
			if tt.change != nil {
				tt.change(svc)
			}
			if tt.delete {
				if err := e.lb.EnsureLoadBalancerDeleted(context.Background(), testCluster, svc); err != nil {
					t.Fatalf("EnsureLoadBalancerDeleted: %v", err)
				}
			} else if _, err := e.ensure(t, svc, noGUA); !errors.Is(err, ErrInvalidService) {
				t.Fatalf("Ensure error = %v, want %v", err, ErrInvalidService)
			}
			if e.lb.anyFailedPorts() {
				t.Error("a Service withdrawn from every family is still retried in the background (every 30 s) for a family")
			}
			diffRows(t, "router table after the withdrawal", e.table(), nil)
		})
	}
}

// A family dropped from a Service's spec stays recorded in its status while
// removing what the Service holds there fails: the status is the record a
// restarted (or failed-over) process removes it from, and a background pass
// must not write one that no longer names it. Once the router answers
// again, a restarted process removes it.
func TestDroppedFamilyStaysRecordedWhileItsWithdrawalFails(t *testing.T) {
	v4, v6 := v1.IPv4Protocol, v1.IPv6Protocol
	tests := []struct {
		name string
		to   []v1.IPFamily
		fail func(e *env, f *fakePinholes)
	}{
		{name: "IPv4 dropped, its mapping not removed", to: []v1.IPFamily{v6}, fail: func(e *env, _ *fakePinholes) {
			e.router.Intercept(fake.RouterHooks{DeletePortMapping: func(context.Context, netip.Addr, igd.Key, fake.DeleteFunc) error {
				return errRouterDown
			}})
		}},
		{name: "IPv6 dropped, its pinhole not closed", to: []v1.IPFamily{v4}, fail: func(_ *env, f *fakePinholes) {
			f.Fail(errRouterDown)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, f := newDualEnv(t, Config{ClusterName: testCluster}, fake.RouterConfig{}, anyHostPinhole)
			nodes := dualNodes()
			r := startBackground(t, e, nodes[0], nodes[1], nodes[2], lbService("default", "web", withFamilies(v4, v6)))
			eventually(t, "both families in the status", func() bool {
				return len(r.service(t, "default", "web").Status.LoadBalancer.Ingress) == 2
			})
			live := r.service(t, "default", "web")
			live.Spec.IPFamilies = tt.to
			updateSpec(t, r.client, live)
			tt.fail(e, f)
			r.tick(t)
			r.stop(t)
			live = r.service(t, "default", "web")
			e.router.ClearHooks()
			f.Fail(nil)

			restarted, err := New(Config{Client: e.router.Client(addrA), Clock: e.clock, Pinholes: anyHostPinholes{f}})
			if err != nil {
				t.Fatal(err)
			}
			restarted.seeNodes(nodes)
			if _, err := restarted.EnsureLoadBalancer(context.Background(), testCluster, live, nodes); err != nil {
				t.Fatalf("Ensure by a restarted process: %v", err)
			}
			var wantTable, wantOpen []string
			if slices.Contains(tt.to, v4) {
				wantTable = []string{row(igd.TCP, 8080, addrB, 30080, desc("default", "web", "http"))}
			}
			if slices.Contains(tt.to, v6) {
				wantOpen = []string{pin(igd.TCP, guaA, 8080)}
			}
			after := " after a restarted process served the Service (status after the failed pass " + describeStatus(live.Status.LoadBalancer) + ")"
			diffRows(t, "router table"+after, e.table(), wantTable)
			diffStrings(t, "pinholes open"+after, wantOpen, f.Open())
		})
	}
}

// An Ensure after EnsureLoadBalancerDeleted (the Service still wants its
// load balancer) that serves the Service on one family of two lifts the
// deleted mark: background passes renew and retry it again, also when its
// IPv4 family failed before it was served (the external IP not read).
func TestEnsureServingOneFamilyAfterADeleteLetsPassesServeIt(t *testing.T) {
	e, _ := newDualEnv(t, Config{}, fake.RouterConfig{}, anyHostPinhole)
	svc := lbService("default", "web", withFamilies(v1.IPv4Protocol, v1.IPv6Protocol))
	svc.Status.LoadBalancer = *e.mustEnsure(t, svc, dualNodes())
	if err := e.lb.EnsureLoadBalancerDeleted(context.Background(), testCluster, svc); err != nil {
		t.Fatal(err)
	}
	svc.Status.LoadBalancer = v1.LoadBalancerStatus{} // the service controller clears it
	e.router.Intercept(fake.RouterHooks{ExternalIP: func(context.Context, netip.Addr, fake.AddrFunc) (netip.Addr, error) {
		return netip.Addr{}, errRouterDown
	}})
	st := e.mustEnsure(t, svc, dualNodes())
	if diff := cmp.Diff([]v1.LoadBalancerIngress{ingress(guaA.String(), tcp(8080))}, st.Ingress); diff != "" {
		t.Fatalf("status served on IPv6 only (-want +got):\n%s", diff)
	}
	tn := e.lb.tryAcquire(newOwner(testCluster, "default", "web"), svc)
	if tn == nil {
		t.Fatal("a background pass is kept off the Service (the deleted mark stayed): its pinholes would not be renewed, nor its IPv4 family retried")
	}
	tn.release()
}
