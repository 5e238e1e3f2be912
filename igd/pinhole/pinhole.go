package pinhole

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/ccmkit/ccmkit/igd"
)

// Bounds the WANIPv6FirewallControl:1 specification puts on a lease, which
// miniupnpd 2.3.1 enforces with 402 Invalid Args.
const (
	MinLease = time.Second
	MaxLease = 86400 * time.Second
)

// Errors callers branch on. Router refusals are *igd.UPnPError values
// carrying the code; a 606 matches igd.ErrNotAuthorized.
var (
	// ErrNoSuchPinhole: the router holds no pinhole with that UniqueID (it
	// expired, was deleted, or the router rebooted). The specification's
	// answer is 704 NoSuchEntry; miniupnpd 2.3.1 answers 402 Invalid Args.
	ErrNoSuchPinhole = errors.New("pinhole: no such pinhole")
	// ErrInvalidPinhole: an argument fails validation before any request
	// is sent. The error names the field.
	ErrInvalidPinhole = errors.New("pinhole: invalid pinhole")
)

// Pinhole is one opening in the router's IPv6 firewall: from any remote host
// and port to InternalClient:InternalPort over Protocol, for Lease.
type Pinhole struct {
	// InternalClient is the host the pinhole lets through to: a global
	// unicast IPv6 address (not a ULA, link-local, multicast or
	// IPv4-mapped address), with no zone. It is sent in canonical form
	// (RFC 5952), the form miniupnpd compares the caller's address in.
	InternalClient netip.Addr
	// InternalPort is the port on InternalClient, 1..65535. miniupnpd
	// refuses ports below 1024 (606).
	InternalPort uint16
	// Protocol is igd.TCP or igd.UDP.
	Protocol igd.Protocol
	// Lease is how long the pinhole stays open unless renewed: whole
	// seconds from MinLease to MaxLease.
	Lease time.Duration
}

// String formats the pinhole as "TCP [2001:db8::1]:8443".
func (p Pinhole) String() string {
	return fmt.Sprintf("%s %s", p.Protocol, netip.AddrPortFrom(p.InternalClient, p.InternalPort))
}

// Validate returns an error matching ErrInvalidPinhole that names the first
// field whose value no router accepts, or nil.
func (p Pinhole) Validate() error {
	if err := ValidateInternalClient(p.InternalClient); err != nil {
		return err
	}
	if p.InternalPort < 1 {
		return fmt.Errorf("%w: Pinhole.InternalPort %d: must be 1..65535", ErrInvalidPinhole, p.InternalPort)
	}
	if !p.Protocol.Valid() {
		return fmt.Errorf("%w: Pinhole.Protocol %q: must be TCP or UDP", ErrInvalidPinhole, p.Protocol)
	}
	return validateLease("Pinhole.Lease", p.Lease)
}

// GlobalAddrs returns the addresses of addrs a pinhole can let through to
// (ValidateInternalClient passes), each once, in the order of addrs: of a
// host's addresses, those a pinhole to it may name.
func GlobalAddrs(addrs []netip.Addr) []netip.Addr {
	var out []netip.Addr
	for _, a := range addrs {
		if ValidateInternalClient(a) == nil && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// ValidateInternalClient returns an error matching ErrInvalidPinhole unless
// a is an address a pinhole can let through to: a global unicast IPv6
// address, not a ULA (fc00::/7), with no zone.
func ValidateInternalClient(a netip.Addr) error {
	var why string
	switch {
	case !a.IsValid():
		why = "unset"
	case a.Is4() || a.Is4In6():
		why = "an IPv4 address; pinholes are IPv6 only"
	case a.Zone() != "":
		why = "has a zone; must be a global address"
	case a.IsLinkLocalUnicast():
		why = "link-local"
	case a.IsMulticast():
		why = "multicast"
	case a.IsPrivate():
		why = "a unique local address (fc00::/7), not reachable from the internet"
	case !a.IsGlobalUnicast():
		why = "not a global unicast address"
	default:
		return nil
	}
	return fmt.Errorf("%w: Pinhole.InternalClient %s: %s", ErrInvalidPinhole, a, why)
}

func validateLease(field string, d time.Duration) error {
	if d < MinLease || d > MaxLease || d%time.Second != 0 {
		return fmt.Errorf("%w: %s %v: must be whole seconds from %v to %v", ErrInvalidPinhole, field, d, MinLease, MaxLease)
	}
	return nil
}

// Client opens, renews and closes pinholes. Every method sends one request
// to the router. UPnPClient implements it; fake.Router serves the same
// service for tests.
type Client interface {
	// Add opens p and returns the router's UniqueID for it. Adding a
	// pinhole the router already holds (same internal client, port and
	// protocol) renews it to p.Lease and returns the same ID, so a client
	// that lost the ID recovers it this way. p is validated first.
	Add(ctx context.Context, p Pinhole) (uint16, error)
	// Update renews pinhole id to lease from now. ErrNoSuchPinhole when
	// the router holds no such pinhole: add it again. After a router
	// reboot an old ID may name another pinhole of this host (see the
	// package documentation): Add renews safely.
	Update(ctx context.Context, id uint16, lease time.Duration) error
	// Delete closes pinhole id. A pinhole the router no longer holds is
	// already closed: Delete returns nil.
	Delete(ctx context.Context, id uint16) error
	// Packets returns how many packets went through pinhole id, and
	// ErrNoSuchPinhole when the router holds no such pinhole: the one read
	// that proves a pinhole is still there.
	Packets(ctx context.Context, id uint16) (uint32, error)
}

// protocolNumber is the IANA protocol number the service takes.
func protocolNumber(p igd.Protocol) uint16 {
	if p == igd.UDP {
		return 17
	}
	return 6
}
