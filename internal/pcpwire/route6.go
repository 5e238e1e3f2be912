package pcpwire

import (
	"bufio"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strconv"
	"strings"
)

// Flags of a route in /proc/net/ipv6_route (linux/route.h).
const (
	rtfUp      = 0x1
	rtfGateway = 0x2
)

// defaultRouter6 returns the next hop of this host's IPv6 default route,
// with its interface as the zone: the route table of the calling thread's
// network namespace (/proc/thread-self/net/ipv6_route; Linux only), so a
// caller on a thread inside another namespace reads that namespace's.
func defaultRouter6(context.Context) (netip.Addr, error) {
	const name = "/proc/thread-self/net/ipv6_route"
	f, err := os.Open(name)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("read the IPv6 default router: %w", err)
	}
	defer f.Close()
	return parseIPv6Route(f, name)
}

// parseIPv6Route finds the default router in the format of
// /proc/net/ipv6_route: per line, space-separated destination, its prefix
// length, source, its prefix length, next hop, metric, reference count,
// use count, flags and interface, numbers in hexadecimal. The default route
// is an up route through a gateway to ::/0; of several, the kernel uses the
// lowest metric, and so does this. A link-local next hop gets its
// interface as the zone.
func parseIPv6Route(r io.Reader, name string) (netip.Addr, error) {
	sc := bufio.NewScanner(r)
	var best netip.Addr
	var bestMetric uint64
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 10 || f[0] != strings.Repeat("0", 32) || f[1] != "00" {
			continue
		}
		flags, err := strconv.ParseUint(f[8], 16, 32)
		if err != nil || flags&(rtfUp|rtfGateway) != rtfUp|rtfGateway {
			continue
		}
		metric, err := strconv.ParseUint(f[5], 16, 32)
		if err != nil {
			continue
		}
		b, err := hex.DecodeString(f[4])
		if err != nil || len(b) != 16 {
			continue
		}
		gw := netip.AddrFrom16([16]byte(b))
		if !unicast(gw) {
			continue
		}
		if gw.IsLinkLocalUnicast() {
			gw = gw.WithZone(f[9])
		}
		if !best.IsValid() || metric < bestMetric {
			best, bestMetric = gw, metric
		}
	}
	if err := sc.Err(); err != nil {
		return netip.Addr{}, fmt.Errorf("read the IPv6 default router from %s: %w", name, err)
	}
	if !best.IsValid() {
		return netip.Addr{}, fmt.Errorf("no IPv6 default route through a router in %s", name)
	}
	return best, nil
}
