package pcp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/pinhole"
	"github.com/ccmkit/ccmkit/internal/pcpwire"
)

// PinholesConfig configures Pinholes.
type PinholesConfig struct {
	// PCP talks to the router's PCP server over IPv6: its Config.Server
	// (or what its Config.Gateway returns) is the router's IPv6 LAN
	// address, such as the link-local address of this host's IPv6 default
	// router with its zone ([fe80::1%eth0]:5351), and its DialContext
	// sends from this host's global address. Required.
	PCP *Client
	// Secret derives the nonces, as BackendConfig.Secret does: at least
	// MinSecretLen bytes, the same in every process of one cluster.
	Secret []byte
}

// Pinholes opens and closes IPv6 firewall pinholes through PCP (a MAP for
// an IPv6 address: no NAT, the internet reaches the internal address and
// port themselves), for any LAN host: a host other than this one is named
// in a THIRD_PARTY option. It is safe for concurrent use and keeps no
// state: OpenPinhole is two requests to the router, ClosePinhole one.
//
// A pinhole's nonce is derived from Secret and the pinhole's address,
// protocol and port, so every process that holds the secret (a controller
// restarted or failed over to another node) renews and closes what another
// opened. What the router enforces (miniupnpd 2.3.1, pinned by the lab
// tests): a close needs that nonce, and THIRD_PARTY needs
// pcp_allow_thirdparty=yes. What it does not: a MAP of an open pinhole
// renews it whatever nonce it carries (2.3.1 checks it from 2.3.8), so the
// nonce proves nothing about who renewed it; and 2.3.1 with nftables drops
// the nonce when it renews a pinhole in place (fixed in 2.3.6), which
// OpenPinhole avoids by deleting before it maps (see DESIGN.md). What the caller must prove itself: that the address is an
// eligible node's and the port one it serves; the router opens a pinhole
// to any LAN address and port it is asked for.
type Pinholes struct {
	pcp    *Client
	secret []byte
}

// NewPinholes returns Pinholes configured by cfg. It does no I/O.
func NewPinholes(cfg PinholesConfig) (*Pinholes, error) {
	switch {
	case cfg.PCP == nil:
		return nil, errors.New("pcp: pinholes: PinholesConfig.PCP is required")
	case len(cfg.Secret) < MinSecretLen:
		return nil, fmt.Errorf("pcp: pinholes: PinholesConfig.Secret is %d bytes, must be at least %d", len(cfg.Secret), MinSecretLen)
	}
	return &Pinholes{pcp: cfg.PCP, secret: bytes.Clone(cfg.Secret)}, nil
}

// OpenPinhole opens p, or renews it when the router holds it: a delete
// with p's nonce, then a MAP request for p.InternalClient (with
// THIRD_PARTY unless it is this host's address), suggesting
// p.InternalPort as the external port, for p.Lease. The delete first makes
// every renewal a new pinhole, which keeps its nonce: miniupnpd before
// 2.3.6 drops the nonce of a pinhole a MAP renews in place, after which no
// close is authorized until its lease ends (DESIGN.md); for the same
// reason the MAP is sent once, not retransmitted (a lost answer fails the
// call, and the next OpenPinhole deletes and maps again). Between the two
// answers the router holds no pinhole: a new connection from the internet
// in that round trip is dropped (and retried by its sender). p is
// validated first (an error matching pinhole.ErrInvalidPinhole names the
// field; nothing is sent). A router that refuses THIRD_PARTY gives an
// error matching igd.ErrThirdPartyRefused, one whose policy refuses the
// request igd.ErrNotAuthorized; every refusal matches igd.ErrRefused. A
// pinhole the router holds under another nonce (its delete is answered
// NOT_AUTHORIZED: another cluster's, a LAN host's own, or one renewed in
// place before) is neither deleted nor mapped: an error matching
// igd.ErrNotAuthorized, and it stays its owner's. A success that does not name p's own address and port
// as the external ones (a router that translates), or grants less than
// p.Lease, is an error too: the pinhole is not the one asked for, or ends
// before the caller renews it.
func (p *Pinholes) OpenPinhole(ctx context.Context, ph pinhole.Pinhole) error {
	if err := ph.Validate(); err != nil {
		return fmt.Errorf("pcp: open pinhole: %w", err)
	}
	switch err := p.pcp.wire().Delete(ctx, ph.Protocol, ph.InternalClient, ph.InternalPort, p.nonce(ph)); {
	case err == nil, errors.Is(err, pcpwire.ErrNoResources):
	case errors.Is(err, pcpwire.ErrNotAuthorized):
		// Fresh proof the router holds it under another nonce: a MAP would
		// renew it in place (and on miniupnpd < 2.3.6 drop its owner's
		// nonce), so it is left to its owner (DESIGN.md).
		return fmt.Errorf("pcp: open pinhole %s: the router holds it under another nonce (another cluster's or a LAN host's, or one renewed in place by an older build, which ends with its lease): left to its owner: %w", ph, notAuthorized(err))
	default:
		return fmt.Errorf("pcp: open pinhole %s: %w", ph, err)
	}
	res, err := p.pcp.wire().Map(ctx, pcpwire.MapRequest{
		Protocol: ph.Protocol, InternalAddr: ph.InternalClient, InternalPort: ph.InternalPort,
		ExternalPort: ph.InternalPort, Lifetime: ph.Lease, Nonce: p.nonce(ph),
		// Sent once: a retransmitted MAP the router already carried out
		// (its answer lost, or slower than the retransmission time) would
		// renew the pinhole in place, and miniupnpd < 2.3.6 then drops its
		// nonce, so no close is authorized until its lease ends. A lost
		// one fails the call; the next OpenPinhole deletes and maps again.
		Once: true,
	})
	if err != nil {
		return fmt.Errorf("pcp: open pinhole %s: %w", ph, notAuthorized(err))
	}
	if res.ExternalAddr != ph.InternalClient || res.ExternalPort != ph.InternalPort {
		return fmt.Errorf("pcp: open pinhole %s: the router answered the external address %s: it translates, this is no pinhole",
			ph, netip.AddrPortFrom(res.ExternalAddr, res.ExternalPort))
	}
	if res.Lifetime < ph.Lease {
		return fmt.Errorf("pcp: open pinhole %s: the router granted %v of the %v asked (its max_lifetime): the pinhole is open until then; ask for at most that",
			ph, res.Lifetime, ph.Lease)
	}
	return nil
}

// ClosePinhole closes p (a MAP with lifetime 0 and p's nonce); p.Lease is
// not used. A pinhole the router does not hold is closed already: nil. A
// router that holds it under another nonce refuses, and the error matches
// igd.ErrNotAuthorized: another cluster's pinhole, or, on miniupnpd before
// 2.3.6, one a MAP renewed in place rather than OpenPinhole (it then closes
// when its lease ends). A router that
// refuses THIRD_PARTY gives an error matching igd.ErrThirdPartyRefused.
func (p *Pinholes) ClosePinhole(ctx context.Context, ph pinhole.Pinhole) error {
	v := ph
	v.Lease = pinhole.MinLease
	if err := v.Validate(); err != nil {
		return fmt.Errorf("pcp: close pinhole: %w", err)
	}
	err := p.pcp.wire().Delete(ctx, ph.Protocol, ph.InternalClient, ph.InternalPort, p.nonce(ph))
	switch {
	case err == nil, errors.Is(err, pcpwire.ErrNoResources):
		return nil
	case errors.Is(err, pcpwire.ErrNotAuthorized):
		return fmt.Errorf("pcp: close pinhole %s: %w (it holds another nonce: another cluster's, or renewed in place by miniupnpd < 2.3.6, which then keeps it until its lease ends)", ph, notAuthorized(err))
	}
	return fmt.Errorf("pcp: close pinhole %s: %w", ph, err)
}

// PinholesForAnyHost reports true: PCP's THIRD_PARTY opens pinholes for any
// LAN host's address, on any port (a router that refuses THIRD_PARTY
// answers each OpenPinhole for another host with igd.ErrThirdPartyRefused).
// It is the load balancer's AnyHostPinholes.
func (p *Pinholes) PinholesForAnyHost() bool { return true }

// nonce is the nonce of pinhole ph under the secret: NonceFor with an owner
// that names the pinhole's address, which no Service owner (namespace/name
// and UID, no spaces) can be.
func (p *Pinholes) nonce(ph pinhole.Pinhole) [12]byte {
	return pcpwire.NonceFor(p.secret, "ipv6 pinhole "+ph.InternalClient.String(),
		igd.Key{Protocol: ph.Protocol, ExternalPort: ph.InternalPort})
}

// notAuthorized makes a NOT_AUTHORIZED answer match igd.ErrNotAuthorized
// too, and returns any other error as it is.
func notAuthorized(err error) error {
	if errors.Is(err, pcpwire.ErrNotAuthorized) {
		return fmt.Errorf("%w: %w", igd.ErrNotAuthorized, err)
	}
	return err
}
