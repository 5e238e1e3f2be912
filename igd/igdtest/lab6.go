package igdtest

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
)

// The IPv6 lab (Options.IPv6), beside the IPv4 one and in the same
// namespaces. Documentation prefixes (RFC 3849) and a ULA (RFC 4193) only;
// like the IPv4 addresses, they exist only inside the lab:
//
//	node i    eth0 2001:db8:1::10+i/64 (GUA) and fd00:1::10+i/64 (ULA);
//	          default route via fe80::1, as a router advertisement gives it
//	router    lan0 fe80::1, 2001:db8:1::1/64, fd00:1::1/64;
//	          wan0 2001:db8:ff::7/64; net.ipv6.conf.all.forwarding=1
//	internet  inet0 2001:db8:ff::99/64; a route to 2001:db8:1::/64 only
//	          (the LAN prefix an ISP would route to the router), no default
//
// The router's forward chain (ruleset6) drops what it does not accept, as
// Debian's /etc/miniupnpd/nft_init.sh sets it up (policy drop, jump to the
// miniupnpd chain first): the internet host reaches [GUA]:port only through
// an accept rule miniupnpd adds to its chain for a pinhole. As a router
// does, it also lets the LAN out and answers back in; IPv4 is forwarded as
// in the IPv4 lab.
var (
	routerLinkLocal = netip.MustParseAddr("fe80::1")
	routerGUA       = netip.MustParseAddr("2001:db8:1::1")
	routerULA       = netip.MustParseAddr("fd00:1::1")
	externalIP6     = netip.MustParseAddr("2001:db8:ff::7")
	internetIP6     = netip.MustParseAddr("2001:db8:ff::99")
	firstNodeGUA    = netip.MustParseAddr("2001:db8:1::10")
	firstNodeULA    = netip.MustParseAddr("fd00:1::10")
	lanPrefix6      = netip.MustParsePrefix("2001:db8:1::/64")
)

// IPv6 is what a lab started with Options.IPv6 adds. Its fields are
// read-only.
type IPv6 struct {
	// RouterLinkLocal is the router's link-local LAN address, fe80::1: the
	// nodes' IPv6 default route goes through it (on their eth0).
	RouterLinkLocal netip.Addr
	// RouterGUA and RouterULA are the router's global (2001:db8:1::1) and
	// unique local (fd00:1::1) LAN addresses. miniupnpd gives control points
	// the global one.
	RouterGUA, RouterULA netip.Addr
	// RootDescURL is the root description on the router's global LAN
	// address, "http://[2001:db8:1::1]:5000/rootDesc.xml": the URL
	// miniupnpd answers SSDP searches over IPv6 with.
	RootDescURL string
	// ExternalIP is the router's WAN address, 2001:db8:ff::7.
	ExternalIP netip.Addr
	// InternetIP is the internet host's address, 2001:db8:ff::99. It has a
	// route to the LAN prefix 2001:db8:1::/64 through the router.
	InternetIP netip.Addr
	// NodeInterface is the name of every node's LAN interface, "eth0"; its
	// index is the node's own (Node.InterfaceIndex).
	NodeInterface string
}

// ruleset6 is ruleset with the forward chain of a router that firewalls
// IPv6: policy drop, the miniupnpd chain first (where pinholes add their
// accept rules), then what a router lets through: answers to what went out,
// the LAN going out, and IPv4 (which the IPv4 lab forwards unfiltered).
const ruleset6 = `table inet filter {
	chain forward {
		type filter hook forward priority 0; policy drop;
		jump miniupnpd
		ct state established,related accept
		iifname "lan0" oifname "wan0" accept
		meta nfproto ipv4 accept
	}
	chain miniupnpd { }
	chain prerouting { type nat hook prerouting priority -100; policy accept; jump prerouting_miniupnpd; }
	chain postrouting { type nat hook postrouting priority 100; policy accept; jump postrouting_miniupnpd; }
	chain prerouting_miniupnpd { }
	chain postrouting_miniupnpd { }
}
`

// noDAD turns off duplicate address detection in every namespace of the
// lab, for the interfaces made afterwards: the addresses are unique by
// construction, and an address still tentative could not be bound or
// answer for about a second after it is added.
func (l *Lab) noDAD() error {
	for _, ns := range append([]string{l.RouterNS, l.InternetNS}, nodeNames(l.Nodes)...) {
		err := inNetns(ns, func() error {
			for _, f := range []string{"all", "default"} {
				if err := os.WriteFile(filepath.Join("/proc/sys/net/ipv6/conf", f, "accept_dad"), []byte("0\n"), 0o644); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("turn off IPv6 duplicate address detection in %s: %w", ns, err)
		}
	}
	return nil
}

// setUpIPv6 adds the IPv6 addresses and routes to the interfaces setUp made
// and turns on IPv6 forwarding in the router.
func (l *Lab) setUpIPv6() error {
	l.IPv6 = &IPv6{
		RouterLinkLocal: routerLinkLocal,
		RouterGUA:       routerGUA,
		RouterULA:       routerULA,
		RootDescURL:     "http://" + netip.AddrPortFrom(routerGUA, 5000).String() + "/rootDesc.xml",
		ExternalIP:      externalIP6,
		InternetIP:      internetIP6,
		NodeInterface:   "eth0",
	}
	r, inet := l.RouterNS, l.InternetNS
	steps := [][]string{
		{r, "addr", "add", routerLinkLocal.String() + "/64", "dev", "lan0", "nodad"},
		{r, "addr", "add", routerGUA.String() + "/64", "dev", "lan0", "nodad"},
		{r, "addr", "add", routerULA.String() + "/64", "dev", "lan0", "nodad"},
		{r, "addr", "add", externalIP6.String() + "/64", "dev", "wan0", "nodad"},
		{inet, "addr", "add", internetIP6.String() + "/64", "dev", "inet0", "nodad"},
		{inet, "-6", "route", "add", lanPrefix6.String(), "via", externalIP6.String()},
	}
	gua, ula := firstNodeGUA, firstNodeULA
	for _, n := range l.Nodes {
		n.GUA, n.ULA = gua, ula
		steps = append(steps,
			[]string{n.Name, "addr", "add", gua.String() + "/64", "dev", "eth0", "nodad"},
			[]string{n.Name, "addr", "add", ula.String() + "/64", "dev", "eth0", "nodad"},
			[]string{n.Name, "-6", "route", "add", "default", "via", routerLinkLocal.String(), "dev", "eth0"},
		)
		gua, ula = gua.Next(), ula.Next()
	}
	for _, s := range steps {
		if err := l.run(context.Background(), l.tools.ip, append([]string{"-n", s[0]}, s[1:]...)...); err != nil {
			return err
		}
	}
	if err := inNetns(r, func() error {
		return os.WriteFile("/proc/sys/net/ipv6/conf/all/forwarding", []byte("1\n"), 0o644)
	}); err != nil {
		return fmt.Errorf("enable IPv6 forwarding in %s: %w", r, err)
	}
	return nil
}

// InterfaceIndex returns the index of the node's interface name (for
// example Lab.IPv6.NodeInterface) inside its namespace: the zone of a
// link-local or link-scoped multicast address on that link. Indexes are per
// namespace, so a name resolved anywhere else may name another interface.
func (n *Node) InterfaceIndex(name string) (int, error) {
	var idx int
	err := n.Do(func() error {
		ifi, err := net.InterfaceByName(name)
		if err != nil {
			return err
		}
		idx = ifi.Index
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("igdtest: interface %s in namespace %s: %w", name, n.Name, err)
	}
	return idx, nil
}

// DialContextFrom returns a dial function (the signature of
// net.Dialer.DialContext, TCP or UDP) that dials from inside the node's namespace with
// local as the source address, for example the node's GUA: a router that
// lets a host open pinholes only for itself judges it by the source
// address, and a host with several IPv6 addresses (ULA, GUA, temporary)
// would otherwise send from the one the kernel prefers.
func (n *Node) DialContextFrom(local netip.Addr) func(ctx context.Context, network, address string) (net.Conn, error) {
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		var c net.Conn
		err := n.Do(func() error {
			var err error
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: local.AsSlice(), Zone: local.Zone()}}
			if strings.HasPrefix(network, "udp") {
				d.LocalAddr = &net.UDPAddr{IP: local.AsSlice(), Zone: local.Zone()}
			}
			c, err = d.DialContext(ctx, network, address)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("igdtest: dial %s %s from [%s] in namespace %s: %w", network, address, local, n.Name, err)
		}
		return c, nil
	}
}

// InternetReaches reports whether the internet host can open a TCP
// connection to addr (for example [node GUA]:8443) before ctx ends: nil
// when it can, the dial's error when it cannot. The firewall drops what it
// does not accept, so a closed pinhole shows as a dial that runs until ctx
// ends: give ctx a short bound.
func (l *Lab) InternetReaches(ctx context.Context, addr netip.AddrPort) error {
	c, err := l.InternetDialContext(ctx, "tcp", addr.String())
	if err != nil {
		return err
	}
	return c.Close()
}
