package loadbalancer

// Open finding (not fixed): this test fails on purpose. See the report of
// the PCP review (branch h-pcprev).

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/ccmkit/ccmkit/igd"
)

// A LAN host's mapping to the node and nodePort of a Service's mapping,
// listed before it (newest first on miniupnpd with nftables), makes every
// PCP delete of the Service's mapping NOT_AUTHORIZED: the router checks the
// nonce of the first mapping to the internal address and port, not the
// mapping at the key. When the node goes down the Service is not moved to
// another node until its mapping's lease ends (an hour by default, a day
// with permanent leases through miniupnpd's max_lifetime), and a deleted
// Service's finalizer stays as long. doc.go states that deletes fail; it
// does not say that a move (node failover) is blocked too.
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
