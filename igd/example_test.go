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
	if !gw.PublicExternalIP { // behind CGNAT or another NAT
		fmt.Println("warning: external IP", gw.ExternalIP, "is not public: mappings are not reachable from the internet")
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

// IsPublic tells whether mappings on a router are reachable from the
// internet: a router whose external address is private or CGNAT is itself
// behind another NAT.
func ExampleIsPublic() {
	for _, ip := range []string{"198.51.101.7", "100.64.10.20", "192.168.1.2"} {
		fmt.Println(ip, igd.IsPublic(netip.MustParseAddr(ip)))
	}
	// Output:
	// 198.51.101.7 true
	// 100.64.10.20 false
	// 192.168.1.2 false
}
