package conformance_test

import (
	"context"
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/fake/cluster"
	"github.com/ccmkit/ccmkit/fake/conformance"
	"github.com/ccmkit/ccmkit/provider"
)

// In a test, conformance.RunLoadBalancer(t, newSetup) runs these checks as
// subtests. Here they run by hand against fake.LoadBalancer, which records
// calls and forwards nothing: it has no Service it leaves to another, never
// asks for a retry and has no backend to inspect. A promise the setup
// cannot check fails unless the setup opts out of it by name, as here.
func ExampleLoadBalancerChecks() {
	for _, c := range conformance.LoadBalancerChecks() {
		lb := fake.NewLoadBalancer(fake.DefaultExternalIP)
		err := c.Run(context.Background(), conformance.LoadBalancerSetup{
			LoadBalancer: lb,
			Skip: []string{
				conformance.PromiseElsewhere, conformance.PromiseRetry,
				conformance.PromisePortChange, conformance.PromiseNodeChange, conformance.PromiseNothingLeft,
			},
		})
		switch {
		case errors.Is(err, conformance.ErrSkipped):
			fmt.Println("skip:", c.Promise)
		case err != nil:
			fmt.Println("FAIL:", err)
		default:
			fmt.Println("ok:  ", c.Promise)
		}
	}
	// Output:
	// ok:   EnsureLoadBalancer is idempotent
	// ok:   GetLoadBalancer after EnsureLoadBalancer reports it exists with the same status
	// ok:   EnsureLoadBalancerDeleted of a missing load balancer returns nil
	// ok:   GetLoadBalancer after EnsureLoadBalancerDeleted reports it does not exist
	// skip: ImplementedElsewhere is returned unwrapped
	// ok:   Services and Nodes passed in are never modified
	// ok:   Calls for different Services may run concurrently
	// skip: A RetryError is an *api.RetryError reachable with errors.As
	// skip: EnsureLoadBalancer after a port change forwards the new ports only
	// skip: UpdateLoadBalancer after a node change forwards to the nodes given only
	// skip: EnsureLoadBalancerDeleted leaves nothing behind
}

// ccmkit's InstancesV2 has no inventory and no power-state API, so it
// cannot tell an instance is gone or shut down: the setup opts out of those
// two promises by name. Every other promise holds.
func ExampleInstancesV2Checks() {
	inst, err := provider.NewInstancesV2("mycloud", provider.InstancesV2Config{Zone: "attic"})
	if err != nil {
		fmt.Println(err)
		return
	}
	setup := conformance.InstancesV2Setup{
		Instances: inst,
		Existing:  []*v1.Node{cluster.Node("node-1", cluster.InternalIP("192.168.1.10"))},
		Zones:     map[string]cloudprovider.Zone{"node-1": {FailureDomain: "attic"}},
		Skip:      []string{conformance.PromiseGone, conformance.PromiseShutdown},
	}
	for _, c := range conformance.InstancesV2Checks() {
		err := c.Run(context.Background(), setup)
		switch {
		case errors.Is(err, conformance.ErrSkipped):
			fmt.Println("skip:", c.Promise)
		case err != nil:
			fmt.Println("FAIL:", err)
		default:
			fmt.Println("ok:  ", c.Promise)
		}
	}
	// Output:
	// ok:   InstanceExists is true for instances that exist
	// skip: InstanceExists is false for instances that are gone
	// ok:   InstanceMetadata is stable across calls
	// ok:   A foreign ProviderID is an error, never reported gone
	// ok:   Nodes passed in are never modified
	// ok:   An existing node without spec.providerID is found
	// ok:   InstanceMetadata's ProviderID is the node's spec.providerID
	// ok:   InstanceShutdown is false for running instances
	// skip: InstanceShutdown is true for instances shut down, which still exist
	// ok:   InstanceMetadata's Zone and Region are the node's
}
