package edge

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"syscall"

	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/pcp"
	"github.com/ccmkit/ccmkit/igd/pinhole"
	"github.com/ccmkit/ccmkit/internal/hostinfo"
	"github.com/ccmkit/ccmkit/loadbalancer"
)

// This file is the IPv6 family's router client (gateway.ipv6): UPnP
// pinholes from this node's own address, or PCP pinholes for any node.

// PinholeConfig is the UPnP pinhole client's configuration the "gateway"
// section gives, for requests sent from local (this node's global IPv6
// address): what New uses, per address, with gateway.ipv6 enabled and
// UPnP chosen.
func (g GatewayConfig) PinholeConfig(local netip.Addr) pinhole.Config {
	return pinhole.Config{
		LocalAddr:        local,
		RootDescURL:      g.IPv6.URL,
		Interface:        g.IPv6.Interface,
		CallTimeout:      g.CallTimeout.Duration,
		DiscoveryTimeout: g.DiscoveryTimeout.Duration,
	}
}

// PCPConfig6 is the IPv6 PCP client's configuration the "gateway" section
// gives: the host of gateway.ipv6.url on pcp.Port, else this host's IPv6
// default router. What New uses with gateway.ipv6 enabled and PCP chosen.
func (g GatewayConfig) PCPConfig6() pcp.Config {
	cfg := pcp.Config{IPv6: true}
	if u, err := url.Parse(g.IPv6.URL); err == nil && g.IPv6.URL != "" {
		if a, err := netip.ParseAddr(u.Hostname()); err == nil {
			cfg.Server = netip.AddrPortFrom(a, pcp.Port)
		}
	}
	return cfg
}

// newPinholes returns the pinhole client gateway.ipv6 asks for: through PCP
// (when mappings are, with secret) or UPnP. dial, when set, opens the UPnP
// client's connections; interfaces returns this host's interfaces and their
// addresses.
func newPinholes(g GatewayConfig, secret []byte, dial func(ctx context.Context, network, address string) (net.Conn, error), interfaces func() ([]hostinfo.Interface, error)) (loadbalancer.PinholeClient, error) {
	if g.usesPCP() {
		c, err := pcp.NewClient(g.PCPConfig6())
		if err != nil {
			return nil, fmt.Errorf("edge: gateway.ipv6: router's PCP server: %w", err)
		}
		p, err := pcp.NewPinholes(pcp.PinholesConfig{PCP: c, Secret: secret})
		if err != nil {
			return nil, fmt.Errorf("edge: gateway.pcpSecretFile %s: %w", g.PCPSecretFile, err)
		}
		return p, nil
	}
	return &ownPinholes{gw: g, dial: dial, interfaces: interfaces, clients: make(map[netip.Addr]*pinhole.UPnPClient)}, nil
}

// ownPinholes opens pinholes through UPnP, which opens them only to the
// address a request comes from: each pinhole's request is sent from its own
// InternalClient, which the load balancer took from this process's Node's
// status (a client that does not declare AnyHostPinholes gets pinholes for
// its own node only). One pinhole.UPnPClient per such address, made on
// first use: a node whose prefix changed gets a new one, and the old one
// still closes what was opened from the old address while the host has it.
// It says this host's global IPv6 addresses (LocalAddrs), by which the load
// balancer finds its node when the Nodes report no IPv4 address it knows.
type ownPinholes struct {
	gw   GatewayConfig
	dial func(ctx context.Context, network, address string) (net.Conn, error)
	// interfaces returns this host's interfaces and their addresses.
	interfaces func() ([]hostinfo.Interface, error)

	// mu guards clients, by the address they send from.
	mu      sync.Mutex
	clients map[netip.Addr]*pinhole.UPnPClient
}

var (
	_ loadbalancer.PinholeClient   = (*ownPinholes)(nil)
	_ loadbalancer.PinholeProber   = (*ownPinholes)(nil)
	_ loadbalancer.OwnHostPinholes = (*ownPinholes)(nil)
)

// client returns the client that sends from local.
func (o *ownPinholes) client(local netip.Addr) (*pinhole.UPnPClient, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if c := o.clients[local]; c != nil {
		return c, nil
	}
	cfg := o.gw.PinholeConfig(local)
	cfg.DialContext = o.dial
	c, err := pinhole.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("edge: gateway.ipv6: %w", err)
	}
	o.clients[local] = c
	return c, nil
}

// OpenPinhole implements loadbalancer.PinholeClient: from p's own address.
// At an address this host does not have, an error matching
// igd.ErrNotAuthorized (see notThisHost).
func (o *ownPinholes) OpenPinhole(ctx context.Context, p pinhole.Pinhole) error {
	c, err := o.client(p.InternalClient)
	if err != nil {
		return err
	}
	return notThisHost(p, c.OpenPinhole(ctx, p))
}

// ClosePinhole implements loadbalancer.PinholeClient: from p's own address.
// At an address this host does not have (another node's, after the
// controller moved, or this node's old prefix), an error matching
// igd.ErrNotAuthorized: the load balancer leaves such a pinhole to its
// lease, as it does one miniupnpd refuses with 606.
func (o *ownPinholes) ClosePinhole(ctx context.Context, p pinhole.Pinhole) error {
	c, err := o.client(p.InternalClient)
	if err != nil {
		return err
	}
	return notThisHost(p, c.ClosePinhole(ctx, p))
}

// notThisHost returns err, as a refusal matching igd.ErrNotAuthorized (and
// still matching err) when the request could not be sent because this host
// does not have p's address (bind: EADDRNOTAVAIL): UPnP takes a pinhole's
// request only from its own address, so no request from this host can
// open or close it; the router would refuse it as miniupnpd's 606 does.
func notThisHost(p pinhole.Pinhole, err error) error {
	if err == nil || !errors.Is(err, syscall.EADDRNOTAVAIL) {
		return err
	}
	return fmt.Errorf("edge: gateway.ipv6: %w: this host does not have address %s, and UPnP takes a pinhole's request only from its own address: %w",
		igd.ErrNotAuthorized, p.InternalClient, err)
}

// PinholeHeld implements loadbalancer.PinholeProber.
func (o *ownPinholes) PinholeHeld(ctx context.Context, p pinhole.Pinhole) (bool, error) {
	c, err := o.client(p.InternalClient)
	if err != nil {
		return false, err
	}
	return c.PinholeHeld(ctx, p)
}

// LocalAddrs implements loadbalancer.OwnHostPinholes: this host's global
// IPv6 addresses (on gateway.ipv6.interface when set), in the host's order,
// each one a pinhole's request can be sent from.
func (o *ownPinholes) LocalAddrs(context.Context) ([]netip.Addr, error) {
	ifs, err := o.interfaces()
	if err != nil {
		return nil, fmt.Errorf("edge: gateway.ipv6: this host's interfaces: %w", err)
	}
	var all []netip.Addr
	for _, i := range ifs {
		if i.Is(o.gw.IPv6.Interface) {
			all = append(all, i.Addrs...)
		}
	}
	return pinhole.GlobalAddrs(all), nil
}

// selfByAddress is the router client the load balancer finds its own node
// by (Client.LocalAddr, when loadBalancer.nodeName is empty) where UPnP
// pinholes serve IPv6 and the router maps IPv4 to any host (no
// secureMode): the address then only names the node, which it finds among
// the Nodes' IPv4 InternalIP and ExternalIP. UPnP pinholes may go only to
// the node whose global IPv6 address this host has (the router opens them
// to the address a request comes from), and that address is the better
// guide: the UPnP client's address toward the router names the node only
// while the IPv4 router is found, which behind a carrier's NAT it may not
// be. A node that reports only its IPv6 address the load balancer finds by
// the pinhole client's (ownPinholes.LocalAddrs). Every other method is the
// UPnP client's.
type selfByAddress struct {
	*igd.UPnPClient
	// iface is gateway.ipv6.interface: "" = every interface.
	iface string
	// interfaces returns this host's interfaces and their addresses.
	interfaces func() ([]hostinfo.Interface, error)
}

// LocalAddr returns this host's IPv4 address beside its global IPv6
// address: the one IPv4 address (not loopback or link-local) of the one
// interface (gateway.ipv6.interface when set) that holds global IPv6
// addresses, as a Node whose InternalIP is its LAN address reports it.
// Where there is no such single address it returns the UPnP client's
// address toward the router, and when that is unknown too, an error naming
// loadBalancer.nodeName and both reasons.
func (c selfByAddress) LocalAddr(ctx context.Context) (netip.Addr, error) {
	a, why := c.besideGlobalIPv6()
	if why == "" {
		return a, nil
	}
	a, err := c.UPnPClient.LocalAddr(ctx)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("edge: loadBalancer.nodeName is empty, %s, and the IPv4 router gives no address toward it: %w; set loadBalancer.nodeName (or %s)", why, err, EnvNodeName)
	}
	return a, nil
}

// besideGlobalIPv6 returns the IPv4 address LocalAddr prefers, or why there
// is none.
func (c selfByAddress) besideGlobalIPv6() (netip.Addr, string) {
	where := "this host"
	if c.iface != "" {
		where = "gateway.ipv6.interface " + c.iface
	}
	ifs, err := c.interfaces()
	if err != nil {
		return netip.Addr{}, fmt.Sprintf("the interfaces of %s cannot be read (%v)", where, err)
	}
	var holders []hostinfo.Interface // the interfaces with a global IPv6 address
	for _, i := range ifs {
		if i.Is(c.iface) && len(pinhole.GlobalAddrs(i.Addrs)) > 0 {
			holders = append(holders, i)
		}
	}
	switch len(holders) {
	case 0:
		return netip.Addr{}, where + " has no global IPv6 address"
	case 1:
	default:
		names := make([]string, len(holders))
		for i, h := range holders {
			names[i] = h.Name
		}
		return netip.Addr{}, fmt.Sprintf("global IPv6 addresses are on several interfaces of %s (%s): set gateway.ipv6.interface", where, strings.Join(names, ", "))
	}
	var v4 []netip.Addr
	for _, a := range holders[0].Addrs {
		if a.Is4() && !a.IsLoopback() && !a.IsLinkLocalUnicast() && !a.IsUnspecified() {
			v4 = append(v4, a)
		}
	}
	if len(v4) != 1 {
		return netip.Addr{}, fmt.Sprintf("%s, the interface with this host's global IPv6 address, has %d IPv4 addresses, not one", holders[0].Name, len(v4))
	}
	return v4[0], ""
}
