package loadbalancer_test

import (
	"context"
	"fmt"
	"net/netip"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/loadbalancer"
)

// A Service of type LoadBalancer served through a router (here the in-memory
// fake; in production an igd.NewClient).
func Example() {
	router := fake.NewRouter(fake.RouterConfig{})
	lb, err := loadbalancer.New(loadbalancer.Config{
		Client: router.Client(netip.MustParseAddr("192.0.2.10")),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	node := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node-a"},
		Status: v1.NodeStatus{
			Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}},
			Addresses:  []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "192.0.2.10"}},
		},
	}
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web",
			// Only Services that opt in are exposed (Config.Services).
			Annotations: map[string]string{loadbalancer.AnnotationLoadBalancerType: loadbalancer.AnnotationValue}},
		Spec: v1.ServiceSpec{
			Type:  v1.ServiceTypeLoadBalancer,
			Ports: []v1.ServicePort{{Name: "http", Protocol: v1.ProtocolTCP, Port: 8080, NodePort: 30080}},
		},
	}
	ctx := context.Background()
	status, err := lb.EnsureLoadBalancer(ctx, "kubernetes", svc, []*v1.Node{node})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("external IP:", status.Ingress[0].IP, *status.Ingress[0].IPMode)
	for _, m := range router.Mappings() {
		fmt.Printf("mapping: %s -> %s:%d %q\n", m.Key(), m.InternalClient, m.InternalPort, m.Description)
	}
	fmt.Println("name:", lb.GetLoadBalancerName(ctx, "kubernetes", svc))

	if err := lb.EnsureLoadBalancerDeleted(ctx, "kubernetes", svc); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("mappings after delete:", len(router.Mappings()))
	// Output:
	// external IP: 198.51.101.7 VIP
	// mapping: TCP/8080 -> 192.0.2.10:30080 "ck1 kubernetes/default/web http"
	// name: kubernetes/default/web
	// mappings after delete: 0
}
