// Package hostinfo reads the facts about this host that igd's discovery and
// the PCP client depend on: the IPv4 default gateway and the local address
// toward the router. System is igd's default igd.HostInfo; a CCM author
// replaces it through igd.Config.Host, never names it.
package hostinfo

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
)

// System is the igd.HostInfo that reads the operating system: the default
// of igd.Config.Host, and of the PCP client's gateway.
//
// DefaultGateway reads RouteFile (Linux's /proc/net/route). That file shows
// the routes of the network namespace of the process that opens it, not of
// the calling thread: a goroutine that switched its locked thread into
// another namespace (setns) still reads the process's routes. Code that runs
// the client inside such a namespace must give the client its own HostInfo.
//
// LocalAddr "connects" a UDP socket toward the router through DialContext and
// reads the socket's local address: the kernel picks the source address from
// its routing table and no packet is sent. Because the socket is made by
// DialContext, this works inside a namespace when DialContext dials there.
type System struct {
	// DialContext makes the UDP socket LocalAddr reads. Nil means a zero
	// net.Dialer.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
	// RouteFile is the routing table to read. Empty means /proc/net/route.
	RouteFile string
}

// DefaultGateway reads the IPv4 default gateway from the route file (Linux
// only).
func (h System) DefaultGateway(ctx context.Context) (netip.Addr, error) {
	name := h.RouteFile
	if name == "" {
		name = "/proc/net/route"
	}
	f, err := os.Open(name)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("igd: read default gateway: %w", err)
	}
	defer f.Close()
	return parseRouteFile(f, name)
}

// Flags of a route in /proc/net/route (linux/route.h).
const (
	rtfUp      = 0x1
	rtfGateway = 0x2
)

// parseRouteFile finds the default route in the format of /proc/net/route:
// a header line, then tab-separated Iface, Destination, Gateway, Flags,
// RefCnt, Use, Metric, Mask, ... with addresses in hexadecimal, host byte
// order (little-endian on the machines Linux routers and nodes run on). The
// default route is an up route through a gateway to destination 0 with mask
// 0 (a VPN's 0.0.0.0/1 is not one); of several, the kernel uses the lowest
// metric, and so does this.
func parseRouteFile(r io.Reader, name string) (netip.Addr, error) {
	sc := bufio.NewScanner(r)
	first := true
	var best netip.Addr
	var bestMetric uint64
	for sc.Scan() {
		if first {
			first = false
			continue
		}
		fields := strings.Fields(sc.Text())
		if len(fields) < 8 || fields[1] != "00000000" || fields[7] != "00000000" {
			continue
		}
		flags, err := strconv.ParseUint(fields[3], 16, 16)
		if err != nil || flags&(rtfUp|rtfGateway) != rtfUp|rtfGateway {
			continue
		}
		metric, err := strconv.ParseUint(fields[6], 10, 32)
		if err != nil {
			continue
		}
		gw, err := parseHexIPv4(fields[2])
		if err != nil || gw.IsUnspecified() {
			continue
		}
		if !best.IsValid() || metric < bestMetric {
			best, bestMetric = gw, metric
		}
	}
	if err := sc.Err(); err != nil {
		return netip.Addr{}, fmt.Errorf("igd: read default gateway from %s: %w", name, err)
	}
	if !best.IsValid() {
		return netip.Addr{}, fmt.Errorf("igd: no IPv4 default route through a gateway in %s", name)
	}
	return best, nil
}

func parseHexIPv4(s string) (netip.Addr, error) {
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 4 {
		return netip.Addr{}, fmt.Errorf("igd: bad address %q in route file", s)
	}
	var a [4]byte
	binary.BigEndian.PutUint32(a[:], binary.LittleEndian.Uint32(b))
	return netip.AddrFrom4(a), nil
}

// LocalAddr returns this host's IPv4 address toward router, from a
// connected UDP socket (no packet sent).
func (h System) LocalAddr(ctx context.Context, router netip.Addr) (netip.Addr, error) {
	if !router.IsValid() {
		return netip.Addr{}, errors.New("igd: local address: no router address")
	}
	dial := h.DialContext
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	// Port 1900 (SSDP) is only there to make a valid destination; UDP
	// "connect" sends nothing.
	conn, err := dial(ctx, "udp4", netip.AddrPortFrom(router.Unmap(), 1900).String())
	if err != nil {
		return netip.Addr{}, fmt.Errorf("igd: local address toward %s: %w", router, err)
	}
	defer conn.Close()
	ap, err := netip.ParseAddrPort(conn.LocalAddr().String())
	if err != nil {
		return netip.Addr{}, fmt.Errorf("igd: local address toward %s: %w", router, err)
	}
	return ap.Addr().Unmap(), nil
}

// Interface is one of this host's network interfaces with its addresses.
type Interface struct {
	// Name and Index are the interface's ("eth0", 2).
	Name  string
	Index int
	// Addrs are its addresses, in the host's order.
	Addrs []netip.Addr
}

// Interfaces returns this host's interfaces and their addresses, in the
// host's order: those of the network namespace of the calling thread.
func Interfaces() ([]Interface, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	out := make([]Interface, 0, len(ifs))
	for _, i := range ifs {
		addrs, err := i.Addrs()
		if err != nil {
			return nil, fmt.Errorf("addresses of %s: %w", i.Name, err)
		}
		in := Interface{Name: i.Name, Index: i.Index}
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(ipn.IP); ok {
					in.Addrs = append(in.Addrs, ip.Unmap())
				}
			}
		}
		out = append(out, in)
	}
	return out, nil
}

// Is reports whether iface names or numbers i ("" names every interface).
func (i Interface) Is(iface string) bool {
	return iface == "" || iface == i.Name || iface == strconv.Itoa(i.Index)
}

// InterfaceAddrs returns this host's addresses on the interface iface
// names or numbers ("" = every interface), in the host's order: the
// addresses of the network namespace of the calling thread.
func InterfaceAddrs(iface string) ([]netip.Addr, error) {
	ifs, err := Interfaces()
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, i := range ifs {
		if i.Is(iface) {
			out = append(out, i.Addrs...)
		}
	}
	return out, nil
}
