package loadbalancer

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/ccmkit/ccmkit/fake"
	fakecluster "github.com/ccmkit/ccmkit/fake/cluster"
	"github.com/ccmkit/ccmkit/igd"
)

const testCluster = "kubernetes"

// Node addresses of the test cluster; node-a is where the CCM runs.
var (
	addrA = netip.MustParseAddr("192.0.2.10")
	addrB = netip.MustParseAddr("192.0.2.11")
	addrC = netip.MustParseAddr("192.0.2.12")
	// addrStranger is a LAN host that is not a node.
	addrStranger = netip.MustParseAddr("192.0.2.77")
)

type nodeOpt func(*v1.Node)

func notReady(n *v1.Node) {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == v1.NodeReady {
			n.Status.Conditions[i].Status = v1.ConditionFalse
		}
	}
}

func newNode(name string, addr netip.Addr, opts ...nodeOpt) *v1.Node {
	n := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)},
		Status: v1.NodeStatus{
			Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}},
			Addresses: []v1.NodeAddress{
				{Type: v1.NodeHostName, Address: name},
				{Type: v1.NodeInternalIP, Address: addr.String()},
			},
		},
	}
	for _, o := range opts {
		o(n)
	}
	return n
}

// threeNodes returns ready nodes node-a, node-b, node-c.
func threeNodes() []*v1.Node {
	return []*v1.Node{newNode("node-a", addrA), newNode("node-b", addrB), newNode("node-c", addrC)}
}

type svcOpt func(*v1.Service)

// port returns a Service port: "http:TCP:80:30080".
func port(name string, proto v1.Protocol, p, nodePort int32) v1.ServicePort {
	return v1.ServicePort{Name: name, Protocol: proto, Port: p, NodePort: nodePort}
}

func withPorts(ps ...v1.ServicePort) svcOpt {
	return func(s *v1.Service) { s.Spec.Ports = ps }
}

func withAnnotation(k, v string) svcOpt {
	return func(s *v1.Service) {
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		s.Annotations[k] = v
	}
}

// unannotated removes the opt-in annotation newService sets.
func unannotated(s *v1.Service) { delete(s.Annotations, AnnotationLoadBalancerType) }

// newService returns a Service of type LoadBalancer that opts in (see
// unannotated) with one port, TCP 8080 to nodePort 30080.
func newService(ns, name string, opts ...svcOpt) *v1.Service {
	s := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + ns + "-" + name),
			Annotations: map[string]string{AnnotationLoadBalancerType: AnnotationValue}},
		Spec: v1.ServiceSpec{
			Type:                  v1.ServiceTypeLoadBalancer,
			ExternalTrafficPolicy: v1.ServiceExternalTrafficPolicyCluster,
			IPFamilies:            []v1.IPFamily{v1.IPv4Protocol},
			Ports:                 []v1.ServicePort{port("http", v1.ProtocolTCP, 8080, 30080)},
		},
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

// env is one LoadBalancer on a fake router.
type env struct {
	lb     *LoadBalancer
	router *fake.Router
	clock  *clocktesting.FakeClock
}

// newEnv returns a LoadBalancer talking to a fake router from node-a, with
// cfg's zero fields defaulted. Router and LoadBalancer share a fake clock.
func newEnv(t testing.TB, cfg Config, rc fake.RouterConfig) *env {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	rc.Clock = clk
	r := fake.NewRouter(rc)
	if cfg.Client == nil {
		cfg.Client = r.Client(addrA)
	}
	if cfg.Clock == nil {
		cfg.Clock = clk
	}
	lb, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return &env{lb: lb, router: r, clock: clk}
}

func (e *env) ensure(t testing.TB, svc *v1.Service, nodes []*v1.Node) (*v1.LoadBalancerStatus, error) {
	t.Helper()
	return e.lb.EnsureLoadBalancer(context.Background(), testCluster, svc, nodes)
}

func (e *env) mustEnsure(t testing.TB, svc *v1.Service, nodes []*v1.Node) *v1.LoadBalancerStatus {
	t.Helper()
	st, err := e.ensure(t, svc, nodes)
	if err != nil {
		t.Fatalf("EnsureLoadBalancer(%s/%s): %v", svc.Namespace, svc.Name, err)
	}
	return st
}

// calls counts the router calls made since the last reset, by method, and
// resets the log.
func (e *env) calls() map[string]int {
	out := map[string]int{}
	for _, c := range e.router.Calls() {
		out[c.Method]++
	}
	e.router.ResetCalls()
	return out
}

// table returns the router's table without leases (they tick), as
// "TCP/80 -> 192.0.2.10:30080 "desc"" lines.
func (e *env) table() []string {
	var out []string
	for _, m := range e.router.Mappings() {
		out = append(out, fmt.Sprintf("%s -> %s:%d %q", m.Key(), m.InternalClient, m.InternalPort, m.Description))
	}
	return out
}

// desc is the description of a mapping of Service ns/name, port portName.
func desc(ns, name, portName string) string {
	return newOwner(testCluster, ns, name).description(portName)
}

// row is the table line of a mapping.
func row(proto igd.Protocol, ext uint16, to netip.Addr, nodePort uint16, description string) string {
	return fmt.Sprintf("%s -> %s:%d %q", igd.Key{Protocol: proto, ExternalPort: ext}, to, nodePort, description)
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

func diffRows(t testing.TB, what string, got, want []string) {
	t.Helper()
	got, want = sorted(got), sorted(want)
	if !slices.Equal(got, want) {
		t.Errorf("%s:\n got  %q\n want %q", what, got, want)
	}
}

// heldKeys returns every key a Service of lb holds or is taking, with the
// Service's "namespace/name".
func (lb *LoadBalancer) heldKeys() map[igd.Key]string {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	out := make(map[igd.Key]string)
	for _, s := range lb.services {
		for k := range s.held {
			out[k] = s.name
		}
	}
	return out
}

// notForwarded returns err, or when Ensure succeeded, the PortErrors of the
// ports of svc it could not forward (nil when none).
func notForwarded(lb *LoadBalancer, svc *v1.Service, err error) error {
	if err != nil {
		return err
	}
	return joinPortErrors(lb.failedPorts(newOwner(testCluster, svc.Namespace, svc.Name)))
}

// nodeName is the node lb knows at address a ("" when none).
func (lb *LoadBalancer) nodeName(a netip.Addr) string {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	return lb.nodeAddrs[a]
}

// twoProcesses returns two LoadBalancers of one cluster, as two CCM
// processes in a fail-over overlap: each talks to r from its own host
// (node-b's and node-c's addresses) and reads the Services of cluster.
func twoProcesses(t *testing.T, r *fake.Router, cluster *k8sfake.Clientset) (p1, p2 *LoadBalancer) {
	t.Helper()
	process := func(host netip.Addr) *LoadBalancer {
		lb, err := New(Config{Client: r.Client(host)})
		if err != nil {
			t.Fatal(err)
		}
		if err := lb.Initialize(context.Background(), fakecluster.ClientBuilder(cluster)); err != nil {
			t.Fatal(err)
		}
		return lb
	}
	return process(addrB), process(addrC)
}

// recordStatus stores st as svc's status in the cluster, as the service
// controller does after a successful Ensure. It records a status only then:
// on an error, and on cloudprovider.ImplementedElsewhere, it leaves the
// status as it was.
func recordStatus(t *testing.T, c *k8sfake.Clientset, svc *v1.Service, st *v1.LoadBalancerStatus) {
	t.Helper()
	svc.Status.LoadBalancer = *st
	if _, err := c.CoreV1().Services(svc.Namespace).UpdateStatus(context.Background(), svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// createService creates svc in the cluster c.
func createService(t *testing.T, c *k8sfake.Clientset, svc *v1.Service) {
	t.Helper()
	if _, err := c.CoreV1().Services(svc.Namespace).Create(context.Background(), svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// updateSpec stores svc, changed, in the cluster c, as a user's edit does.
func updateSpec(t *testing.T, c *k8sfake.Clientset, svc *v1.Service) {
	t.Helper()
	if _, err := c.CoreV1().Services(svc.Namespace).Update(context.Background(), svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}
