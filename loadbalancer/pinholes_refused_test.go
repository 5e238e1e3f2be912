package loadbalancer

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/pinhole"
)

// heldElsewhere is a PinholeClient whose router holds the pinhole of port
// under another nonce: it refuses to open it as igd/pcp's Pinholes does
// once its delete is answered NOT_AUTHORIZED, with an error matching
// igd.ErrNotAuthorized.
type heldElsewhere struct {
	anyHostPinholes
	port uint16
}

func (h heldElsewhere) OpenPinhole(ctx context.Context, p pinhole.Pinhole) error {
	if p.InternalPort == h.port {
		return fmt.Errorf("pcp: open pinhole %s: the router holds it under another nonce: left to its owner: %w", p, igd.ErrNotAuthorized)
	}
	return h.anyHostPinholes.OpenPinhole(ctx, p)
}

// A pinhole the router holds for another party is reported as not opened
// (NotAuthorized) on its port, and the Service is served on its other
// ports, on every Ensure: the refusal does not fail the Service.
func TestPinholeHeldByAnotherPartyIsReportedNotOpened(t *testing.T) {
	e, f := newDualEnv(t, Config{}, fake.RouterConfig{}, anyHostPinhole)
	lb, err := New(Config{Client: e.router.Client(addrA), Clock: e.clock, Pinholes: heldElsewhere{anyHostPinholes{f}, 8080}})
	if err != nil {
		t.Fatal(err)
	}
	nodes := dualNodes()
	lb.seeNodes(nodes)
	svc := lbService("default", "web", withFamilies(v1.IPv6Protocol),
		withPorts(port("http", v1.ProtocolTCP, 8080, 30080), port("alt", v1.ProtocolTCP, 8443, 30443)))
	want := []v1.LoadBalancerIngress{ingress(guaA.String(), tcpFailed(8080, PortErrorNotAuthorized), tcp(8443))}
	for i := range 2 {
		st, err := lb.EnsureLoadBalancer(context.Background(), testCluster, svc, nodes)
		if err != nil {
			t.Fatalf("Ensure %d: %v", i, err)
		}
		if diff := cmp.Diff(want, st.Ingress); diff != "" {
			t.Errorf("status ingress of Ensure %d (-want +got):\n%s", i, diff)
		}
		svc.Status.LoadBalancer = *st
	}
	diffStrings(t, "pinholes open", []string{pin(igd.TCP, guaA, 8443)}, f.Open())
}
