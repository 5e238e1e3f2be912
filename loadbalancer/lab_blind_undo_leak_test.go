package loadbalancer

import (
	"context"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/igdtest"
	"github.com/ccmkit/ccmkit/igd/pcp"
)

// TestLabBlindLostUndo: unfixed finding (see TestBlindLostUndoLeavesNoStrayPort),
// on miniupnpd 2.3.1: a MAP for a key another host holds lands on the next
// port; its undo is lost; once the host leaves, the Service gets its key,
// and the stray port stays forwarded to its node.
func TestLabBlindLostUndo(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{Nodes: 3, PCPAllowThirdParty: true})
	ctx := labContext(t)
	var drop atomic.Bool
	n := lab.Nodes[0]
	c, err := pcp.NewClient(pcp.Config{
		Server:      netip.AddrPortFrom(lab.RouterLAN, pcp.Port),
		CallTimeout: 500 * time.Millisecond,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := n.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return lossyConn{Conn: conn, drop: &drop}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	dropDeletes.Store(true) // only the undo is lost
	t.Cleanup(func() { dropDeletes.Store(false) })
	b, err := pcp.NewBackend(pcp.BackendConfig{PCP: c, Secret: pcpSecret})
	if err != nil {
		t.Fatal(err)
	}
	lb, err := New(Config{Client: b})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := lab.Upnpc(ctx, 2, "-e", "console", "-a", lab.Nodes[2].Addr.String(), "9000", "8080", "TCP"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	all := labNodes(lab)
	svc := newService("default", "web", withPorts(port("http", v1.ProtocolTCP, 8080, 30080)))
	drop.Store(true)
	if _, err := lb.EnsureLoadBalancer(ctx, testCluster, svc, all[1:2]); err == nil {
		t.Fatal("Ensure took a key another host holds")
	}
	drop.Store(false)
	if out, err := lab.Upnpc(ctx, 2, "-d", "8080", "TCP"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if _, err := lb.EnsureLoadBalancer(ctx, testCluster, svc, all[1:2]); err != nil {
		t.Fatal(err)
	}
	peer := labClient(t, lab, 2)
	if m, err := peer.GetPortMapping(ctx, igd.TCP, 8081); err == nil {
		t.Errorf("stray mapping %v left by the lost undo\n%s", m, peerTable(t, ctx, lab, 2))
	}
	if err := lb.EnsureLoadBalancerDeleted(ctx, testCluster, svc); err != nil {
		t.Errorf("EnsureLoadBalancerDeleted: %v", err)
	}
	t.Logf("table after the delete:\n%s", peerTable(t, ctx, lab, 2))
}
