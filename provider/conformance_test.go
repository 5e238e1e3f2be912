package provider_test

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/ccmkit/ccmkit/fake/cluster"
	"github.com/ccmkit/ccmkit/fake/conformance"
	"github.com/ccmkit/ccmkit/provider"
)

// TestInstancesV2Conformance runs the kit's conformance suite for CCM
// authors (fake/conformance) against this package's InstancesV2.
func TestInstancesV2Conformance(t *testing.T) {
	conformance.RunInstancesV2(t, func(t testing.TB) conformance.InstancesV2Setup {
		inst, err := provider.NewInstancesV2("kit", provider.InstancesV2Config{Zone: "lab"})
		if err != nil {
			t.Fatal(err)
		}
		return conformance.InstancesV2Setup{
			Instances: inst,
			Existing: []*v1.Node{
				cluster.Node("new-node", cluster.InternalIP("192.168.1.10")),
				cluster.Node("initialized", cluster.Initialized(), cluster.InternalIP("192.168.1.11"), cluster.ProviderID("kit://initialized")),
			},
			// Both get the configured zone; neither has a region.
			Zones: map[string]cloudprovider.Zone{"new-node": {FailureDomain: "lab"}, "initialized": {FailureDomain: "lab"}},
			// ccmkit's InstancesV2 has no inventory and no power-state
			// API: it never reports an instance gone or shut down.
			Skip: []string{conformance.PromiseGone, conformance.PromiseShutdown},
		}
	})
}
