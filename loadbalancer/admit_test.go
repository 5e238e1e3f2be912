package loadbalancer

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	k8sfake "k8s.io/client-go/kubernetes/fake"

	"github.com/ccmkit/ccmkit/fake"
	fakecluster "github.com/ccmkit/ccmkit/fake/cluster"
	"github.com/ccmkit/ccmkit/igd"
)

// refusePort returns a Config.Admit refusing external port p to every
// Service while *on.
func refusePort(p uint16, on *bool) func(*v1.Service, []igd.Key) map[igd.Key]error {
	return func(_ *v1.Service, keys []igd.Key) map[igd.Key]error {
		out := map[igd.Key]error{}
		for _, k := range keys {
			if *on && k.ExternalPort == p {
				out[k] = fmt.Errorf("external port %d is not allowed by the test", p)
			}
		}
		return out
	}
}

// A port Config.Admit refuses is not mapped, and a mapping the Service
// holds there is removed; its status says ccmkit.io/NotAdmitted with the
// policy's reason, while the other ports are served. A Service all of whose
// ports are refused fails as a whole, naming the reason.
func TestAdmitRefusesPorts(t *testing.T) {
	refuse := false
	e := newEnv(t, Config{Admit: refusePort(81, &refuse)}, fake.RouterConfig{})
	nodes := threeNodes()
	svc := newService("default", "web", withPorts(port("a", v1.ProtocolTCP, 80, 30080), port("b", v1.ProtocolTCP, 81, 30081)))
	e.mustEnsure(t, svc, nodes)
	if n := len(e.router.Mappings()); n != 2 {
		t.Fatalf("%d mappings before the refusal, want 2: %v", n, e.table())
	}

	refuse = true
	st, err := e.ensure(t, svc, nodes)
	if err != nil {
		t.Fatalf("EnsureLoadBalancer: %v, want the admitted port served", err)
	}
	if diff := cmp.Diff(map[string]string{"TCP/80": "", "TCP/81": PortErrorNotAdmitted}, portErrors(st)); diff != "" {
		t.Errorf("port errors (-want +got):\n%s", diff)
	}
	if ms := e.router.Mappings(); len(ms) != 1 || ms[0].ExternalPort != 80 {
		t.Errorf("router table %v, want TCP/80 only: the refused port's mapping removed", e.table())
	}

	one := newService("default", "one", withPorts(port("b", v1.ProtocolTCP, 81, 30082)))
	_, err = e.ensure(t, one, nodes)
	if !errors.Is(err, ErrNotAdmitted) || !strings.Contains(err.Error(), "external port 81 is not allowed by the test") {
		t.Errorf("Ensure of a Service whose only port is refused = %v, want ErrNotAdmitted with the policy's reason", err)
	}
}

// MaxMappings caps the mappings of all Services together: a Service that
// would take one past it is refused (ccmkit.io/NotAdmitted, naming the
// cap), and is served once another gives its mappings up.
func TestMaxMappingsCapsTheMappingsOfAllServices(t *testing.T) {
	e := newEnv(t, Config{MaxMappings: 2}, fake.RouterConfig{})
	nodes := threeNodes()
	first := newService("default", "first", withPorts(port("a", v1.ProtocolTCP, 80, 30080), port("b", v1.ProtocolTCP, 81, 30081)))
	e.mustEnsure(t, first, nodes)
	second := newService("default", "second", withPorts(port("a", v1.ProtocolTCP, 82, 30082)))
	_, err := e.ensure(t, second, nodes)
	if !errors.Is(err, ErrNotAdmitted) || !strings.Contains(err.Error(), "2") {
		t.Fatalf("Ensure past the cap = %v, want ErrNotAdmitted naming the cap", err)
	}
	if n := len(e.router.Mappings()); n != 2 {
		t.Errorf("%d mappings, want the cap, 2: %v", n, e.table())
	}
	// A renewal of a Service at the cap is no new mapping.
	e.mustEnsure(t, first, nodes)
	if err := e.lb.EnsureLoadBalancerDeleted(t.Context(), testCluster, first); err != nil {
		t.Fatal(err)
	}
	e.mustEnsure(t, second, nodes)
}

// A negative MaxMappings is refused by New.
func TestMaxMappingsMustNotBeNegative(t *testing.T) {
	_, err := New(Config{Client: fake.NewRouter(fake.RouterConfig{}).Client(addrA), MaxMappings: -1})
	if err == nil || !strings.Contains(err.Error(), "Config.MaxMappings") {
		t.Errorf("New = %v, want an error naming Config.MaxMappings", err)
	}
}

// A Service Config.Admit refuses a key does not contend for it: another
// Service that wants the key is served.
func TestArbitrationIgnoresPortsNotAdmitted(t *testing.T) {
	admit := func(svc *v1.Service, keys []igd.Key) map[igd.Key]error {
		out := map[igd.Key]error{}
		for _, k := range keys {
			if svc.Namespace == "games" {
				out[k] = errors.New("namespace games is not allowed by the test")
			}
		}
		return out
	}
	e := newEnv(t, Config{Admit: admit}, fake.RouterConfig{})
	node := newNode("node-a", addrA)
	refused := newService("games", "mc", withPorts(port("http", v1.ProtocolTCP, 80, 30080)))
	web := newService("default", "web", withPorts(port("http", v1.ProtocolTCP, 80, 30081)))
	if err := e.lb.Initialize(t.Context(), fakecluster.ClientBuilder(k8sfake.NewClientset(node, refused, web))); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ensure(t, refused, []*v1.Node{node}); !errors.Is(err, ErrNotAdmitted) {
		t.Errorf("refused Service: %v, want ErrNotAdmitted", err)
	}
	if _, err := e.ensure(t, web, []*v1.Node{node}); err != nil {
		t.Errorf("the other Service: %v, want it served", err)
	}
}
