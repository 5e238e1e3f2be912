package loadbalancer

import (
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/igdtest"
)

// TestLabPCPNodePortChanges: on miniupnpd 2.3.1 (nftables) a Service
// served through PCP follows a change of its nodePorts: one changed, two
// swapped. The router refuses a MAP at a key its mapping holds for another
// internal port, and refuses the PCP delete of a mapping whose node and
// nodePort another, newer mapping also targets (NOT_AUTHORIZED).
func TestLabPCPNodePortChanges(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{Nodes: 2, PCPAllowThirdParty: true})
	ctx := labContext(t)
	lb, err := New(Config{Client: labBackend(t, labClient(t, lab, 0), labPCP(t, lab, 0, nil), pcpSecret)})
	if err != nil {
		t.Fatal(err)
	}
	nodes := labNodes(lab)[1:]
	peer := labClient(t, lab, 1)
	check := func(what string, want map[uint16]uint16) {
		t.Helper()
		for ext, np := range want {
			m, err := peer.GetPortMapping(ctx, igd.TCP, ext)
			if err != nil || m.InternalClient != lab.Nodes[1].Addr || m.InternalPort != np {
				t.Errorf("%s: TCP/%d = %v, %v; want to %s:%d", what, ext, m, err, lab.Nodes[1].Addr, np)
			}
		}
	}
	svc := newService("default", "web", withPorts(port("http", v1.ProtocolTCP, 8080, 30080), port("alt", v1.ProtocolTCP, 8081, 30081)))
	if _, err := lb.EnsureLoadBalancer(ctx, testCluster, svc, nodes); err != nil {
		t.Fatal(err)
	}
	svc.Spec.Ports[0].NodePort = 30082
	if _, err := lb.EnsureLoadBalancer(ctx, testCluster, svc, nodes); err != nil {
		t.Errorf("Ensure after a nodePort changed: %v", err)
	}
	check("after a nodePort changed", map[uint16]uint16{8080: 30082, 8081: 30081})
	svc.Spec.Ports[0].NodePort, svc.Spec.Ports[1].NodePort = 30081, 30082
	if _, err := lb.EnsureLoadBalancer(ctx, testCluster, svc, nodes); err != nil {
		t.Errorf("Ensure after two nodePorts swapped: %v", err)
	}
	check("after two nodePorts swapped", map[uint16]uint16{8080: 30081, 8081: 30082})
}
