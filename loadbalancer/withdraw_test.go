package loadbalancer

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
)

// A served Service that becomes invalid has its own mappings removed (a
// port left open to every address after the user asked to restrict it is
// unsafe), still gets the error naming the field, and nothing else on the
// router is touched.
func TestInvalidServiceWithdrawsOwnMappings(t *testing.T) {
	tests := []struct {
		name   string
		change func(*v1.Service)
		field  string
	}{
		{"source ranges added", func(s *v1.Service) { s.Spec.LoadBalancerSourceRanges = []string{"203.0.113.0/24"} }, "spec.loadBalancerSourceRanges"},
		{"source ranges annotation added", withAnnotation(annotationSourceRanges, "203.0.113.0/24"), "metadata.annotations[" + annotationSourceRanges + "]"},
		{"SCTP port added", func(s *v1.Service) {
			s.Spec.Ports = append(s.Spec.Ports, port("x", v1.ProtocolSCTP, 9000, 30900))
		}, "spec.ports[2].protocol"},
		{"nodePorts dropped", func(s *v1.Service) {
			for i := range s.Spec.Ports {
				s.Spec.Ports[i].NodePort = 0
			}
		}, "spec.ports[0].nodePort"},
		{"IPv6 only", func(s *v1.Service) { s.Spec.IPFamilies = []v1.IPFamily{v1.IPv6Protocol} }, "spec.ipFamilies"},
		{"loadBalancerIP of another address", func(s *v1.Service) { s.Spec.LoadBalancerIP = "198.51.101.8" }, "spec.loadBalancerIP"},
	}
	for _, update := range []bool{false, true} {
		for _, tt := range tests {
			name := tt.name
			if update {
				name = "update/" + name
			}
			t.Run(name, func(t *testing.T) {
				e := newEnv(t, Config{}, fake.RouterConfig{})
				nodes := threeNodes()
				web := newService("default", "web", withPorts(port("a", v1.ProtocolTCP, 80, 30080), port("b", v1.ProtocolUDP, 53, 30053)))
				e.mustEnsure(t, web, nodes)
				e.mustEnsure(t, newService("default", "api", withPorts(port("a", v1.ProtocolTCP, 81, 30081))), nodes)
				// A stranger's mapping, even one claiming to be web's.
				e.router.Put(igd.Mapping{Protocol: igd.TCP, ExternalPort: 82, InternalClient: addrStranger, InternalPort: 82, Description: desc("default", "web", "c")})
				var others []string
				for _, m := range e.router.Mappings() {
					if m.ExternalPort != 80 && m.ExternalPort != 53 {
						others = append(others, row(m.Protocol, m.ExternalPort, m.InternalClient, m.InternalPort, m.Description))
					}
				}

				bad := web.DeepCopy()
				tt.change(bad)
				var err error
				if update {
					err = e.lb.UpdateLoadBalancer(context.Background(), testCluster, bad, nodes)
				} else {
					_, err = e.ensure(t, bad, nodes)
				}
				var se *ServiceError
				if !errors.Is(err, ErrInvalidService) || !errors.As(err, &se) || se.Field != tt.field || se.Service != "default/web" {
					t.Fatalf("error = %v; want a ServiceError for default/web field %s", err, tt.field)
				}
				diffRows(t, "table after the Service became invalid", e.table(), others)
				// Valid again: served again.
				e.mustEnsure(t, web, nodes)
				if n := len(e.table()); n != len(others)+2 {
					t.Errorf("table after the Service became valid again = %v", e.table())
				}
			})
		}
	}
}

// A Service whose spec is invalid is withdrawn, and refused naming the
// field, also while the router does not answer for its external address:
// the spec alone makes it invalid.
func TestInvalidServiceWithdrawnWithoutTheExternalIP(t *testing.T) {
	e := newEnv(t, Config{}, fake.RouterConfig{})
	web := newService("default", "web")
	e.mustEnsure(t, web, threeNodes())
	e.router.Intercept(fake.RouterHooks{ExternalIP: func(context.Context, netip.Addr, fake.AddrFunc) (netip.Addr, error) {
		return netip.Addr{}, errRouterDown
	}})
	web.Spec.LoadBalancerSourceRanges = []string{"203.0.113.0/24"}
	if _, err := e.ensure(t, web, threeNodes()); !errors.Is(err, ErrInvalidService) {
		t.Fatalf("Ensure error = %v, want %v", err, ErrInvalidService)
	}
	diffRows(t, "table after the Service became invalid", e.table(), nil)
}

// When the withdrawal fails, both the field and the router's failure are
// reported.
func TestInvalidServiceWithdrawFailure(t *testing.T) {
	e := newEnv(t, Config{}, fake.RouterConfig{})
	web := newService("default", "web")
	e.mustEnsure(t, web, threeNodes())
	boom := &igd.UPnPError{Action: "DeletePortMapping", Code: 501, Description: "ActionFailed"}
	e.router.Intercept(fake.RouterHooks{DeletePortMapping: func(context.Context, netip.Addr, igd.Key, fake.DeleteFunc) error {
		return boom
	}})
	web.Spec.LoadBalancerSourceRanges = []string{"203.0.113.0/24"}
	_, err := e.ensure(t, web, threeNodes())
	if !errors.Is(err, ErrInvalidService) || !errors.Is(err, boom) || !strings.Contains(err.Error(), "default/web") {
		t.Fatalf("error = %v; want the ServiceError and the router's failure, naming default/web", err)
	}
}

// The background work withdraws a Service whose spec.loadBalancerIP no
// longer matches the router's external IP (the service controller does not
// notice: the Service did not change).
func TestBackgroundWithdrawsWhenLoadBalancerIPNoLongerMatches(t *testing.T) {
	e := newEnv(t, Config{}, fake.RouterConfig{})
	nodes := threeNodes()
	pinned := lbService("default", "pinned", withPorts(port("a", v1.ProtocolTCP, 80, 30080)), func(s *v1.Service) { s.Spec.LoadBalancerIP = fake.DefaultExternalIP.String() })
	free := lbService("default", "free", withPorts(port("a", v1.ProtocolTCP, 81, 30081)))
	e.mustEnsure(t, pinned, nodes)
	e.mustEnsure(t, free, nodes)
	r := startBackground(t, e, nodes[0], nodes[1], nodes[2], pinned, free)
	e.router.SetExternalIP(netip.MustParseAddr("198.51.101.99"))
	r.tick(t)
	if ms := e.router.Mappings(); len(ms) != 1 || ms[0].ExternalPort != 81 {
		t.Fatalf("table = %v; want only default/free (TCP/81)", e.table())
	}
}

// A Service deleted while the router had lost its mappings (a reboot not
// yet repaired) gives its ports up: another Service can take them.
func TestDeleteAfterRouterLostMappingsFreesPorts(t *testing.T) {
	for _, how := range []string{"delete", "port removed", "invalid"} {
		t.Run(how, func(t *testing.T) {
			e := newEnv(t, Config{}, fake.RouterConfig{})
			nodes := threeNodes()
			web := newService("default", "web", withPorts(port("a", v1.ProtocolTCP, 80, 30080), port("b", v1.ProtocolTCP, 81, 30081)))
			e.mustEnsure(t, web, nodes)
			e.router.Reboot()
			switch how {
			case "delete":
				if err := e.lb.EnsureLoadBalancerDeleted(context.Background(), testCluster, web); err != nil {
					t.Fatal(err)
				}
			case "port removed":
				web.Spec.Ports = web.Spec.Ports[1:]
				e.mustEnsure(t, web, nodes)
			case "invalid":
				web.Spec.LoadBalancerSourceRanges = []string{"203.0.113.0/24"}
				if _, err := e.ensure(t, web, nodes); !errors.Is(err, ErrInvalidService) {
					t.Fatalf("Ensure = %v, want ErrInvalidService", err)
				}
			}
			e.mustEnsure(t, newService("default", "other", withPorts(port("a", v1.ProtocolTCP, 80, 30090))), nodes)
		})
	}
}
