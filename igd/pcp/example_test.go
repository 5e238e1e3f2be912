package pcp_test

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/pcp"
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
