package fake_test

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"time"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/pinhole"
)

// A pinhole client acts as a LAN host with a global IPv6 address against a
// fake router on the IPv6 loopback: the Server sees every caller as that
// address, and DialAs makes the client's connections report it as their
// source. (Not run by go test: a host without an IPv6 loopback could not;
// the package's tests run it and skip there.)
func ExampleNewServer6() {
	gua := netip.MustParseAddr("2001:db8:1::10") // the host the test plays
	router := fake.NewRouter(fake.RouterConfig{})
	srv, err := fake.NewServer6(router, fake.ServerOptions{ClientAddr: func(*http.Request) netip.Addr { return gua }})
	if err != nil {
		fmt.Println("no IPv6 loopback:", err) // a test would t.Skip
		return
	}
	defer srv.Close()

	c, err := pinhole.New(pinhole.Config{LocalAddr: gua, RootDescURL: srv.RootDescURL, DialContext: fake.DialAs(gua)})
	if err != nil {
		fmt.Println(err)
		return
	}
	p := pinhole.Pinhole{InternalClient: gua, InternalPort: 8443, Protocol: igd.TCP, Lease: time.Hour}
	if err := c.OpenPinhole(context.Background(), p); err != nil {
		fmt.Println(err)
		return
	}
	for _, open := range router.Pinholes() {
		fmt.Println(open.ID, open.Pinhole.Protocol, netip.AddrPortFrom(open.Pinhole.InternalClient, open.Pinhole.InternalPort))
	}
	// Prints:
	// 1 TCP [2001:db8:1::10]:8443
}
