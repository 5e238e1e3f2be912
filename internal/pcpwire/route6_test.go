package pcpwire

import (
	"net/netip"
	"strings"
	"testing"
)

// A node's /proc/net/ipv6_route as the lab's shows it, and variants.
const (
	route6Local = "fe800000000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001     eth0\n" +
		"20010db8000100000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001     eth0\n"
	route6Default = "00000000000000000000000000000000 00 00000000000000000000000000000000 00 fe800000000000000000000000000001 00000400 00000001 00000000 00000003     eth0\n"
	route6Worse   = "00000000000000000000000000000000 00 00000000000000000000000000000000 00 fe800000000000000000000000000002 00000800 00000001 00000000 00000003     wlan0\n"
	route6Unreach = "00000000000000000000000000000000 00 00000000000000000000000000000000 00 00000000000000000000000000000000 ffffffff 00000001 00000000 00200200       lo\n"
)

// TestParseIPv6Route: the IPv6 default router is the next hop of an up
// route through a gateway to ::/0, with its interface as the zone; of
// several, the lowest metric; the kernel's unreachable default is none.
func TestParseIPv6Route(t *testing.T) {
	for _, tt := range []struct {
		name, file string
		want       netip.Addr
	}{
		{"lab", route6Local + route6Default + route6Unreach, netip.MustParseAddr("fe80::1%eth0")},
		{"lowest metric", route6Worse + route6Default, netip.MustParseAddr("fe80::1%eth0")},
		{"global router", strings.ReplaceAll(route6Default, "fe800000000000000000000000000001", "20010db8000100000000000000000001"), netip.MustParseAddr("2001:db8:1::1")},
		{"none", route6Local + route6Unreach, netip.Addr{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseIPv6Route(strings.NewReader(tt.file), "ipv6_route")
			if !tt.want.IsValid() {
				if err == nil {
					t.Fatalf("parseIPv6Route = %s, want an error", got)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("parseIPv6Route = %s, %v; want %s", got, err, tt.want)
			}
		})
	}
}
