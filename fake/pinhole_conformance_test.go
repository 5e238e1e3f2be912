package fake_test

import (
	"net/netip"
	"slices"
	"testing"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd/pinhole/pinholeconformance"
)

// guaB is the IPv6 lab's second node's global address.
var guaB = netip.MustParseAddr("2001:db8:1::11")

// TestPinholeConformanceServer runs the pinhole suite against the real
// pinhole client talking SOAP over HTTP to a fake Server, on a fake clock.
// The data path is the router's own word: host A is reachable on a port
// while Router.Pinholes lists a pinhole to it.
func TestPinholeConformanceServer(t *testing.T) {
	pinholeconformance.Run(t, pinholeconformance.Backend{
		Start: func(t *testing.T) pinholeconformance.Router {
			clk := clocktesting.NewFakeClock(epoch)
			r := fake.NewRouter(fake.RouterConfig{Clock: clk})
			return pinholeconformance.Router{
				A: pinholeClient(t, r, guaA), B: pinholeClient(t, r, guaB),
				AddrA: guaA, AddrB: guaB,
				Reboot: func(testing.TB) { r.Reboot() },
				Step:   clk.Step,
				Reaches: func(_ testing.TB, port uint16) bool {
					return slices.ContainsFunc(r.Pinholes(), func(o fake.OpenPinhole) bool {
						return o.Pinhole.InternalClient == guaA && o.Pinhole.InternalPort == port
					})
				},
			}
		},
	})
}
