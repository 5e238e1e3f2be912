package loadbalancer

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
)

// A Service whose every port is refused after it was served (the router
// rebooted and a LAN host took its only port first) has its status say so
// at the next pass: each port with its error, at the router's address now,
// not the port it no longer holds.
func TestPassReportsEveryPortRefusedInStatus(t *testing.T) {
	e := newEnv(t, Config{Lease: time.Hour, RenewInterval: 5 * time.Minute}, fake.RouterConfig{})
	nodes := threeNodes()
	svc := lbService("default", "web", withPorts(port("http", v1.ProtocolTCP, 8080, 30080)))
	svc.Status.LoadBalancer = *e.mustEnsure(t, svc, nodes)
	r := startBackground(t, e, nodes[0], nodes[1], nodes[2], svc)

	e.router.Reboot()
	e.router.Put(igd.Mapping{Protocol: igd.TCP, ExternalPort: 8080, InternalClient: addrStranger, InternalPort: 8080, Description: "someone's app"})
	r.tick(t)

	st := r.service(t, "default", "web").Status.LoadBalancer
	if len(st.Ingress) != 1 || len(st.Ingress[0].Ports) != 1 || st.Ingress[0].Ports[0].Error == nil || *st.Ingress[0].Ports[0].Error != PortErrorInUse {
		t.Errorf("status after a LAN host took the only port: %s, want TCP/8080 with error %s", describeStatus(st), PortErrorInUse)
	}
}

// A Service left with no eligible node (every node not ready) keeps its
// mappings at the ports it still wants, but a port removed from its spec
// meanwhile is unmapped, and its status must stop claiming it: the status
// is rewritten by a pass even though the Service cannot be served now.
func TestPassDropsRemovedPortsFromStatusWithNoEligibleNode(t *testing.T) {
	e := newEnv(t, Config{Lease: time.Hour, RenewInterval: 5 * time.Minute}, fake.RouterConfig{})
	nodes := threeNodes()
	both := lbService("default", "web", withPorts(port("http", v1.ProtocolTCP, 8080, 30080), port("alt", v1.ProtocolTCP, 9000, 30090)))
	st := e.mustEnsure(t, both, nodes)
	svc := lbService("default", "web", withPorts(port("http", v1.ProtocolTCP, 8080, 30080)))
	svc.Status.LoadBalancer = *st
	down := []*v1.Node{newNode("node-a", addrA, notReady), newNode("node-b", addrB, notReady), newNode("node-c", addrC, notReady)}
	r := startBackground(t, e, down[0], down[1], down[2], svc)
	r.tick(t)

	got := r.service(t, "default", "web").Status.LoadBalancer
	for _, ing := range got.Ingress {
		for _, p := range ing.Ports {
			if p.Port == 9000 && p.Error == nil {
				t.Errorf("status with no eligible node: %s, claims TCP/9000, which the spec no longer has and the router no longer maps", describeStatus(got))
			}
		}
	}
}
