package igd_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/netip"
	"time"

	"github.com/ccmkit/ccmkit/igd"
)

// Discover the router on the LAN and forward its external TCP port 8080 to
// port 30080 of this host. It needs a router on the network, so it has no
// Output line and is compiled but not run by go test.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	client, err := igd.NewClient(igd.Config{}) // SSDP discovery, OS sockets
	if err != nil {
		log.Fatal(err)
	}
	gw, err := client.Discover(ctx)
	if errors.Is(err, igd.ErrNoGateway) {
		log.Fatalf("no router: %v", err) // lists what answered and why it was rejected
	} else if err != nil {
		log.Fatal(err)
	}
	fmt.Println("router:", gw.FriendlyName, gw.ServiceType, "chosen because", gw.Reason)
	if err := igd.CheckPublic(gw.ExternalIP); err != nil {
		fmt.Println("warning:", err) // behind CGNAT or another NAT
	}

	self, err := client.LocalAddr(ctx) // the only client a secure-mode router accepts
	if err != nil {
		log.Fatal(err)
	}
	m, err := client.AddPortMapping(ctx, igd.Mapping{
		Protocol:       igd.TCP,
		ExternalPort:   8080,
		InternalClient: self,
		InternalPort:   30080,
		Description:    "example web",
		Lease:          time.Hour,
	})
	switch {
	case errors.Is(err, igd.ErrConflict):
		log.Fatal("port 8080 belongs to another host")
	case err != nil:
		log.Fatal(err)
	}
	fmt.Printf("http://%s:%d/ -> %s:%d (lease %s)\n", gw.ExternalIP, m.ExternalPort, m.InternalClient, m.InternalPort, m.Lease)
}

// CheckPublic tells whether mappings on a router are reachable from the
// internet.
func ExampleCheckPublic() {
	for _, ip := range []string{"198.51.101.7", "100.64.10.20", "192.168.1.2"} {
		fmt.Println(igd.CheckPublic(netip.MustParseAddr(ip)))
	}
	// Output:
	// <nil>
	// igd: external address 100.64.10.20 is not public (100.64.0.0/10, shared address space (CGNAT)): the router is behind another NAT and its mappings are not reachable from the internet
	// igd: external address 192.168.1.2 is not public (192.168.0.0/16, private): the router is behind another NAT and its mappings are not reachable from the internet
}
