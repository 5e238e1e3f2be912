package fake_test

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/internal/pcpwire"
)

// A PCP client against the fake server on loopback; the mapping reads back
// through UPnP with the description miniupnpd gives it.
func ExamplePCPServer() {
	s, err := fake.NewPCPServer(fake.PCPConfig{MaxLifetime: 600 * time.Second})
	if err != nil {
		panic(err)
	}
	defer s.Close()
	c, err := pcpwire.NewClient(pcpwire.Config{Server: s.Addr(), ListenPacket: s.ListenAnnounce})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	nonce := [12]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	got, err := c.Map(ctx, pcpwire.MapRequest{Protocol: igd.TCP, InternalPort: 30080, ExternalPort: 8080, Lifetime: time.Hour, Nonce: nonce})
	if err != nil {
		panic(err)
	}
	fmt.Println(netip.AddrPortFrom(got.ExternalAddr, got.ExternalPort), got.Lifetime)
	m, err := s.Router().Client(netip.MustParseAddr("127.0.0.1")).GetPortMapping(ctx, igd.TCP, 8080)
	if err != nil {
		panic(err)
	}
	fmt.Println(m.InternalClient, m.InternalPort, m.Description)
	// Output:
	// 198.51.101.7:8080 10m0s
	// 127.0.0.1 30080 PCP MAP 04030201080706050c0b0a09
}
