package loadbalancer_test

import (
	"testing"

	"github.com/ccmkit/ccmkit/fake/conformance"
)

// TestConformanceUnderClass runs the conformance suite on Services of a
// loadBalancerClass, as a class controller (provider/lbclass) hands them to
// the load balancer.
func TestConformanceUnderClass(t *testing.T) {
	conformance.RunLoadBalancer(t, func(t testing.TB) conformance.LoadBalancerSetup {
		s, _ := ccmkitSetup(t, false)
		s.Class = "ccmkit.io/upnp-igd"
		s.Skip = []string{conformance.PromiseRetry} // TestConformanceRetry checks it
		return s
	})
}
