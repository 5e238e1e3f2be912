package edge

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/loadbalancer"
)

// A lease of 0 means the default, as in loadbalancer.Config; permanent
// mappings are asked for with permanentLease. The router's table shows which
// lease each config gave.
func TestLeaseReachesTheRouter(t *testing.T) {
	for _, tt := range []struct {
		name   string
		config string
		want   time.Duration // as the router stores it
	}{
		{"unset", "", loadbalancer.DefaultLease},
		{"zero", "loadBalancer:\n  lease: 0\n", loadbalancer.DefaultLease},
		{"two hours", "loadBalancer:\n  lease: 2h\n", 2 * time.Hour},
		{"permanent", "loadBalancer:\n  permanentLease: true\n", igd.MaxLease}, // IGD:2 stores 0 as 7 days
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := ParseConfig(strings.NewReader(tt.config))
			if err != nil {
				t.Fatal(err)
			}
			clk := clocktesting.NewFakeClock(time.Now())
			router := fake.NewRouter(fake.RouterConfig{Clock: clk})
			node := netip.MustParseAddr("192.0.2.10")
			cloud, err := New(cfg, Options{Client: router.Client(node)})
			if err != nil {
				t.Fatal(err)
			}
			lb, _ := cloud.LoadBalancer()
			svc := &v1.Service{
				ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", UID: "uid-web",
					Annotations: map[string]string{loadbalancer.AnnotationLoadBalancerType: loadbalancer.AnnotationValue}},
				Spec: v1.ServiceSpec{Type: v1.ServiceTypeLoadBalancer, Ports: []v1.ServicePort{{Name: "http", Protocol: v1.ProtocolTCP, Port: 80, NodePort: 30080}}},
			}
			n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}, Status: v1.NodeStatus{
				Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}},
				Addresses:  []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: node.String()}}}}
			if _, err := lb.EnsureLoadBalancer(context.Background(), "kubernetes", svc, []*v1.Node{n}); err != nil {
				t.Fatal(err)
			}
			if ms := router.Mappings(); len(ms) != 1 || ms[0].Lease != tt.want {
				t.Errorf("router table = %v, want one mapping with lease %s", ms, tt.want)
			}
		})
	}
}
