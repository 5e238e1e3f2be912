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
