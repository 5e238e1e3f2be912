package igd

import (
	"context"
	"errors"
	"fmt"
	"github.com/ccmkit/ccmkit/internal/igderr"
	"net/netip"
	"time"
)

// Protocol is the transport protocol of a port mapping, as the router names it.
type Protocol string

// The protocols a UPnP IGD maps. Routers accept nothing else; miniupnpd 2.3.1
// silently installs an unknown protocol such as SCTP as TCP, so callers must
// validate (see Mapping.Validate) before asking.
const (
	TCP Protocol = "TCP"
	UDP Protocol = "UDP"
)

// Valid reports whether p is TCP or UDP.
func (p Protocol) Valid() bool { return p == TCP || p == UDP }

// MaxDescriptionLen is the longest description, in bytes, that real routers
// store intact. miniupnpd keeps 64 bytes including its terminator and returns
// longer descriptions cut or mangled, so 63 bytes is the safe limit.
const MaxDescriptionLen = 63

// MaxLease is the longest lease IGD:2 routers store. miniupnpd stores a lease
// of 0 ("permanent") and any lease above it as exactly this value, so even a
// permanent mapping disappears after seven days unless it is renewed.
const MaxLease = 604800 * time.Second

// Mapping is one entry of a router's port-mapping table.
//
// The zero RemoteHost means the wildcard (any remote host), which is what
// almost every router supports and what this package sends by default.
type Mapping struct {
	// Protocol is TCP or UDP. Required.
	Protocol Protocol
	// ExternalPort is the port on the router's external address. Required (non-zero).
	ExternalPort uint16
	// InternalClient is the LAN host the router forwards to. Required, IPv4.
	InternalClient netip.Addr
	// InternalPort is the port on InternalClient. Required (non-zero) in a
	// mapping sent to a router. In a mapping read from a router, 0 means the
	// router did not say: miniupnpd 2.3.6 with the nftables backend answers
	// 0 for every mapping (miniupnpd issue 768). Compare it only when it is
	// non-zero; a re-add with the real port renews the mapping.
	InternalPort uint16
	// Description is free text stored with the mapping, at most
	// MaxDescriptionLen bytes. On a router it is the only record of who owns
	// a mapping.
	Description string
	// Lease is how long the router keeps the mapping; 0 means permanent
	// (which IGD:2 routers still cap at MaxLease). Leases are whole seconds.
	Lease time.Duration
	// RemoteHost restricts the mapping to one remote address; the zero value
	// is the wildcard.
	RemoteHost netip.Addr
	// Enabled reports whether the router forwards traffic for the mapping.
	// AddPortMapping always sends true.
	Enabled bool
}

// Key is what identifies a mapping in a router's table.
type Key struct {
	// Protocol is TCP or UDP.
	Protocol Protocol
	// ExternalPort is the port on the router's external address.
	ExternalPort uint16
}

// Key returns the table key of m.
func (m Mapping) Key() Key { return Key{Protocol: m.Protocol, ExternalPort: m.ExternalPort} }

// String formats k as "TCP/8080".
func (k Key) String() string { return fmt.Sprintf("%s/%d", k.Protocol, k.ExternalPort) }

// validate checks the fields of k the way Mapping.Validate does.
func (k Key) validate() error {
	switch {
	case !k.Protocol.Valid():
		return &igderr.FieldError{Field: "Protocol", Value: fmt.Sprintf("%q", k.Protocol), Reason: "must be TCP or UDP"}
	case k.ExternalPort == 0:
		return &igderr.FieldError{Field: "ExternalPort", Value: "0", Reason: "must be 1-65535"}
	}
	return nil
}

// String formats m for logs and error messages.
func (m Mapping) String() string {
	return fmt.Sprintf("%s -> %s:%d (%q, lease %s)", m.Key(), m.InternalClient, m.InternalPort, m.Description, m.Lease)
}

// Validate checks m before it is sent to a router: routers answer some bad
// values with confusing codes (an empty internal client is 501 on miniupnpd)
// and silently rewrite others (SCTP becomes TCP). The returned error is a
// error naming the field, its value and what is wrong with it, and matches
// ErrInvalidMapping.
func (m Mapping) Validate() error {
	if err := m.Key().validate(); err != nil {
		return err
	}
	switch {
	case m.InternalPort == 0:
		return &igderr.FieldError{Field: "InternalPort", Value: "0", Reason: "must be 1-65535"}
	case !m.InternalClient.IsValid():
		return &igderr.FieldError{Field: "InternalClient", Value: "<none>", Reason: "is required"}
	case !m.InternalClient.Unmap().Is4():
		return &igderr.FieldError{Field: "InternalClient", Value: m.InternalClient.String(), Reason: "must be an IPv4 address"}
	case m.InternalClient.Unmap().IsUnspecified():
		return &igderr.FieldError{Field: "InternalClient", Value: m.InternalClient.String(), Reason: "must be a host address"}
	case len(m.Description) > MaxDescriptionLen:
		return &igderr.FieldError{Field: "Description", Value: fmt.Sprintf("%q", m.Description), Reason: fmt.Sprintf("is %d bytes, routers keep at most %d", len(m.Description), MaxDescriptionLen)}
	case m.Lease < 0:
		return &igderr.FieldError{Field: "Lease", Value: m.Lease.String(), Reason: "must not be negative"}
	case m.Lease%time.Second != 0:
		return &igderr.FieldError{Field: "Lease", Value: m.Lease.String(), Reason: "must be whole seconds"}
	case m.RemoteHost.IsValid() && !m.RemoteHost.Unmap().Is4():
		return &igderr.FieldError{Field: "RemoteHost", Value: m.RemoteHost.String(), Reason: "must be an IPv4 address or unset"}
	}
	return nil
}

// Client manages the port mappings of one router.
//
// Every method takes a context first and returns when it is cancelled or its
// deadline passes. Implementations are safe for concurrent use.
type Client interface {
	// ExternalIP returns the router's address on its WAN side. It may be a
	// non-public address (see IsPublic) when the router is itself behind NAT.
	ExternalIP(ctx context.Context) (netip.Addr, error)

	// AddPortMapping creates m. When the same internal client already holds
	// the key, the router takes it as a re-add: with another internal port
	// the mapping is replaced (internal port, description, lease); with the
	// same internal port miniupnpd only renews the lease and keeps the
	// description first stored, so a new description needs a delete first.
	// It returns m as sent, except that Lease is 0 when the router only takes
	// permanent leases; read the mapping back (GetPortMapping) for what the
	// router stored. A key held by another internal client gives an error
	// matching ErrConflict; invalid input gives ErrInvalidMapping and
	// reaches no router.
	AddPortMapping(ctx context.Context, m Mapping) (Mapping, error)

	// DeletePortMapping removes the mapping at (proto, externalPort). It is
	// idempotent: deleting a mapping that does not exist succeeds.
	DeletePortMapping(ctx context.Context, proto Protocol, externalPort uint16) error

	// GetPortMapping returns the mapping at (proto, externalPort), or an error
	// matching ErrNoSuchEntry.
	GetPortMapping(ctx context.Context, proto Protocol, externalPort uint16) (Mapping, error)

	// LocalAddr returns this host's own address toward the router: the only
	// internal client a router in secure mode lets this host map to.
	LocalAddr(ctx context.Context) (netip.Addr, error)
}

// A GuardedClient is a Client whose router keeps, with each mapping it adds,
// a token derived from an owner (PCP's nonce, igd/pcp.Backend) in place of
// the mapping's description, and refuses to delete the mapping for another
// owner. A caller that owns mappings (the load balancer) adds and deletes
// its own through AddFor and DeleteFor when its Client is one, and still
// reads through the Client: a read shows the token as the description.
type GuardedClient interface {
	Client
	// AddFor adds m for owner only where m's key is free or already
	// forwards to m's internal client and port: when another mapping holds
	// the key it fails with an error matching ErrConflict and leaves that
	// mapping alone; when the router's rules refuse the key, with one
	// matching ErrNotAuthorized. It returns m as granted (Lease is what the
	// router granted).
	AddFor(ctx context.Context, owner string, m Mapping) (Mapping, error)
	// DeleteFor removes m, a mapping as read from the router (its internal
	// client and port name it), for owner. When the router holds it for
	// another owner now it refuses with an error matching ErrNotAuthorized
	// and keeps it; when it holds nothing there it succeeds. A mapping the
	// guard cannot name (igd/pcp.Backend: one without a token, or of
	// internal port 0) is deleted without it, on the caller's read.
	DeleteFor(ctx context.Context, owner string, m Mapping) error
	// OwnedBy reports whether m, as read, carries owner's token: AddFor
	// made it for owner (or a host that read the token copied it).
	OwnedBy(owner string, m Mapping) bool
}

// The capabilities below are optional: a Client declares one by
// implementing it, and a caller asks by type assertion. Only igd/pcp.Backend
// implements them today.

// A Reader is a Client that says whether it can read its router's table at
// all. Reads is fixed for the client's life, so a caller may ask it once.
// When it is false, GetPortMapping, ListPortMappings and the plain
// AddPortMapping and DeletePortMapping return an error matching
// ErrNotSupported; a GuardedClient that cannot read still adds and deletes
// through AddFor and DeleteFor, whose every write the router conditions or
// guards, so that no write needs a read first (igd/pcp.Backend without
// UPnP). A Client that does not implement Reader reads.
type Reader interface {
	// Reads reports whether the client reads the router's table.
	Reads() bool
}

// A SelfOnlyReporter is a Client whose router may come to map only to this
// host's own address (LocalAddr), as a router in secure mode does: a
// caller that maps to other hosts then maps to this one. igd/pcp.Backend
// reports it once the router refused a mapping for another host
// (THIRD_PARTY).
type SelfOnlyReporter interface {
	// SelfOnly reports whether the router maps only to this host now. Once
	// true it stays true for the client's life.
	SelfOnly() bool
}

// A MappedChecker is a Client that, without reading the router's table,
// can ask it whether it holds a mapping to an internal address and port
// (igd/pcp.Backend: a PCP delete with a random nonce, which the router
// refuses while such a mapping exists). A caller that cannot read asks it
// to find out whether the router lost a mapping it wrote.
type MappedChecker interface {
	// Mapped reports whether the router holds a mapping of proto to
	// internalAddr:internalPort, and changes nothing it holds. An error
	// means the router did not say.
	Mapped(ctx context.Context, proto Protocol, internalAddr netip.Addr, internalPort uint16) (bool, error)
}

// PCPDescriptionPrefix starts the description a router (miniupnpd) stores
// for a mapping made through PCP, as a GuardedClient's AddFor makes them
// (igd/pcp.Backend): the mapping's nonce follows, in hex. Whoever reads the
// nonce can delete or replace the mapping over PCP, so a message that
// quotes such a description should leave the rest of it out.
const PCPDescriptionPrefix = "PCP MAP "

// PortRange is an inclusive range of external ports.
type PortRange struct {
	// First and Last bound the range; First <= Last.
	First, Last uint16
}

// AllPorts is every external port (0 included: some routers store a
// wildcard mapping there).
var AllPorts = PortRange{First: 0, Last: 65535}

// Lister is implemented by clients that can read many mappings of a router's
// table in one call (WANIPConnection:2's GetListOfPortMappings). It is
// optional: a Client that cannot list (an IGD:1 or WANPPPConnection:1 router,
// which can only be read entry by entry, a router that refuses the list
// action, or a backend with no table to read) either does not implement it
// or returns an error matching ErrNotSupported, and callers read the keys
// they care about with GetPortMapping instead. That error is cheap to get
// again: UPnPClient remembers a router's refusal and answers later calls
// without asking it, so callers need not remember it themselves.
type Lister interface {
	// ListPortMappings returns every mapping of proto whose external port
	// lies in ports, each once, in no particular order. Its cost grows with
	// the number of mappings in the range, not with the whole table.
	ListPortMappings(ctx context.Context, proto Protocol, ports PortRange) ([]Mapping, error)
}

// ReadTable returns every mapping of c's router, TCP and UDP: by listing
// when c is a Lister that can list, otherwise (its listing fails with
// ErrNotSupported) by walking the table entry by entry when c is a
// *UPnPClient (or embeds one). It returns an error matching ErrNotSupported
// when c can do neither. It is the way to read a whole table; Lister reads
// one protocol's range.
func ReadTable(ctx context.Context, c Client) ([]Mapping, error) {
	if l, ok := c.(Lister); ok {
		var out []Mapping
		var err error
		for _, proto := range []Protocol{TCP, UDP} {
			var ms []Mapping
			if ms, err = l.ListPortMappings(ctx, proto, AllPorts); err != nil {
				break
			}
			out = append(out, ms...)
		}
		if err == nil {
			return out, nil
		}
		if !errors.Is(err, ErrNotSupported) {
			return nil, err
		}
	}
	if w, ok := c.(interface {
		walkPortMappings(context.Context) ([]Mapping, error)
	}); ok {
		return w.walkPortMappings(ctx)
	}
	return nil, fmt.Errorf("igd: read table: %w", ErrNotSupported)
}
