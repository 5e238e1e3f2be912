package loadbalancer

// Open finding (not fixed): this test fails on purpose. See the report of
// the PCP review (branch h-pcprev).

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/pcp"
)

// dropDeletes is a PCP server's socket that never receives a PCP delete (a
// MAP with lifetime 0): the datagram is lost.
type dropDeletes struct{ net.PacketConn }

func (c dropDeletes) ReadFrom(b []byte) (int, net.Addr, error) {
	for {
		n, from, err := c.PacketConn.ReadFrom(b)
		if err == nil && n >= 24 && b[1] == 1 && binary.BigEndian.Uint32(b[4:8]) == 0 {
			continue
		}
		return n, from, err
	}
}

// When the router ignores PREFER_FAILURE (a LAN host took the key between
// the read and the MAP) and the client's undo of the mapping made on the
// next port is lost, that mapping forwards the next port to the node for a
// whole lease: it carries the nonce of the key asked for, so no read proves
// it the Service's (OwnedBy computes the nonce of the key it is at), and it
// is not removed when the Service is deleted.
func TestPCPLostUndoLeaksTheNextPort(t *testing.T) {
	e := newEnv(t, Config{}, fake.RouterConfig{})
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s, err := fake.NewPCPServer(fake.PCPConfig{Router: e.router, AllowThirdParty: true, Conn: dropDeletes{pc}})
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
	host := igd.Mapping{Protocol: igd.TCP, ExternalPort: 80, InternalClient: addrStranger, InternalPort: 8080,
		Description: "console", Lease: time.Hour, Enabled: true}
	var once sync.Once
	e.router.Intercept(fake.RouterHooks{
		ListPortMappings: func(ctx context.Context, _ netip.Addr, p igd.Protocol, r igd.PortRange, next fake.ListFunc) ([]igd.Mapping, error) {
			ms, err := next(ctx, p, r)
			if err == nil && p == igd.TCP {
				once.Do(func() { // after the read, before the MAP
					if _, err := e.router.Client(addrStranger).AddPortMapping(ctx, host); err != nil {
						t.Errorf("the host's add: %v", err)
					}
				})
			}
			return ms, err
		},
	})
	_, err = e.ensure(t, svc, nodes)
	e.router.ClearHooks()
	if err = notForwarded(e.lb, svc, err); !errors.Is(err, ErrPortInUse) {
		t.Errorf("Ensure with the key taken before the MAP: %v, want ErrPortInUse", err)
	}
	svc.Status.LoadBalancer = v1.LoadBalancerStatus{}
	if err := e.lb.EnsureLoadBalancerDeleted(ctx, testCluster, svc); err != nil {
		t.Errorf("EnsureLoadBalancerDeleted: %v", err)
	}
	for _, m := range e.router.Mappings() {
		if m.InternalPort == 30080 {
			t.Errorf("after the Service was deleted, %s still forwards to its node and nodePort: %q", m.Key(), e.table())
		}
	}
}
