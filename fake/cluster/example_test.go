package cluster_test

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/fake/cluster"
	"github.com/ccmkit/ccmkit/provider"
)

// A cloud provider tested the way Kubernetes drives it: the upstream cloud
// node controller initializes the node, the service controller gives the
// Service a load balancer, and DeleteService removes it.
func ExampleStart() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	lb := fake.NewLoadBalancer(fake.DefaultExternalIP) // your cloudprovider.LoadBalancer
	instances, _ := provider.NewInstancesV2("mycloud", provider.InstancesV2Config{})
	cloud, _ := provider.New("mycloud", provider.Config{LoadBalancer: lb, InstancesV2: instances, ClusterID: true})

	h, err := cluster.Start(ctx, cluster.Config{
		Cloud: cloud,
		Objects: []k8sruntime.Object{
			cluster.Node("node-1", cluster.InternalIP("192.168.1.10")),
			cluster.Service("default", "web", cluster.Port("http", v1.ProtocolTCP, 80, 30080)),
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer h.Stop()

	node, err := h.WaitForNodeInitialized(ctx, "node-1")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("node-1:", node.Spec.ProviderID)

	svc, err := h.WaitForIngress(ctx, "default", "web")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("default/web:", svc.Status.LoadBalancer.Ingress[0].IP)

	if err := h.DeleteService(ctx, "default", "web"); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("load balancers left:", len(lb.Services()))
	// Output:
	// node-1: mycloud://node-1
	// default/web: 198.51.101.7
	// load balancers left: 0
}
