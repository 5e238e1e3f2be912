package loadbalancer

import (
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
)

// A Service whose nodePort changes is re-pointed at once through PCP: a MAP
// for the key toward the same node but another port is refused by the
// router (the key is "in use"), so the old mapping must be deleted first.
// Otherwise the key keeps forwarding to the old nodePort (free, or another
// Service's since) until its lease ends, and the Service is refused its own
// port meanwhile.
func TestPCPNodePortChangeRepoints(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  func(*testing.T, Config) (*env, *fake.PCPServer)
	}{{"reads", pcpEnv}, {"blind", blindEnv}} {
		t.Run(tc.name, func(t *testing.T) {
			e, _ := tc.env(t, Config{})
			nodes := threeNodes()
			svc := newService("default", "web", withPorts(port("http", v1.ProtocolTCP, 80, 30080)))
			svc.Status.LoadBalancer = *e.mustEnsure(t, svc, nodes)
			tgt := e.router.Mappings()[0].InternalClient
			svc.Spec.Ports[0].NodePort = 30099
			_, err := e.ensure(t, svc, nodes)
			if err = notForwarded(e.lb, svc, err); err != nil {
				t.Errorf("Ensure after the nodePort changed: %v", err)
			}
			k := igd.Key{Protocol: igd.TCP, ExternalPort: 80}
			diffRows(t, "table", e.table(), []string{row(igd.TCP, 80, tgt, 30099, pcpDesc("default", "web", k))})
		})
	}
}
