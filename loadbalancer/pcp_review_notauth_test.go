package loadbalancer

// Findings of the PCP review (branch h-pcprev): a PCP delete the router
// refuses (NOT_AUTHORIZED) because another mapping to the same node and
// nodePort is listed first. They failed before LoadBalancer.delete fell
// back to a fresh read and a plain delete.

import (
	"context"
	"encoding/binary"
	"net"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/pcp"
)

// A LAN host's mapping to the node and nodePort of a Service's mapping,
// listed before it (newest first on miniupnpd with nftables), makes every
// PCP delete of the Service's mapping NOT_AUTHORIZED: the router checks the
// nonce of the first mapping to the internal address and port, not the
// mapping at the key. When the node goes down the Service is not moved to
// another node until its mapping's lease ends (an hour by default, a day
// with permanent leases through miniupnpd's max_lifetime), and a deleted
// Service's finalizer stays as long.
func TestPCPForeignRuleToTheNodePortBlocksAMove(t *testing.T) {
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

// dropDeletesOnce is dropDeletes for the first n deletes only.
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
// router checks the nonce of: every later delete of the old mapping is
// NOT_AUTHORIZED, and the port the user withdrew stays forwarded for the
// rest of its lease (an hour; a day with permanent leases).
func TestPCPOwnNewerMappingBlocksTheWithdrawal(t *testing.T) {
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
// the newest to its node and nodePort, and its PCP delete is NOT_AUTHORIZED:
// it forwards to the other port's nodePort for the rest of its lease.
func TestPCPNodePortSwapBlocksTheSecondPort(t *testing.T) {
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
