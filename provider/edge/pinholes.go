package edge

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"sync"
	"syscall"

	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/pcp"
	"github.com/ccmkit/ccmkit/igd/pinhole"
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
// client's connections.
func newPinholes(g GatewayConfig, secret []byte, dial func(ctx context.Context, network, address string) (net.Conn, error)) (loadbalancer.PinholeClient, error) {
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
	return &ownPinholes{gw: g, dial: dial, clients: make(map[netip.Addr]*pinhole.UPnPClient)}, nil
}

// ownPinholes opens pinholes through UPnP, which opens them only to the
// address a request comes from: each pinhole's request is sent from its own
// InternalClient, which the load balancer took from this process's Node's
// status (a client that does not declare AnyHostPinholes gets pinholes for
// its own node only). One pinhole.UPnPClient per such address, made on
// first use: a node whose prefix changed gets a new one, and the old one
// still closes what was opened from the old address while the host has it.
type ownPinholes struct {
	gw   GatewayConfig
	dial func(ctx context.Context, network, address string) (net.Conn, error)

	// mu guards clients, by the address they send from.
	mu      sync.Mutex
	clients map[netip.Addr]*pinhole.UPnPClient
}

var (
	_ loadbalancer.PinholeClient = (*ownPinholes)(nil)
	_ loadbalancer.PinholeProber = (*ownPinholes)(nil)
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
