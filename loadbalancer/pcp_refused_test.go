package loadbalancer

import (
	"context"
	"encoding/binary"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/pcp"
)

// labRules are the lab's miniupnpd permission lines: external ports
// 1024-65535 to LAN hosts' ports 1024-65535, nothing else.
var labRules = []fake.Permission{
	{Allow: true, External: igd.PortRange{First: 1024, Last: 65535}, Client: netip.MustParsePrefix("192.0.2.0/24"), Internal: igd.PortRange{First: 1024, Last: 65535}},
	{External: igd.AllPorts, Client: netip.MustParsePrefix("0.0.0.0/0"), Internal: igd.AllPorts},
}

// Through PCP, reading through UPnP (mode pcp) or never reading (pcp-only),
// a port the router's permission rules refuse is ccmkit.io/NotAuthorized,
// as through UPnP, and a port a LAN host holds ccmkit.io/PortInUse (the
// fakes' counterpart of TestLabPCPRefusedPortIsNotAuthorized).
func TestPCPRefusedPortIsNotAuthorized(t *testing.T) {
	for _, mode := range []struct {
		name   string
		client func(t *testing.T) func(*env, *fake.PCPServer) igd.Client
	}{
		{"pcp", func(t *testing.T) func(*env, *fake.PCPServer) igd.Client {
			return func(e *env, s *fake.PCPServer) igd.Client { return pcpBackend(t, e.router, s, pcpSecret) }
		}},
		{"pcp-only", func(t *testing.T) func(*env, *fake.PCPServer) igd.Client {
			return func(_ *env, s *fake.PCPServer) igd.Client { return blindBackend(t, s) }
		}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			e, _ := envWithPCP(t, Config{}, fake.RouterConfig{Permissions: labRules}, fake.PCPConfig{AllowThirdParty: true}, mode.client(t))
			lan := netip.MustParseAddr("192.0.2.99")
			if _, err := e.router.Client(lan).AddPortMapping(context.Background(), igd.Mapping{Protocol: igd.TCP, ExternalPort: 8081, InternalClient: lan, InternalPort: 9000, Description: "theirs", Lease: time.Hour, Enabled: true}); err != nil {
				t.Fatal(err)
			}
			svc := newService("default", "web", withPorts(
				port("low", v1.ProtocolTCP, 80, 30080), port("held", v1.ProtocolTCP, 8081, 30081), port("high", v1.ProtocolTCP, 8080, 30082)))
			st, err := e.ensure(t, svc, threeNodes()[1:2])
			if err != nil {
				t.Fatalf("Ensure = %v, want TCP/8080 served and the refusals in the status", err)
			}
			want := map[string]string{"TCP/80": PortErrorNotAuthorized, "TCP/8081": PortErrorInUse, "TCP/8080": ""}
			if diff := cmp.Diff(want, portErrors(st)); diff != "" {
				t.Errorf("port errors (-want +got):\n%s\nnot forwarded: %v", diff, notForwarded(e.lb, svc, nil))
			}
		})
	}
}

// The tests below pin what the load balancer does when the router refuses
// a PCP delete of the Service's own mapping (NOT_AUTHORIZED) because
// another mapping to the same node and nodePort is listed first: the
// router checks the nonce of the first mapping to the internal address and
// port, not the mapping at the key. A load balancer that reads the router
// then reads the key again and deletes, through the client's plain delete,
// what that read proves still its own.

// A LAN host's mapping to the node and nodePort of a Service's mapping,
// listed before it (newest first on miniupnpd with nftables), makes every
// PCP delete of the Service's mapping NOT_AUTHORIZED. When the node goes
// down the Service's port is still moved to another node at once, not
// left on the node until its mapping's lease ends (an hour by default, a
// day with permanent leases through miniupnpd's max_lifetime).
func TestPCPMoveOffANodeDespiteAForeignRuleToItsNodePort(t *testing.T) {
	e, _ := pcpEnv(t, Config{})
	ctx := context.Background()
	nodes := threeNodes()
	svc := newService("default", "web", withPorts(port("http", v1.ProtocolTCP, 80, 30080)))
	e.mustEnsure(t, svc, nodes)
	m := e.router.Mappings()[0]
	host := igd.Mapping{Protocol: igd.TCP, ExternalPort: 9999, InternalClient: m.InternalClient, InternalPort: 30080,
		Description: "a LAN host's forward to the nodePort", Lease: time.Hour, Enabled: true}
	if _, err := e.router.Client(addrStranger).AddPortMapping(ctx, host); err != nil {
		t.Fatal(err)
	}
	// The target node goes down.
	var up []*v1.Node
	for _, n := range nodes {
		if a, _ := nodeTarget(n); a.addr == m.InternalClient {
			continue
		}
		up = append(up, n)
	}
	if len(up) != 2 {
		t.Fatalf("nodes up: %d, want 2", len(up))
	}
	_, err := e.ensure(t, svc, up)
	if err = notForwarded(e.lb, svc, err); err != nil {
		t.Errorf("Ensure with the target node down: %v", err)
	}
	for _, got := range e.router.Mappings() {
		if got.ExternalPort == 80 && got.InternalClient == m.InternalClient {
			t.Errorf("port 80 still forwards to the node that went down (%s): %q", m.InternalClient, e.table())
		}
	}
}

// dropDeletesOnce drops the first n PCP deletes (lifetime 0) the server
// reads, as lossyConn with dropDeletes does on the client's side.
type dropDeletesOnce struct {
	net.PacketConn
	mu sync.Mutex
	n  int
}

func (c *dropDeletesOnce) ReadFrom(b []byte) (int, net.Addr, error) {
	for {
		n, from, err := c.PacketConn.ReadFrom(b)
		if err == nil && n >= 24 && b[1] == 1 && binary.BigEndian.Uint32(b[4:8]) == 0 {
			c.mu.Lock()
			drop := c.n > 0
			c.n--
			c.mu.Unlock()
			if drop {
				continue
			}
		}
		return n, from, err
	}
}

// A Service's port moves to another external port with the same nodePort
// (an edit of spec.ports[].port keeps the nodePort). When the delete of the
// old mapping fails once (its datagrams lost), the new mapping is made
// anyway, and then, newest to the node and nodePort, it is the one the
// router checks the nonce of: every later PCP delete of the old mapping is
// NOT_AUTHORIZED. Once the router receives deletes again, the port the
// user withdrew is withdrawn, not left forwarded for the rest of its lease
// (an hour; a day with permanent leases).
func TestPCPWithdrawalDespiteAnOwnNewerMappingToTheNodePort(t *testing.T) {
	e := newEnv(t, Config{}, fake.RouterConfig{})
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s, err := fake.NewPCPServer(fake.PCPConfig{Router: e.router, AllowThirdParty: true, Conn: &dropDeletesOnce{PacketConn: pc, n: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	c, err := pcp.NewClient(pcp.Config{Server: s.Addr(), CallTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	b, err := pcp.NewBackend(pcp.BackendConfig{UPnP: e.router.Client(addrA), PCP: c, Secret: pcpSecret})
	if err != nil {
		t.Fatal(err)
	}
	if e.lb, err = New(Config{Client: b, Clock: e.clock}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	nodes := threeNodes()
	svc := newService("default", "web", withPorts(port("http", v1.ProtocolTCP, 80, 30080)))
	svc.Status.LoadBalancer = *e.mustEnsure(t, svc, nodes)
	svc.Spec.Ports[0].Port = 8080
	if _, err := e.ensure(t, svc, nodes); err == nil {
		t.Fatal("Ensure with the delete lost: no error")
	}
	s.Close() // a router that receives every datagram from now on
	s2, err := fake.NewPCPServer(fake.PCPConfig{Router: e.router, AllowThirdParty: true, Conn: mustListenAt(t, s.Addr().String())})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s2.Close() })
	_, err = e.lb.EnsureLoadBalancer(ctx, testCluster, svc, nodes)
	if err != nil {
		t.Errorf("Ensure once the router receives deletes: %v", err)
	}
	for _, m := range e.router.Mappings() {
		if m.ExternalPort == 80 {
			t.Errorf("port 80, withdrawn, still forwarded: %q", e.table())
		}
	}
}

// mustListenAt is a UDP socket bound to addr.
func mustListenAt(t *testing.T, addr string) net.PacketConn {
	t.Helper()
	pc, err := net.ListenPacket("udp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	return pc
}

// Two ports of a Service swap nodePorts. The first is deleted and made
// again toward the other's nodePort; the second's mapping is then no longer
// the newest to its node and nodePort, and its PCP delete is NOT_AUTHORIZED.
// Both ports are re-pointed all the same: neither forwards to the other's
// nodePort for the rest of its lease.
func TestPCPNodePortSwapRepointsBothPorts(t *testing.T) {
	e, _ := pcpEnv(t, Config{})
	nodes := threeNodes()
	svc := newService("default", "web", withPorts(port("http", v1.ProtocolTCP, 80, 30080), port("alt", v1.ProtocolTCP, 81, 30081)))
	e.mustEnsure(t, svc, nodes)
	tgt := e.router.Mappings()[0].InternalClient
	svc.Spec.Ports[0].NodePort, svc.Spec.Ports[1].NodePort = 30081, 30080
	_, err := e.ensure(t, svc, nodes)
	if err = notForwarded(e.lb, svc, err); err != nil {
		t.Errorf("Ensure after the swap: %v", err)
	}
	diffRows(t, "table", e.table(), []string{
		row(igd.TCP, 80, tgt, 30081, pcpDesc("default", "web", igd.Key{Protocol: igd.TCP, ExternalPort: 80})),
		row(igd.TCP, 81, tgt, 30080, pcpDesc("default", "web", igd.Key{Protocol: igd.TCP, ExternalPort: 81})),
	})
}

// The fall-back after NOT_AUTHORIZED reads the key again: a LAN host's
// mapping that took the key after the Service's expired (the router
// reported a longer lease than it kept) is not deleted, even when another
// mapping to the node and nodePort makes the PCP delete NOT_AUTHORIZED.
func TestPCPNotAuthorizedFallBackSparesAMappingTakenAfterTheRead(t *testing.T) {
	e, s := pcpEnv(t, Config{Lease: 2 * time.Minute})
	ctx := context.Background()
	nodes := threeNodes()
	svc := newService("default", "web", withPorts(port("http", v1.ProtocolTCP, 80, 30080)))
	e.mustEnsure(t, svc, nodes)
	tgt := e.router.Mappings()[0].InternalClient
	other := igd.Mapping{Protocol: igd.TCP, ExternalPort: 9999, InternalClient: tgt, InternalPort: 30080,
		Description: "a LAN host's forward to the nodePort", Lease: time.Hour, Enabled: true}
	if _, err := e.router.Client(addrStranger).AddPortMapping(ctx, other); err != nil {
		t.Fatal(err)
	}
	lb, err := New(Config{Client: pcpBackend(t, e.router, s, pcpSecret), Clock: e.clock})
	if err != nil {
		t.Fatal(err)
	}
	lb.seeNodes(nodes)
	host := igd.Mapping{Protocol: igd.TCP, ExternalPort: 80, InternalClient: addrStranger, InternalPort: 8080,
		Description: "console", Lease: time.Hour, Enabled: true}
	takeAfterTheRead(t, e, host)
	_ = lb.EnsureLoadBalancerDeleted(ctx, testCluster, svc)
	e.router.ClearHooks()
	diffRows(t, "table after the late delete", e.table(), []string{
		row(igd.TCP, 80, addrStranger, 8080, "console"),
		row(igd.TCP, 9999, tgt, 30080, "a LAN host's forward to the nodePort"),
	})
}
