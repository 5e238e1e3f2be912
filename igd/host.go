package igd

import (
	"context"
	"net/netip"
)

// HostInfo answers the questions about this host that discovery and
// LocalAddr depend on. The default (a nil Config.Host) reads the operating
// system: /proc/net/route, and a UDP socket made by Config.DialContext;
// tests and the lab replace it, for example to run inside a network namespace.
type HostInfo interface {
	// DefaultGateway returns the next hop of this host's IPv4 default route,
	// the one router SSDP discovery accepts unless Config.Router names
	// another. An error, or the zero Addr, means the host has none.
	DefaultGateway(ctx context.Context) (netip.Addr, error)
	// LocalAddr returns this host's own IPv4 address on the path toward
	// router.
	LocalAddr(ctx context.Context, router netip.Addr) (netip.Addr, error)
}
