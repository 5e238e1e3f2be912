// Package igdconformance states, once, how a UPnP router's port-mapping table
// behaves as seen through an igd.Client, and checks any router against it.
//
// The behaviour is miniupnpd 2.3.1's, measured on a real daemon; where
// miniupnpd differs from the UPnP specification the suite follows miniupnpd
// and the case says so. The project runs the suite against three backends:
// the in-memory fake (fake.Router), the real goupnp-based client talking to
// the fake SOAP server (fake.Server), and the real client talking to a real
// miniupnpd in network namespaces (igd/igdtest). Cases that miniupnpd cannot
// show (a full table, only-permanent-lease routers, a non-public external
// address) are marked "fake only" and run only on backends that set
// Backend.FakeOnly. Everything else, a router reboot and lease expiry
// included, runs on every backend: on a controlled clock (Router.Step) the
// lease cases check the exact second, on a real router they wait a few
// seconds of real time.
//
// Use it from a _test.go file:
//
//	func TestConformance(t *testing.T) {
//		igdconformance.Run(t, igdconformance.Backend{Start: startMyRouter, ...})
//	}
package igdconformance
