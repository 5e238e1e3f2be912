package loadbalancer

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
)

// guardedEnv is pcpEnvWith (guarded, the PCP server returned) or newEnv
// (through UPnP only, no PCP server) on a router configured by rc.
func guardedEnv(t *testing.T, guarded bool, rc fake.RouterConfig) (*env, *fake.PCPServer) {
	t.Helper()
	if guarded {
		return pcpEnvWith(t, Config{}, rc)
	}
	return newEnv(t, Config{}, rc), nil
}

// A Service whose nodePort changes (the external port stays) is forwarded
// to the new nodePort at once, as through UPnP. Through PCP the router
// refuses a MAP at a key its mapping holds for another internal port
// (PREFER_FAILURE: CANNOT_PROVIDE_EXTERNAL; without it, another port), so
// the old mapping must be deleted first; else the port forwards to the stale
// nodePort until the old mapping's lease ends.
func TestPCPNodePortChangeIsServed(t *testing.T) {
	for _, guarded := range []bool{false, true} {
		name := map[bool]string{false: "upnp", true: "pcp"}[guarded]
		t.Run(name, func(t *testing.T) {
			e, _ := guardedEnv(t, guarded, fake.RouterConfig{})
			nodes := threeNodes()
			svc := newService("default", "web", withPorts(port("http", v1.ProtocolTCP, 80, 30080)))
			e.mustEnsure(t, svc, nodes)
			tgt := e.router.Mappings()[0].InternalClient
			svc.Spec.Ports[0].NodePort = 30081
			_, err := e.ensure(t, svc, nodes)
			if err = notForwarded(e.lb, svc, err); err != nil {
				t.Errorf("Ensure after the nodePort changed: %v", err)
			}
			d := desc("default", "web", "http")
			if guarded {
				d = pcpDesc("default", "web", igd.Key{Protocol: igd.TCP, ExternalPort: 80})
			}
			diffRows(t, "table", e.table(), []string{row(igd.TCP, 80, tgt, 30081, d)})
		})
	}
}

// After a restart on a router that reports internal port 0 (miniupnpd 2.3.6
// with nftables), a port the Service gave up, and the Service's mappings
// when it is deleted, are still withdrawn: the process cannot name the
// mapping by its internal port in a PCP delete, as through UPnP it needs
// not.
func TestPCPWithdrawWithInternalPortZeroAfterRestart(t *testing.T) {
	for _, guarded := range []bool{false, true} {
		name := map[bool]string{false: "upnp", true: "pcp"}[guarded]
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			rc := fake.RouterConfig{ReportInternalPortZero: true}
			e, s := guardedEnv(t, guarded, rc)
			nodes := threeNodes()
			svc := newService("default", "web", withPorts(port("http", v1.ProtocolTCP, 80, 30080), port("alt", v1.ProtocolTCP, 81, 30081)))
			svc.Status.LoadBalancer = *e.mustEnsure(t, svc, nodes)
			restart := func() *LoadBalancer {
				client := igd.Client(e.router.Client(addrA))
				if guarded {
					client = pcpBackend(t, e.router, s, pcpSecret)
				}
				lb, err := New(Config{Client: client, Clock: e.clock})
				if err != nil {
					t.Fatal(err)
				}
				lb.seeNodes(nodes)
				return lb
			}
			lb := restart()
			svc.Spec.Ports = svc.Spec.Ports[:1]
			if _, err := lb.EnsureLoadBalancer(ctx, testCluster, svc, nodes); err != nil {
				t.Errorf("Ensure without port 81 after a restart: %v", err)
			}
			if n := len(e.router.Mappings()); n != 1 {
				t.Errorf("table after port 81 was given up: %q, want port 80 only", e.table())
			}
			lb = restart()
			if err := lb.EnsureLoadBalancerDeleted(ctx, testCluster, svc); err != nil {
				t.Errorf("EnsureLoadBalancerDeleted after a restart: %v", err)
			}
			diffRows(t, "table after the delete", e.table(), nil)
		})
	}
}

// On a router that reports internal port 0 (miniupnpd 2.3.6), a nodePort
// that changed while no process knew the mapping's (after a restart) is
// still served: the router refuses the MAP at the key (its mapping goes to
// the old nodePort), so the mapping is deleted and made again. Through UPnP
// the add replaces it.
func TestPCPNodePortChangeWithInternalPortZeroAfterRestart(t *testing.T) {
	for _, guarded := range []bool{false, true} {
		name := map[bool]string{false: "upnp", true: "pcp"}[guarded]
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			rc := fake.RouterConfig{ReportInternalPortZero: true}
			e, s := guardedEnv(t, guarded, rc)
			nodes := threeNodes()
			svc := newService("default", "web", withPorts(port("http", v1.ProtocolTCP, 80, 30080)))
			svc.Status.LoadBalancer = *e.mustEnsure(t, svc, nodes)
			tgt := e.router.Mappings()[0].InternalClient
			client := igd.Client(e.router.Client(addrA))
			if guarded {
				client = pcpBackend(t, e.router, s, pcpSecret)
			}
			lb, err := New(Config{Client: client, Clock: e.clock})
			if err != nil {
				t.Fatal(err)
			}
			lb.seeNodes(nodes)
			svc.Spec.Ports[0].NodePort = 30081
			_, err = lb.EnsureLoadBalancer(ctx, testCluster, svc, nodes)
			if err = notForwarded(lb, svc, err); err != nil {
				t.Errorf("Ensure after a restart and a nodePort change: %v", err)
			}
			d := desc("default", "web", "http")
			if guarded {
				d = pcpDesc("default", "web", igd.Key{Protocol: igd.TCP, ExternalPort: 80})
			}
			diffRows(t, "table", e.table(), []string{row(igd.TCP, 80, tgt, 30081, d)})
		})
	}
}
