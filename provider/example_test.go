package provider_test

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/ccmkit/ccmkit/provider"
)

// routerLB stands in for a LoadBalancer that forwards ports on a router
// and renews its leases in the background.
type routerLB struct{}

func (*routerLB) GetLoadBalancer(context.Context, string, *v1.Service) (*v1.LoadBalancerStatus, bool, error) {
	return nil, false, nil
}

func (*routerLB) GetLoadBalancerName(_ context.Context, _ string, svc *v1.Service) string {
	return cloudprovider.DefaultLoadBalancerName(svc)
}

func (*routerLB) EnsureLoadBalancer(context.Context, string, *v1.Service, []*v1.Node) (*v1.LoadBalancerStatus, error) {
	return &v1.LoadBalancerStatus{}, nil
}

func (*routerLB) UpdateLoadBalancer(context.Context, string, *v1.Service, []*v1.Node) error {
	return nil
}

func (*routerLB) EnsureLoadBalancerDeleted(context.Context, string, *v1.Service) error {
	return nil
}

// Run makes routerLB a provider.Runner.
func (*routerLB) Run(ctx context.Context) {
	fmt.Println("lease renewal started")
	<-ctx.Done()
	fmt.Println("lease renewal stopped")
}

// staticNodes stands in for an InstancesV2 that knows every node from
// configuration.
type staticNodes map[string]string // node name → zone

func (n staticNodes) InstanceExists(_ context.Context, node *v1.Node) (bool, error) {
	_, ok := n[node.Name]
	return ok, nil
}

func (staticNodes) InstanceShutdown(context.Context, *v1.Node) (bool, error) {
	return false, nil
}

func (n staticNodes) InstanceMetadata(_ context.Context, node *v1.Node) (*cloudprovider.InstanceMetadata, error) {
	return &cloudprovider.InstanceMetadata{ProviderID: "homelab://" + node.Name, Zone: n[node.Name]}, nil
}

// My cloud = this LoadBalancer + these InstancesV2 + nothing else.
func ExampleNew() {
	cloud, err := provider.New("homelab", provider.Config{
		LoadBalancer: &routerLB{},
		InstancesV2:  staticNodes{"node-a": "attic", "node-b": "cellar"},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	_, hasLB := cloud.LoadBalancer()
	_, hasV2 := cloud.InstancesV2()
	_, hasRoutes := cloud.Routes()
	fmt.Printf("%s: LoadBalancer=%v InstancesV2=%v Routes=%v\n", cloud.ProviderName(), hasLB, hasV2, hasRoutes)

	// The cloud-controller-manager calls Initialize with its client builder
	// and a stop channel that closes on shutdown.
	stop := make(chan struct{})
	cloud.Initialize(nil, stop)
	close(stop)
	<-cloud.Done() // every goroutine Initialize started has returned
	fmt.Println("initialize errors:", cloud.Err())

	// Output:
	// homelab: LoadBalancer=true InstancesV2=true Routes=false
	// lease renewal started
	// lease renewal stopped
	// initialize errors: <nil>
}
