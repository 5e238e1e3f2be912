package loadbalancer

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/pcp"
)

// blindBackend is a pcp.Backend without UPnP on s: it never reads.
func blindBackend(t *testing.T, s *fake.PCPServer) *pcp.Backend {
	t.Helper()
	return newPCPBackend(t, s, pcp.BackendConfig{Secret: pcpSecret})
}

// blindEnv is newEnv with a blind pcp.Backend as the client, THIRD_PARTY
// allowed.
func blindEnv(t *testing.T, cfg Config) (*env, *fake.PCPServer) {
	t.Helper()
	return blindEnvWith(t, cfg, fake.PCPConfig{AllowThirdParty: true})
}

// blindEnvWith is blindEnv with a PCP server configured by pc.
func blindEnvWith(t *testing.T, cfg Config, pc fake.PCPConfig) (*env, *fake.PCPServer) {
	t.Helper()
	return envWithPCP(t, cfg, fake.RouterConfig{}, pc, func(_ *env, s *fake.PCPServer) igd.Client { return blindBackend(t, s) })
}

// mapRequests counts the MAP requests (deletes included) s answered since n.
func mapRequests(s *fake.PCPServer, n int) (total, deletes int) {
	for _, c := range s.Calls()[n:] {
		if c.Version == 2 {
			total++
			if c.Lifetime == 0 {
				deletes++
			}
		}
	}
	return total, deletes
}

func TestServedBlind(t *testing.T) {
	e, s := blindEnv(t, Config{})
	ctx := context.Background()
	nodes := threeNodes()
	svc := newService("default", "web", withPorts(port("http", v1.ProtocolTCP, 80, 30080), port("dns", v1.ProtocolUDP, 53, 30053)))
	st := e.mustEnsure(t, svc, nodes)
	svc.Status.LoadBalancer = *st
	tcp, udp := igd.Key{Protocol: igd.TCP, ExternalPort: 80}, igd.Key{Protocol: igd.UDP, ExternalPort: 53}
	tgt := e.router.Mappings()[0].InternalClient
	rows := func(to netip.Addr) []string {
		return []string{row(igd.TCP, 80, to, 30080, pcpDesc("default", "web", tcp)), row(igd.UDP, 53, to, 30053, pcpDesc("default", "web", udp))}
	}
	diffRows(t, "table", e.table(), rows(tgt))
	if n := len(e.router.Calls()); n != 0 {
		t.Errorf("%d UPnP calls, want none: %v", n, e.router.Calls())
	}
	if len(st.Ingress) != 1 || st.Ingress[0].IP != e.router.ExternalIP().String() {
		t.Errorf("status %+v, want the router's external IP (NAT-PMP)", st)
	}

	// A no-op Ensure asks the external IP and writes nothing.
	n := len(s.Calls())
	e.mustEnsure(t, svc, nodes)
	if got, _ := mapRequests(s, n); got != 0 || len(s.Calls())-n != 1 {
		t.Errorf("a no-op Ensure sent %d MAPs and %d requests, want 0 and 1 (the external IP)", got, len(s.Calls())-n)
	}
	// Past half the lease it renews.
	e.clock.Step(45 * time.Minute)
	n = len(s.Calls())
	e.mustEnsure(t, svc, nodes)
	if got, _ := mapRequests(s, n); got != 2 {
		t.Errorf("the renewal sent %d MAPs, want 2", got)
	}

	// A fresh process (a restart, a second CCM) holds nothing: it maps
	// again, moving the Service to another node when its first is gone.
	second, err := New(Config{Client: blindBackend(t, s), Clock: e.clock})
	if err != nil {
		t.Fatal(err)
	}
	second.seeNodes(nodes)
	var others []*v1.Node
	for _, nd := range nodes {
		if nodeAddrs(nd)[0] != tgt {
			others = append(others, nd)
		}
	}
	if _, err := second.EnsureLoadBalancer(ctx, testCluster, svc, others); err != nil {
		t.Fatalf("Ensure from a second process without the first node: %v", err)
	}
	moved := e.router.Mappings()[0].InternalClient
	if moved == tgt {
		t.Fatalf("still mapped to %s", tgt)
	}
	diffRows(t, "table after the move", e.table(), rows(moved))

	// A third, fresh process knows nothing but the Service: it exists
	// (its status), and its delete sweeps the nodes.
	third, err := New(Config{Client: blindBackend(t, s), Clock: e.clock})
	if err != nil {
		t.Fatal(err)
	}
	third.seeNodes(nodes)
	if _, exists, err := third.GetLoadBalancer(ctx, testCluster, svc); err != nil || !exists {
		t.Fatalf("GetLoadBalancer from a fresh process: %t, %v", exists, err)
	}
	if err := third.EnsureLoadBalancerDeleted(ctx, testCluster, svc); err != nil {
		t.Fatalf("EnsureLoadBalancerDeleted from a fresh process: %v", err)
	}
	diffRows(t, "table after the delete", e.table(), nil)
}

// A blind client never touches another host's mapping: a held key fails
// with ErrPortInUse, and the sweep that looks for ours leaves it.
func TestServedBlindLeavesOthersAlone(t *testing.T) {
	e, _ := blindEnv(t, Config{})
	ctx := context.Background()
	host := igd.Mapping{Protocol: igd.TCP, ExternalPort: 80, InternalClient: addrStranger, InternalPort: 8080, Description: "console", Lease: time.Hour, Enabled: true}
	if _, err := e.router.Client(addrStranger).AddPortMapping(ctx, host); err != nil {
		t.Fatal(err)
	}
	// And one to a node's nodePort, at another key, listed first.
	nodeHost := igd.Mapping{Protocol: igd.TCP, ExternalPort: 9999, InternalClient: addrB, InternalPort: 30081, Description: "node b's own", Lease: time.Hour, Enabled: true}
	if _, err := e.router.Client(addrB).AddPortMapping(ctx, nodeHost); err != nil {
		t.Fatal(err)
	}
	want := e.table()
	nodes := threeNodes()
	svc := newService("default", "web", withPorts(port("http", v1.ProtocolTCP, 80, 30080), port("b", v1.ProtocolTCP, 81, 30081)))
	_, err := e.ensure(t, svc, nodes)
	var pe *PortError
	if err = notForwarded(e.lb, svc, err); !errors.As(err, &pe) || !errors.Is(err, ErrPortInUse) || pe.Key.ExternalPort != 80 {
		t.Errorf("Ensure = %v, want port 80 in use", err)
	}
	if err := e.lb.EnsureLoadBalancerDeleted(ctx, testCluster, svc); err != nil {
		t.Errorf("EnsureLoadBalancerDeleted: %v", err)
	}
	fresh, err := New(Config{Client: e.lb.cfg.Client, Clock: e.clock})
	if err != nil {
		t.Fatal(err)
	}
	fresh.seeNodes(nodes)
	if err := fresh.EnsureLoadBalancerDeleted(ctx, testCluster, svc); err != nil {
		t.Errorf("EnsureLoadBalancerDeleted from a fresh process: %v", err)
	}
	diffRows(t, "table", e.table(), want)
}

// A router that announces its restart is served again at once, though a
// blind client cannot see its mappings gone.
func TestServedBlindRepairsAnAnnouncedRestart(t *testing.T) {
	a := &announcer{restarts: make(chan struct{})}
	e, _ := blindEnv(t, Config{Lease: time.Hour, RenewInterval: 5 * time.Minute, ProbeInterval: 5 * time.Minute, Announcer: a})
	nodes := threeNodes()
	svc := lbService("default", "web", withPorts(port("a", v1.ProtocolTCP, 80, 30080)))
	e.mustEnsure(t, svc, nodes)
	before := e.table()
	startBackground(t, e, nodes[0], nodes[1], nodes[2], svc)
	eventually(t, "the announcement listener", func() bool { return a.listening.Load() == 1 })
	e.router.Reboot()
	passes := e.lb.passes.Load()
	a.restarts <- struct{}{}
	eventually(t, "the repair pass", func() bool { return e.lb.passes.Load() > passes })
	diffRows(t, "table after the announced restart", e.table(), before)
}
