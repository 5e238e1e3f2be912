package fake_test

import (
	"errors"
	"net/netip"
	"net/url"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/huin/goupnp"
	"github.com/huin/goupnp/dcps/internetgateway2"
	"github.com/huin/goupnp/soap"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/pinhole"
	"github.com/ccmkit/ccmkit/internal/upnp"
)

// guaA is the IPv6 lab's first node's global address.
var guaA = netip.MustParseAddr("2001:db8:1::10")

// pinholeServer serves r on the IPv6 loopback, the way pinhole clients need
// it (the control URL must be an IPv6 literal), seeing every caller as
// host. It skips the test where the machine has no IPv6 loopback.
func pinholeServer(t *testing.T, r *fake.Router, host netip.Addr) string {
	t.Helper()
	s, err := fake.NewServer6(r, fake.ServerOptions{ClientAddr: fixed(host)})
	if err != nil {
		t.Skip(err)
	}
	t.Cleanup(s.Close)
	return s.RootDescURL
}

// pinholeClient returns the real pinhole client acting as host, talking to r
// through a fake Server.
func pinholeClient(t *testing.T, r *fake.Router, host netip.Addr) *pinhole.UPnPClient {
	t.Helper()
	c, err := pinhole.New(pinhole.Config{LocalAddr: host, RootDescURL: pinholeServer(t, r, host), DialContext: fake.DialAs(host)})
	if err != nil {
		t.Fatalf("pinhole.New: %v", err)
	}
	return c
}

func TestRouterPinholesListsWhatIsOpen(t *testing.T) {
	clk := clocktesting.NewFakeClock(epoch)
	r := fake.NewRouter(fake.RouterConfig{Clock: clk})
	c := pinholeClient(t, r, guaA)
	ctx := t.Context()
	p := pinhole.Pinhole{InternalClient: guaA, InternalPort: 8443, Protocol: igd.UDP, Lease: time.Hour}
	id, err := c.Add(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	clk.Step(20 * time.Minute)
	want := p
	want.Lease = 40 * time.Minute
	if diff := cmp.Diff([]fake.OpenPinhole{{ID: id, Pinhole: want}}, r.Pinholes(), cmpopts.EquateComparable(netip.Addr{})); diff != "" {
		t.Errorf("Pinholes() after 20 minutes (-want +got):\n%s", diff)
	}
	clk.Step(40 * time.Minute)
	if got := r.Pinholes(); len(got) != 0 {
		t.Errorf("Pinholes() after the lease = %v, want none", got)
	}
	if _, err := c.Add(ctx, p); err != nil {
		t.Fatal(err)
	}
	r.Reboot()
	if got := r.Pinholes(); len(got) != 0 {
		t.Errorf("Pinholes() after Reboot = %v, want none", got)
	}
}

// TestServerPinholeComparesTheAddressAsText: like miniupnpd 2.3.1, the
// Server refuses (606) the caller's own address written in another form
// than the canonical one.
func TestServerPinholeComparesTheAddressAsText(t *testing.T) {
	r := fake.NewRouter(fake.RouterConfig{})
	loc := pinholeServer(t, r, guaA)
	root, err := goupnp.DeviceByURLCtx(t.Context(), mustURL(t, loc))
	if err != nil {
		t.Fatal(err)
	}
	var fc *internetgateway2.WANIPv6FirewallControl1
	root.Device.VisitServices(func(s *goupnp.Service) {
		if s.ServiceType == internetgateway2.URN_WANIPv6FirewallControl_1 {
			fc = &internetgateway2.WANIPv6FirewallControl1{ServiceClient: goupnp.ServiceClient{
				SOAPClient: soap.NewSOAPClient(s.ControlURL.URL), RootDevice: root, Service: s}}
		}
	})
	if fc == nil {
		t.Fatal("no WANIPv6FirewallControl:1 in the description")
	}
	for _, tc := range []struct {
		client string
		code   int
	}{
		{"2001:db8:1:0::0010", upnp.CodeNotAuthorized},
		{"2001:DB8:1::10", upnp.CodeNotAuthorized},
		{"2001:db8:1::10", 0},
	} {
		_, err := fc.AddPinholeCtx(t.Context(), "", 0, tc.client, 8443, 6, 3600)
		if got := soapCode(err); got != tc.code {
			t.Errorf("AddPinhole %s: code %d (%v), want %d", tc.client, got, err, tc.code)
		}
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// soapCode is the UPnP code of a SOAP fault, 0 for no error.
func soapCode(err error) int {
	var f *soap.SOAPFaultError
	if errors.As(err, &f) {
		return f.Detail.UPnPError.Errorcode
	}
	if err != nil {
		return -1
	}
	return 0
}
