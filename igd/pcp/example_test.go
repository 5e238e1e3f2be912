package pcp_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/pcp"
	"github.com/ccmkit/ccmkit/igd/pinhole"
)

// A load balancer writes a Service port's mapping for its owner through PCP
// (to a node: THIRD_PARTY) and maps again when the router restarts.
func ExampleNewBackend() {
	c, err := pcp.NewClient(pcp.Config{}) // the default gateway, port 5351
	if err != nil {
		panic(err)
	}
	b, err := pcp.NewBackend(pcp.BackendConfig{
		PCP:    c,
		Secret: []byte("a cluster secret of 32 random bytes at least"),
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	go c.ListenAnnounce(ctx)

	m, err := b.AddFor(ctx, "default/web", igd.Mapping{
		Protocol: igd.TCP, ExternalPort: 8080,
		InternalClient: netip.MustParseAddr("192.168.1.20"), InternalPort: 30080,
		Lease: 2 * time.Hour, Enabled: true,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(m.Key(), "for", m.Lease)
	<-c.Restarts() // then map again
}

// A load balancer opens an IPv6 pinhole to a node's global address on a
// Service port (no NAT: the internet connects to that address and port),
// renews it by opening it again, and closes it when the Service goes.
func ExampleNewPinholes() {
	// The IPv6 default router; send from this host's global address.
	local := netip.MustParseAddr("2001:db8:1::10")
	c, err := pcp.NewClient(pcp.Config{IPv6: true, DialContext: (&net.Dialer{LocalAddr: net.UDPAddrFromAddrPort(netip.AddrPortFrom(local, 0))}).DialContext})
	if err != nil {
		panic(err)
	}
	p, err := pcp.NewPinholes(pcp.PinholesConfig{PCP: c, Secret: []byte("a cluster secret of 32 random bytes at least")})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	ph := pinhole.Pinhole{InternalClient: netip.MustParseAddr("2001:db8:1::11"), InternalPort: 443, Protocol: igd.TCP, Lease: time.Hour}
	if err := p.OpenPinhole(ctx, ph); err != nil {
		fmt.Println(err)
		return
	}
	// ... within the hour, OpenPinhole(ctx, ph) again; when the Service goes:
	if err := p.ClosePinhole(ctx, ph); err != nil {
		fmt.Println(err) // igd.ErrNotAuthorized: another's, or renewed on miniupnpd < 2.3.6
	}
}
