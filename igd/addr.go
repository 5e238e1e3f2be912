package igd

import (
	"github.com/ccmkit/ccmkit/internal/igderr"
	"net/netip"
	"strings"
)

// nonPublic lists the IPv4 ranges that are not reachable from the internet:
// private, shared (CGNAT), loopback, link-local and the reserved and
// documentation blocks. A router whose external address is in one of them is
// itself behind another NAT, and its mappings are not reachable from outside.
var nonPublic = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),       // "this network"
	netip.MustParsePrefix("10.0.0.0/8"),      // private
	netip.MustParsePrefix("100.64.0.0/10"),   // shared address space (CGNAT)
	netip.MustParsePrefix("127.0.0.0/8"),     // loopback
	netip.MustParsePrefix("169.254.0.0/16"),  // link-local
	netip.MustParsePrefix("172.16.0.0/12"),   // private
	netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments
	netip.MustParsePrefix("192.0.2.0/24"),    // documentation (TEST-NET-1)
	netip.MustParsePrefix("192.168.0.0/16"),  // private
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking
	netip.MustParsePrefix("198.51.100.0/24"), // documentation (TEST-NET-2)
	netip.MustParsePrefix("203.0.113.0/24"),  // documentation (TEST-NET-3)
	netip.MustParsePrefix("224.0.0.0/4"),     // multicast
	netip.MustParsePrefix("240.0.0.0/4"),     // reserved, and broadcast
}

// IsPublic reports whether a is a public IPv4 address: one that hosts on the
// internet can reach. It is false for private, CGNAT (100.64.0.0/10),
// loopback, link-local, multicast, documentation and reserved addresses, and
// for anything that is not IPv4. A router whose external address is not
// public is itself behind another NAT (CGNAT, a provider's modem): its
// mappings succeed but are not reachable from the internet, so callers
// should tell the user.
func IsPublic(a netip.Addr) bool {
	a = a.Unmap()
	if !a.Is4() {
		return false
	}
	for _, p := range nonPublic {
		if p.Contains(a) {
			return false
		}
	}
	return true
}

// parseExternalIP reads a router's answer to GetExternalIPAddress. It
// accepts an IPv4 host address, written plain or IPv4-mapped, white space
// around it ignored; private and CGNAT addresses are accepted (IsPublic
// tells them apart). Anything else (empty, unparsable, unspecified, IPv6,
// loopback, multicast, broadcast) gives an *igderr.ExternalIPError.
func parseExternalIP(s string) (netip.Addr, error) {
	bad := func(reason string) (netip.Addr, error) {
		return netip.Addr{}, &igderr.ExternalIPError{Value: s, Reason: reason}
	}
	t := strings.TrimSpace(s)
	if t == "" {
		return bad("no external IP address")
	}
	a, err := netip.ParseAddr(t)
	if err != nil {
		return bad("not an IP address")
	}
	a = a.Unmap()
	switch {
	case !a.Is4():
		return bad("not an IPv4 address")
	case a.IsUnspecified():
		return bad("no external IP address (unspecified)")
	case a.IsLoopback():
		return bad("a loopback address")
	case a.IsMulticast():
		return bad("a multicast address")
	case a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return bad("the broadcast address")
	}
	return a, nil
}
