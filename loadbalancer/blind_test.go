package loadbalancer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/pcp"
	"github.com/ccmkit/ccmkit/internal/pcpwire"
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

// lossyConn drops the PCP requests (version 2) it is asked to send while
// *drop is set: the router never sees them.
type lossyConn struct {
	net.Conn
	drop *atomic.Bool
}

func (c lossyConn) Write(b []byte) (int, error) {
	isDelete := len(b) >= 8 && b[4]|b[5]|b[6]|b[7] == 0
	if c.drop.Load() && len(b) > 0 && b[0] == 2 && (!dropDeletes.Load() || isDelete) {
		return len(b), nil
	}
	return c.Conn.Write(b)
}

// dropDeletes narrows lossyConn's losses to deletes (lifetime 0).
var dropDeletes atomic.Bool

// lossyBlindEnv is blindEnv whose PCP requests are lost while the returned
// flag is set (a call then times out after 300 ms).
func lossyBlindEnv(t *testing.T, cfg Config) (*env, *fake.PCPServer, *atomic.Bool) {
	t.Helper()
	e := newEnv(t, cfg, fake.RouterConfig{})
	s, err := fake.NewPCPServer(fake.PCPConfig{Router: e.router, AllowThirdParty: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	drop := new(atomic.Bool)
	c, err := pcp.NewClient(pcp.Config{Server: s.Addr(), CallTimeout: 300 * time.Millisecond,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return lossyConn{Conn: conn, drop: drop}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := pcp.NewBackend(pcp.BackendConfig{PCP: c, Secret: pcpSecret})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Client, cfg.Clock = b, e.clock
	if e.lb, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	return e, s, drop
}

// A MAP whose outcome is unknown (no answer: the router may or may not
// have it) must not be taken as made by the next Ensure: a blind client
// has no read to confirm it, so it sends the MAP again (idempotent). Else
// the Service is reported forwarded while the router has nothing, until
// the renewal half a lease later.
func TestBlindUnansweredMapIsSentAgain(t *testing.T) {
	e, _, drop := lossyBlindEnv(t, Config{})
	nodes := threeNodes()
	svc := newService("default", "web", withPorts(port("http", v1.ProtocolTCP, 80, 30080)))
	drop.Store(true)
	if _, err := e.ensure(t, svc, nodes); err == nil {
		t.Fatal("Ensure with every MAP lost succeeded")
	}
	drop.Store(false)
	if len(e.router.Mappings()) != 0 {
		t.Fatalf("the router has %v, want nothing (the MAP was lost)", e.table())
	}
	st, err := e.ensure(t, svc, nodes)
	if err != nil {
		t.Fatalf("Ensure once the router answers: %v", err)
	}
	if len(e.router.Mappings()) != 1 {
		t.Errorf("Ensure reported %+v with the router holding %v, want the mapping made", st, e.table())
	}
	_ = igd.TCP
}

// A foreign host holding a key costs each Ensure of the Service that wants
// it one refused MAP (and its undo), not a sweep of every node address: a
// sweep finds only what another process wrote before this one swept, so
// one per key and nodePort is enough. Else every Ensure, and every retry
// pass (30 s), sends a guarded delete per node address: hundreds of
// requests a minute to a single-threaded router for a large cluster.
func TestBlindForeignHolderIsNotSweptOnEveryEnsure(t *testing.T) {
	e, s := blindEnv(t, Config{})
	ctx := context.Background()
	host := igd.Mapping{Protocol: igd.TCP, ExternalPort: 80, InternalClient: addrStranger, InternalPort: 8080, Description: "console", Lease: time.Hour, Enabled: true}
	if _, err := e.router.Client(addrStranger).AddPortMapping(ctx, host); err != nil {
		t.Fatal(err)
	}
	var nodes []*v1.Node
	for i := range 20 {
		nodes = append(nodes, newNode(fmt.Sprintf("node-%02d", i), netip.AddrFrom4([4]byte{192, 0, 2, byte(100 + i)})))
	}
	svc := newService("default", "web", withPorts(port("http", v1.ProtocolTCP, 80, 30080), port("b", v1.ProtocolTCP, 81, 30081)))
	e.ensure(t, svc, nodes)
	for i := range 3 {
		n := len(s.Calls())
		_, err := e.ensure(t, svc, nodes)
		if err = notForwarded(e.lb, svc, err); !errors.Is(err, ErrPortInUse) {
			t.Fatalf("Ensure %d = %v, want port 80 in use", i, err)
		}
		if total, deletes := mapRequests(s, n); deletes > 1 {
			t.Errorf("Ensure %d with a foreign holder sent %d MAP requests, %d of them deletes; want at most one refused MAP and its undo", i, total, deletes)
		}
	}
}

// A renewal the router refuses (miniupnpd answers NETWORK_FAILURE while its
// WAN interface has no address) leaves the mapping it renews in place: the
// process must still count it as the Service's, or a port removed once the
// WAN is back is never deleted (the mapping forwards until its lease ends),
// and the Service must win the key back through arbitration.
func TestBlindRefusedRenewalKeepsTheMapping(t *testing.T) {
	var refuse atomic.Bool
	e := newEnv(t, Config{}, fake.RouterConfig{})
	s, err := fake.NewPCPServer(fake.PCPConfig{Router: e.router, AllowThirdParty: true,
		OnAnswer: func(call fake.PCPCall, answer []byte) []byte {
			if refuse.Load() && call.Version == 2 && call.Lifetime != 0 && len(answer) > 3 {
				answer[3] = byte(pcpwire.NetworkFailure)
			}
			return answer
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if e.lb, err = New(Config{Client: blindBackend(t, s), Clock: e.clock}); err != nil {
		t.Fatal(err)
	}
	nodes := threeNodes()
	svc := newService("default", "web", withPorts(port("http", v1.ProtocolTCP, 80, 30080), port("alt", v1.ProtocolTCP, 81, 30081)))
	svc.Status.LoadBalancer = *e.mustEnsure(t, svc, nodes)
	e.clock.Step(45 * time.Minute) // renewals due
	refuse.Store(true)
	if _, err := e.ensure(t, svc, nodes); err == nil {
		t.Fatal("Ensure with every renewal refused succeeded")
	}
	refuse.Store(false)
	svc.Spec.Ports = svc.Spec.Ports[1:] // port 80 removed
	if _, err := e.ensure(t, svc, nodes); err != nil {
		t.Fatalf("Ensure without port 80: %v", err)
	}
	for _, m := range e.router.Mappings() {
		if m.ExternalPort == 80 {
			t.Errorf("TCP/80 still forwarded after the port was removed: %q", e.table())
		}
	}
}

// A Service that cannot be served (here: source ranges) loses its own
// mappings on every Ensure and pass; blind, with nothing held, that is a
// sweep of every node address at each of its ports. One sweep finds what an
// earlier process left; the next ones, within a lease, can find nothing
// but cost a guarded delete per node and port, every pass, forever.
func TestBlindInvalidServiceIsNotSweptOnEveryEnsure(t *testing.T) {
	e, s := blindEnv(t, Config{})
	var nodes []*v1.Node
	for i := range 20 {
		nodes = append(nodes, newNode(fmt.Sprintf("node-%02d", i), netip.AddrFrom4([4]byte{192, 0, 2, byte(100 + i)})))
	}
	svc := newService("default", "web", withPorts(port("http", v1.ProtocolTCP, 80, 30080), port("b", v1.ProtocolTCP, 81, 30081)))
	svc.Spec.LoadBalancerSourceRanges = []string{"198.51.100.0/24"}
	if _, err := e.ensure(t, svc, nodes); !errors.Is(err, ErrInvalidService) {
		t.Fatalf("Ensure = %v, want ErrInvalidService", err)
	}
	for i := range 3 {
		n := len(s.Calls())
		if _, err := e.ensure(t, svc, nodes); !errors.Is(err, ErrInvalidService) {
			t.Fatalf("Ensure %d = %v, want ErrInvalidService", i, err)
		}
		if _, deletes := mapRequests(s, n); deletes > 0 {
			t.Errorf("Ensure %d of an invalid Service, swept a minute ago, sent %d deletes; want none", i, deletes)
		}
		e.clock.Step(time.Minute)
	}
}

// A port renamed changes nothing the router stores through PCP (the nonce
// names the Service and the key, not the port's name): a blind client must
// not delete and re-add the mapping for it, which leaves the key free for
// any LAN host to take in between.
func TestBlindPortRenameWritesNothing(t *testing.T) {
	e, s := blindEnv(t, Config{})
	nodes := threeNodes()
	svc := newService("default", "web", withPorts(port("http", v1.ProtocolTCP, 80, 30080)))
	e.mustEnsure(t, svc, nodes)
	svc.Spec.Ports[0].Name = "web"
	n := len(s.Calls())
	e.mustEnsure(t, svc, nodes)
	if total, deletes := mapRequests(s, n); total != 0 {
		t.Errorf("Ensure after a port rename sent %d MAP requests (%d deletes), want none", total, deletes)
	}
}

// Blind, what this process wrote is never corrected by a read. A mapping
// it wrote toward a node that left, whose delete the router refuses
// (another host's mapping to that address and nodePort comes first: here
// the host that took over the deleted node's address), is no longer held
// once its lease has ended and the router dropped it: the move off the
// node succeeds then, bounded by the router's lease, not failing on every
// Ensure for ever.
func TestBlindExpiredMappingDoesNotBlockAMove(t *testing.T) {
	e, _ := blindEnv(t, Config{})
	ctx := context.Background()
	nodes := threeNodes()
	svc := newService("default", "web", withPorts(port("http", v1.ProtocolTCP, 80, 30080)))
	e.mustEnsure(t, svc, nodes)
	from := e.router.Mappings()[0].InternalClient
	var stay []*v1.Node
	for _, n := range nodes {
		if nodeAddrs(n)[0] != from {
			stay = append(stay, n)
		} else {
			e.lb.forgetNode(n.Name)
		}
	}
	// A host now at the node's old address maps that port to itself.
	other := igd.Mapping{Protocol: igd.TCP, ExternalPort: 9999, InternalClient: from, InternalPort: 30080, Description: "its own", Lease: 3 * time.Hour, Enabled: true}
	if _, err := e.router.Client(from).AddPortMapping(ctx, other); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ensure(t, svc, stay); err == nil {
		t.Log("the first move succeeded") // the router may delete ours first, depending on its order
	}
	e.clock.Step(2 * time.Hour) // ours ended with its lease
	if _, err := e.ensure(t, svc, stay); err != nil {
		t.Errorf("Ensure two hours later, the old mapping long gone: %v", err)
	}
	for _, m := range e.router.Mappings() {
		if m.ExternalPort == 80 && m.InternalClient == from {
			t.Errorf("still mapped to %s", from)
		}
	}
	if ms := e.router.Mappings(); len(ms) != 2 {
		t.Errorf("table %q, want the host's and the Service's moved mapping", e.table())
	}
}

// Blind, on a router that refuses THIRD_PARTY: the first refusal makes the
// backend SelfOnly and the same Ensure maps to this process's node (the
// PCP client's address, 127.0.0.1 here). Every Service ends there, what
// this process holds is what the router has, and a second Ensure writes
// nothing.
func TestBlindSelfOnlyRetryLeavesNothingStale(t *testing.T) {
	e, s := blindEnvWith(t, Config{}, fake.PCPConfig{}) // THIRD_PARTY refused
	self := netip.MustParseAddr("127.0.0.1")
	nodes := []*v1.Node{newNode("node-a", self), newNode("node-b", addrB), newNode("node-c", addrC)}
	var svcs []*v1.Service
	for i := range 6 {
		svc := newService("default", fmt.Sprintf("web%d", i), withPorts(
			port("a", v1.ProtocolTCP, int32(100+2*i), int32(30100+2*i)), port("b", v1.ProtocolUDP, int32(101+2*i), int32(30101+2*i))))
		svc.Status.LoadBalancer = *e.mustEnsure(t, svc, nodes)
		svcs = append(svcs, svc)
	}
	held := e.lb.heldKeys()
	ms := e.router.Mappings()
	if len(ms) != 12 || len(held) != 12 {
		t.Errorf("router %q, held %v: want 12 each", e.table(), held)
	}
	for _, m := range ms {
		if m.InternalClient != self {
			t.Errorf("mapping %s to %s, want this node (%s)", m.Key(), m.InternalClient, self)
		}
		if _, ok := held[m.Key()]; !ok {
			t.Errorf("mapping %s not held", m.Key())
		}
	}
	for k := range held {
		if _, err := e.router.Client(self).GetPortMapping(t.Context(), k.Protocol, k.ExternalPort); err != nil {
			t.Errorf("held %s, router: %v", k, err)
		}
	}
	n := len(s.Calls())
	for _, svc := range svcs {
		e.mustEnsure(t, svc, nodes)
	}
	if got, _ := mapRequests(s, n); got != 0 {
		t.Errorf("no-op Ensures sent %d MAP requests, want none", got)
	}
	_ = igd.TCP
}

// Blind, on a router that refuses THIRD_PARTY (miniupnpd's default), the
// sweep of a fresh process's delete sends a PCP delete naming every other
// node: each is refused with UNSUPP_OPTION. That refusal says no mapping
// of ours can be there (the router makes none for another host); it must
// not fail the delete, or the Service's finalizer is never removed.
func TestBlindSelfOnlyDeleteFromAFreshProcess(t *testing.T) {
	e, s := blindEnvWith(t, Config{}, fake.PCPConfig{}) // THIRD_PARTY refused
	self := netip.MustParseAddr("127.0.0.1")
	nodes := []*v1.Node{newNode("node-a", self), newNode("node-b", addrB), newNode("node-c", addrC)}
	svc := newService("default", "web", withPorts(port("a", v1.ProtocolTCP, 80, 30080)))
	svc.Status.LoadBalancer = *e.mustEnsure(t, svc, nodes)

	fresh, err := New(Config{Client: blindBackend(t, s), Clock: e.clock})
	if err != nil {
		t.Fatal(err)
	}
	fresh.seeNodes(nodes)
	if err := fresh.EnsureLoadBalancerDeleted(t.Context(), testCluster, svc); err != nil {
		t.Errorf("EnsureLoadBalancerDeleted from a fresh process: %v", err)
	}
	diffRows(t, "table after the delete", e.table(), nil)
}
