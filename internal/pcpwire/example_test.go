package pcpwire_test

import (
	"context"
	"encoding/hex"
	"fmt"
	"net/netip"
	"time"

	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/internal/pcpwire"
)

func ExampleNonceFor() {
	secret := []byte("0123456789abcdef0123456789abcdef") // a cluster secret, 32 random bytes in practice
	nonce := pcpwire.NonceFor(secret, "default/web", igd.Key{Protocol: igd.TCP, ExternalPort: 8080})
	fmt.Println(hex.EncodeToString(nonce[:]))
	// Output: bf30ecfc52766b6dcefad20d
}

// A load balancer maps a Service port to a node's nodePort and re-maps
// when the router restarts.
func ExampleClient_Map() {
	c, err := pcpwire.NewClient(pcpwire.Config{}) // the default gateway, port 5351
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	go c.ListenAnnounce(ctx)

	key := igd.Key{Protocol: igd.TCP, ExternalPort: 8080}
	req := pcpwire.MapRequest{
		Protocol:      key.Protocol,
		InternalAddr:  netip.MustParseAddr("192.168.1.20"), // a node: THIRD_PARTY
		InternalPort:  30080,
		ExternalPort:  key.ExternalPort,
		Lifetime:      2 * time.Hour,
		PreferFailure: true,
		Nonce:         pcpwire.NonceFor([]byte("cluster secret"), "default/web", key),
	}
	res, err := c.Map(ctx, req)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s:%d for %s\n", res.ExternalAddr, res.ExternalPort, res.Lifetime)
	<-c.Restarts() // then map again
}
