// Package pinholeconformance states, once, how a router's IPv6 pinholes
// (UPnP WANIPv6FirewallControl:1) behave as seen through a pinhole.Client,
// and checks any router against it.
//
// The behaviour is miniupnpd 2.3.1's, measured in igd/igdtest's IPv6 lab
// (igd/pinhole's DESIGN.md): pinholes only to the caller's own address and
// ports of 1024 and above, the same ID on re-add, unknown IDs answered as
// gone, other hosts refused, leases that end, and a reboot that loses every
// pinhole and numbers them from 1 again. The project runs the suite against
// the fake router (fake.Router behind a fake.Server, talked to by
// pinhole.UPnPClient) and against a real miniupnpd in the IPv6 lab.
//
// Use it from a _test.go file:
//
//	func TestPinholeConformance(t *testing.T) {
//		pinholeconformance.Run(t, pinholeconformance.Backend{Start: startMyRouter})
//	}
package pinholeconformance
