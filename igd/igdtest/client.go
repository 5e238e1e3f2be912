package igdtest

import (
	"context"
	"net/netip"

	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/internal/hostinfo"
)

// ClientConfig returns an igd.Config that acts from node i: the client's
// connections and SSDP socket are made in the node's namespace, the router
// is found from RootDescURL (clear it to discover by SSDP), and the host
// information is the node's own (see nodeHost). Set the other fields (call
// timeouts, say) as the test needs.
func (l *Lab) ClientConfig(i int) igd.Config {
	n := l.Nodes[i]
	return igd.Config{
		RootDescURL:  l.RootDescURL,
		DialContext:  n.DialContext,
		ListenPacket: n.ListenPacket,
		Host:         nodeHost{System: hostinfo.System{DialContext: n.DialContext}, gateway: l.RouterLAN},
	}
}

// nodeHost is the igd.HostInfo of a lab node: /proc/net/route would show the
// test process's namespace, not the node's, so the default gateway is given;
// the local address is found the ordinary way, by a UDP socket made in the
// node.
type nodeHost struct {
	hostinfo.System
	gateway netip.Addr
}

// DefaultGateway returns the router's LAN address, the node's default route.
func (h nodeHost) DefaultGateway(context.Context) (netip.Addr, error) { return h.gateway, nil }
