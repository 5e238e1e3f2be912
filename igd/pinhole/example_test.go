package pinhole_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/pinhole"
)

// A host opens a pinhole to its own global address, renews it by adding it
// again (which returns the same ID, and is safe across a router reboot),
// and closes it. With no RootDescURL the client finds the router by SSDP
// over IPv6.
func Example() {
	ctx := context.Background()
	gua := netip.MustParseAddr("2001:db8:1::10") // this host's global address
	c, err := pinhole.New(pinhole.Config{LocalAddr: gua})
	if err != nil {
		fmt.Println(err)
		return
	}
	p := pinhole.Pinhole{InternalClient: gua, InternalPort: 8443, Protocol: igd.TCP, Lease: time.Hour}
	id, err := c.Add(ctx, p)
	switch {
	case errors.Is(err, igd.ErrNotAuthorized):
		fmt.Println("the router refuses: not this host's address, or a port below 1024")
		return
	case err != nil:
		fmt.Println(err)
		return
	}
	// Renew before the lease ends: Add again.
	if _, err := c.Add(ctx, p); err != nil {
		fmt.Println(err)
	}
	if err := c.Delete(ctx, id); err != nil {
		fmt.Println(err)
	}
}
