package edge

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/pinhole"
)

// Through UPnP, a pinhole at an address this host does not have (another
// node's: the controller moved; or this node's old prefix) cannot be
// closed from here: the load balancer leaves such a pinhole to its lease
// when the close is refused (an error matching igd.ErrNotAuthorized, as
// miniupnpd's 606 is), and otherwise retries it, failing the Service's IPv6
// family each time. The request is never sent: this host cannot send from
// that address.
func TestClosePinholeAtAnAddressThisHostLacksIsARefusal(t *testing.T) {
	g := GatewayConfig{IPv6: IPv6Config{Enabled: true, URL: "http://[::1]:1/rootDesc.xml"}}
	c, err := newPinholes(g, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	other := netip.MustParseAddr("2001:db8:ffff::11") // not this host's
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = c.ClosePinhole(ctx, pinhole.Pinhole{Protocol: igd.TCP, InternalClient: other, InternalPort: 8080, Lease: time.Hour})
	if !errors.Is(err, igd.ErrNotAuthorized) {
		t.Errorf("ClosePinhole of another host's pinhole = %v, want an error matching igd.ErrNotAuthorized", err)
	}
}
