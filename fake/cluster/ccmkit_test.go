package cluster_test

import (
	"net/netip"
	"testing"

	v1 "k8s.io/api/core/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/fake/cluster"
	"github.com/ccmkit/ccmkit/loadbalancer"
)

// TestCcmkitLoadBalancer runs ccmkit's own load balancer, background work
// included, over a fake router through a Service's life.
func TestCcmkitLoadBalancer(t *testing.T) {
	router := fake.NewRouter(fake.RouterConfig{})
	lb, err := loadbalancer.New(loadbalancer.Config{
		Client:   router.Client(netip.MustParseAddr("192.168.1.2")),
		Services: loadbalancer.AnnotatedServices,
	})
	if err != nil {
		t.Fatal(err)
	}
	h := start(t, cluster.Config{
		Cloud: newCloud(t, lb),
		Objects: []k8sruntime.Object{
			cluster.Node("n1", cluster.InternalIP("192.168.1.10")),
			cluster.Service("default", "web",
				cluster.Port("http", v1.ProtocolTCP, 45080, 30080),
				cluster.Annotation(loadbalancer.AnnotationLoadBalancerType, loadbalancer.AnnotationValue)),
		},
	})
	ctx := t.Context()
	svc, err := h.WaitForIngress(ctx, "default", "web")
	if err != nil {
		t.Fatal(err)
	}
	if ip := svc.Status.LoadBalancer.Ingress[0].IP; ip != fake.DefaultExternalIP.String() {
		t.Errorf("ingress IP %s, want the router's %s", ip, fake.DefaultExternalIP)
	}
	ms := router.Mappings()
	if len(ms) != 1 || ms[0].ExternalPort != 45080 || ms[0].InternalClient.String() != "192.168.1.10" || ms[0].InternalPort != 30080 {
		t.Errorf("router table %+v, want one mapping TCP 45080 -> 192.168.1.10:30080", ms)
	}
	if err := h.DeleteService(ctx, "default", "web"); err != nil {
		t.Fatal(err)
	}
	if ms := router.Mappings(); len(ms) != 0 {
		t.Errorf("router table after DeleteService: %+v", ms)
	}
}
