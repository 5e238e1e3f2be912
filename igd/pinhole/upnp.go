package pinhole

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"sync"
	"time"

	"github.com/huin/goupnp/dcps/internetgateway2"
	"github.com/huin/goupnp/soap"

	"github.com/ccmkit/ccmkit/igd"
)

// Defaults for the zero values of Config.
const (
	// DefaultCallTimeout bounds one SOAP call or description fetch: the
	// router is on the LAN and answers in milliseconds; the bound leaves
	// room for a busy one while still noticing a dead one quickly.
	DefaultCallTimeout = 2 * time.Second
	// DefaultDiscoveryTimeout bounds one SSDP search; miniupnpd answers in
	// about 50 ms, so it matters only when no router answers.
	DefaultDiscoveryTimeout = 3 * time.Second
)

// Config configures a UPnPClient.
type Config struct {
	// LocalAddr is this host's global IPv6 address: every request is sent
	// from it, since the router opens pinholes only to the address a
	// request comes from. Required; it must pass ValidateInternalClient.
	LocalAddr netip.Addr

	// RootDescURL is the router's root description on its IPv6 LAN
	// address, for example "http://[2001:db8:1::1]:5000/rootDesc.xml".
	// Empty means search for it by SSDP over IPv6.
	RootDescURL string

	// Interface is the name or index of the interface SSDP searches on
	// (the zone of ff02::c). Empty means the one the kernel routes ff02::c
	// through, which on a host with one LAN interface is that one.
	Interface string

	// CallTimeout bounds each SOAP call and description fetch. Zero means
	// DefaultCallTimeout.
	CallTimeout time.Duration
	// DiscoveryTimeout bounds one SSDP search. Zero means
	// DefaultDiscoveryTimeout.
	DiscoveryTimeout time.Duration

	// DialContext opens the TCP connections to the router. Nil means a
	// net.Dialer bound to LocalAddr. A connection it returns from any other
	// local address is closed and the request fails, before anything is
	// sent.
	DialContext func(ctx context.Context, network, address string) (net.Conn, error)
	// ListenPacket opens the UDP socket SSDP searches from; it is called
	// with ("udp6", "[LocalAddr]:0"). Nil means a zero net.ListenConfig.
	ListenPacket func(ctx context.Context, network, address string) (net.PacketConn, error)
}

// withDefaults returns cfg with every zero field filled in; the only place
// defaults are set.
func (cfg Config) withDefaults() Config {
	if cfg.CallTimeout == 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	if cfg.DiscoveryTimeout == 0 {
		cfg.DiscoveryTimeout = DefaultDiscoveryTimeout
	}
	if cfg.DialContext == nil {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: cfg.LocalAddr.AsSlice()}}
		cfg.DialContext = d.DialContext
	}
	if cfg.ListenPacket == nil {
		lc := &net.ListenConfig{}
		cfg.ListenPacket = lc.ListenPacket
	}
	return cfg
}

func (cfg Config) validate() error {
	if err := ValidateInternalClient(cfg.LocalAddr); err != nil {
		return fmt.Errorf("pinhole: invalid Config.LocalAddr %s: must be this host's global IPv6 address: %w", cfg.LocalAddr, err)
	}
	if cfg.CallTimeout < 0 {
		return fmt.Errorf("pinhole: invalid Config.CallTimeout %v: must not be negative", cfg.CallTimeout)
	}
	if cfg.DiscoveryTimeout < 0 {
		return fmt.Errorf("pinhole: invalid Config.DiscoveryTimeout %v: must not be negative", cfg.DiscoveryTimeout)
	}
	if cfg.RootDescURL != "" {
		if _, err := ipv6URL(cfg.RootDescURL); err != nil {
			return fmt.Errorf("pinhole: invalid Config.RootDescURL: %w", err)
		}
	}
	return nil
}

// firewallControl is the part of goupnp's WANIPv6FirewallControl1 the
// client uses, named after its methods so that it satisfies it as is.
type firewallControl interface {
	AddPinholeCtx(ctx context.Context, remoteHost string, remotePort uint16, internalClient string, internalPort uint16, protocol uint16, leaseTime uint32) (uint16, error)
	UpdatePinholeCtx(ctx context.Context, id uint16, leaseTime uint32) error
	DeletePinholeCtx(ctx context.Context, id uint16) error
	GetPinholePacketsCtx(ctx context.Context, id uint16) (uint32, error)
}

var _ firewallControl = (*internetgateway2.WANIPv6FirewallControl1)(nil)

// UPnPClient is a Client over UPnP. It finds the router on its first call,
// not in New, and again after a call the router did not answer. Safe for
// concurrent use.
type UPnPClient struct {
	cfg Config
	hc  *http.Client

	// mu guards svc: the router's service, nil until found or after it
	// stopped answering; and ids: the UniqueID of each pinhole OpenPinhole
	// opened, for PinholeHeld.
	mu  sync.Mutex
	svc firewallControl
	ids map[opening]uint16
}

var _ Client = (*UPnPClient)(nil)

// New returns a client for cfg. It sends nothing; an invalid cfg is an error
// naming the field.
func New(cfg Config) (*UPnPClient, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &UPnPClient{cfg: cfg, hc: newHTTPClient(cfg)}, nil
}

// Add implements Client. The pinhole admits any remote host and port
// (RemoteHost "" and RemotePort 0 on the wire).
func (c *UPnPClient) Add(ctx context.Context, p Pinhole) (uint16, error) {
	if err := p.Validate(); err != nil {
		return 0, err
	}
	var id uint16
	err := c.call(ctx, "AddPinhole", func(ctx context.Context, svc firewallControl) error {
		var err error
		id, err = svc.AddPinholeCtx(ctx, "", 0, p.InternalClient.String(), p.InternalPort, protocolNumber(p.Protocol), uint32(p.Lease/time.Second))
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("pinhole: add %s: %w", p, err)
	}
	return id, nil
}

// Update implements Client.
func (c *UPnPClient) Update(ctx context.Context, id uint16, lease time.Duration) error {
	if err := validateLease("lease", lease); err != nil {
		return fmt.Errorf("pinhole: update %d: %w", id, err)
	}
	err := c.call(ctx, "UpdatePinhole", func(ctx context.Context, svc firewallControl) error {
		return svc.UpdatePinholeCtx(ctx, id, uint32(lease/time.Second))
	})
	if err != nil {
		return fmt.Errorf("pinhole: update %d: %w", id, noSuchPinhole(err))
	}
	return nil
}

// Delete implements Client.
func (c *UPnPClient) Delete(ctx context.Context, id uint16) error {
	err := c.call(ctx, "DeletePinhole", func(ctx context.Context, svc firewallControl) error {
		return svc.DeletePinholeCtx(ctx, id)
	})
	if err = noSuchPinhole(err); errors.Is(err, ErrNoSuchPinhole) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("pinhole: delete %d: %w", id, err)
	}
	return nil
}

// Packets implements Client.
func (c *UPnPClient) Packets(ctx context.Context, id uint16) (uint32, error) {
	var n uint32
	err := c.call(ctx, "GetPinholePackets", func(ctx context.Context, svc firewallControl) error {
		var err error
		n, err = svc.GetPinholePacketsCtx(ctx, id)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("pinhole: packets of %d: %w", id, noSuchPinhole(err))
	}
	return n, nil
}

// call runs one action on the router's service, finding the router first if
// need be, bounded by CallTimeout. A router that did not answer is
// forgotten, so the next call finds it again (its address may have
// changed).
func (c *UPnPClient) call(ctx context.Context, action string, fn func(context.Context, firewallControl) error) error {
	svc, err := c.service(ctx)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	defer cancel()
	err = fn(cctx, svc)
	if err == nil {
		return nil
	}
	var fault *soap.SOAPFaultError
	if errors.As(err, &fault) {
		ue := &igd.UPnPError{
			Action:      action,
			Code:        fault.Detail.UPnPError.Errorcode,
			Description: fault.Detail.UPnPError.ErrorDescription,
			Err:         fault,
		}
		if ue.Description == "" {
			ue.Description = fault.FaultString
		}
		return ue
	}
	c.mu.Lock()
	if c.svc == svc {
		c.svc = nil
	}
	c.mu.Unlock()
	if ctxErr := cctx.Err(); ctxErr != nil {
		// goupnp formats transport errors with %v: keep the context's.
		return fmt.Errorf("%s: %w (%v)", action, ctxErr, err)
	}
	return fmt.Errorf("%s: %w", action, err)
}

// service returns the router's service, finding it if it is not known. Two
// concurrent first calls may both search; the last one found is kept.
func (c *UPnPClient) service(ctx context.Context) (firewallControl, error) {
	c.mu.Lock()
	svc := c.svc
	c.mu.Unlock()
	if svc != nil {
		return svc, nil
	}
	svc, err := c.find(ctx)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.svc = svc
	c.mu.Unlock()
	return svc, nil
}

// Codes of the WANIPv6FirewallControl:1 specification the client reads.
const (
	codeInvalidArgs = 402
	codeNoSuchEntry = 704
)

// noSuchPinhole turns the router's answer for an unknown UniqueID into an
// error matching ErrNoSuchPinhole. Only for actions whose one argument is
// the ID: there 402 Invalid Args can only mean the ID, which is how
// miniupnpd 2.3.1 answers (the specification says 704).
func noSuchPinhole(err error) error {
	switch igd.Code(err) {
	case codeNoSuchEntry, codeInvalidArgs:
		return fmt.Errorf("%w: %w", ErrNoSuchPinhole, err)
	}
	return err
}

// ipv6URL parses a description or control URL and checks that its host is
// an IPv6 literal: the request must arrive over IPv6.
func ipv6URL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("%q: %w", s, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("%q: must be an http URL", s)
	}
	a, err := netip.ParseAddr(u.Hostname())
	if err != nil || !a.Is6() || a.Is4In6() {
		return nil, fmt.Errorf("%q: host must be an IPv6 address, so that requests arrive over IPv6", s)
	}
	return u, nil
}
