package pinhole_test

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/pinhole"
)

func TestGlobalAddrsKeepsEachAddressAPinholeMayNameOnceInOrder(t *testing.T) {
	in := []netip.Addr{
		netip.MustParseAddr("fe80::1"),          // link-local
		netip.MustParseAddr("2001:db8:1::10"),   // global
		netip.MustParseAddr("192.0.2.10"),       // IPv4
		netip.MustParseAddr("fd00:1::10"),       // ULA
		netip.MustParseAddr("::ffff:192.0.2.1"), // IPv4-mapped
		netip.MustParseAddr("2001:db8:2::10"),   // global
		netip.MustParseAddr("2001:db8:1::10"),   // again
	}
	want := []netip.Addr{netip.MustParseAddr("2001:db8:1::10"), netip.MustParseAddr("2001:db8:2::10")}
	if diff := cmp.Diff(want, pinhole.GlobalAddrs(in), cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Errorf("GlobalAddrs (-want +got):\n%s", diff)
	}
}

func TestValidateNamesTheField(t *testing.T) {
	gua := netip.MustParseAddr("2001:db8:1::10")
	ok := pinhole.Pinhole{InternalClient: gua, InternalPort: 8443, Protocol: igd.TCP, Lease: time.Hour}
	with := func(f func(*pinhole.Pinhole)) pinhole.Pinhole { p := ok; f(&p); return p }
	for _, tc := range []struct {
		name string
		p    pinhole.Pinhole
		want string // in the error; "" means valid
	}{
		{"valid", ok, ""},
		{"UDP, port 1, shortest and longest lease", with(func(p *pinhole.Pinhole) { p.Protocol, p.InternalPort, p.Lease = igd.UDP, 1, time.Second }), ""},
		{"longest lease", with(func(p *pinhole.Pinhole) { p.Lease = 24 * time.Hour }), ""},
		{"unset client", with(func(p *pinhole.Pinhole) { p.InternalClient = netip.Addr{} }), "Pinhole.InternalClient"},
		{"IPv4 client", with(func(p *pinhole.Pinhole) { p.InternalClient = netip.MustParseAddr("192.0.2.10") }), "IPv4"},
		{"IPv4-mapped client", with(func(p *pinhole.Pinhole) { p.InternalClient = netip.MustParseAddr("::ffff:192.0.2.10") }), "IPv4"},
		{"ULA client", with(func(p *pinhole.Pinhole) { p.InternalClient = netip.MustParseAddr("fd00:1::10") }), "unique local"},
		{"link-local client", with(func(p *pinhole.Pinhole) { p.InternalClient = netip.MustParseAddr("fe80::10") }), "link-local"},
		{"multicast client", with(func(p *pinhole.Pinhole) { p.InternalClient = netip.MustParseAddr("ff02::c") }), "multicast"},
		{"loopback client", with(func(p *pinhole.Pinhole) { p.InternalClient = netip.IPv6Loopback() }), "not a global unicast"},
		{"unspecified client", with(func(p *pinhole.Pinhole) { p.InternalClient = netip.IPv6Unspecified() }), "not a global unicast"},
		{"zoned client", with(func(p *pinhole.Pinhole) { p.InternalClient = gua.WithZone("eth0") }), "zone"},
		{"port 0", with(func(p *pinhole.Pinhole) { p.InternalPort = 0 }), "Pinhole.InternalPort"},
		{"protocol", with(func(p *pinhole.Pinhole) { p.Protocol = "SCTP" }), "Pinhole.Protocol"},
		{"no lease", with(func(p *pinhole.Pinhole) { p.Lease = 0 }), "Pinhole.Lease"},
		{"lease over a day", with(func(p *pinhole.Pinhole) { p.Lease = 24*time.Hour + time.Second }), "Pinhole.Lease"},
		{"lease in fractions", with(func(p *pinhole.Pinhole) { p.Lease = 1500 * time.Millisecond }), "Pinhole.Lease"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.p.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Validate(%v) = %v, want nil", tc.p, err)
				}
				return
			}
			if !errors.Is(err, pinhole.ErrInvalidPinhole) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate(%v) = %v, want ErrInvalidPinhole naming %q", tc.p, err, tc.want)
			}
		})
	}
}

func TestNewNamesTheInvalidConfigField(t *testing.T) {
	gua := netip.MustParseAddr("2001:db8:1::10")
	for _, tc := range []struct {
		name string
		cfg  pinhole.Config
		want string
	}{
		{"no local address", pinhole.Config{}, "Config.LocalAddr"},
		{"ULA local address", pinhole.Config{LocalAddr: netip.MustParseAddr("fd00::1")}, "Config.LocalAddr"},
		{"IPv4 description", pinhole.Config{LocalAddr: gua, RootDescURL: "http://192.0.2.1:5000/rootDesc.xml"}, "Config.RootDescURL"},
		{"host name description", pinhole.Config{LocalAddr: gua, RootDescURL: "http://router.lan:5000/rootDesc.xml"}, "Config.RootDescURL"},
		{"negative call timeout", pinhole.Config{LocalAddr: gua, CallTimeout: -1}, "Config.CallTimeout"},
		{"negative discovery timeout", pinhole.Config{LocalAddr: gua, DiscoveryTimeout: -1}, "Config.DiscoveryTimeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := pinhole.New(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New(%+v) = %v, want an error naming %s", tc.cfg, err, tc.want)
			}
		})
	}
	if _, err := pinhole.New(pinhole.Config{LocalAddr: gua, RootDescURL: "http://[2001:db8:1::1]:5000/rootDesc.xml"}); err != nil {
		t.Fatalf("New with a valid config: %v", err)
	}
}
