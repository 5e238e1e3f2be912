package edge

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/pinhole"
)

// Through UPnP, a pinhole at an address this host does not have (another
// node's: the controller moved; or this node's old prefix) cannot be
// opened or closed from here: the load balancer leaves such a pinhole to
// its lease when the close is refused (an error matching
// igd.ErrNotAuthorized, as miniupnpd's 606 is), and otherwise retries it,
// failing the Service's IPv6 family each time; an open refused so reports
// the port as not opened. The request is never sent: this host cannot
// send from that address.
func TestClosePinholeAtAnAddressThisHostLacksIsARefusal(t *testing.T) {
	g := GatewayConfig{IPv6: IPv6Config{Enabled: true, URL: "http://[::1]:1/rootDesc.xml"}}
	c, err := newPinholes(g, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	other := netip.MustParseAddr("2001:db8:ffff::11") // not this host's
	p := pinhole.Pinhole{Protocol: igd.TCP, InternalClient: other, InternalPort: 8080, Lease: time.Hour}
	for _, tc := range []struct {
		name string
		call func(context.Context, pinhole.Pinhole) error
	}{
		{"ClosePinhole", c.ClosePinhole},
		{"OpenPinhole", c.OpenPinhole},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := tc.call(ctx, p)
			if !errors.Is(err, igd.ErrNotAuthorized) {
				t.Fatalf("%s of another host's pinhole = %v, want an error matching igd.ErrNotAuthorized", tc.name, err)
			}
			if !strings.Contains(err.Error(), "this host does not have address "+other.String()) {
				t.Errorf("%s of another host's pinhole = %q, want it to say this host does not have %s", tc.name, err, other)
			}
		})
	}
}
