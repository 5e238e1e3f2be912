package pcp

import (
	"bytes"
	"context"
	cryptorand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/internal/pcpwire"
)

// MinSecretLen is the shortest secret NewBackend takes.
const MinSecretLen = 32

// Backend is an igd.GuardedClient for a router that speaks PCP: it adds and
// deletes an owner's mappings through PCP with the owner's nonce, derived
// from the owner and the mapping's key under the secret (so every process
// that holds the secret derives the same one). With a UPnP client (a router
// that speaks both, such as miniupnpd with enable_natpmp=yes) it reads,
// asks the external IP and makes plain adds and deletes through it;
// without, it cannot read (Reads is false: GetPortMapping, ListPortMappings
// and the plain adds and deletes return an error matching
// igd.ErrNotSupported), asks the external IP with NAT-PMP's public address
// request and takes this host's address from its PCP socket.
//
// What the router then enforces: a PCP delete removes only a mapping to the
// internal address and port that carries the nonce (with another it answers
// NOT_AUTHORIZED); a mapping that is gone, or that another host's took the
// key of, is never deleted by DeleteFor. What it does not: UPnP ignores
// nonces (any LAN host's DeletePortMapping removes a PCP mapping), the
// description that carries the nonce is readable through UPnP (a host that
// reads it can use it), a MAP for the same internal address and port
// replaces the mapping whatever its nonce, and PREFER_FAILURE is enforced by
// this client (see the package documentation). Where it reads, ownership is
// still proved by a read (OwnedBy), and PCP makes the delete that follows
// it safe.
type Backend struct {
	cfg BackendConfig

	mu        sync.Mutex
	upnpUntil time.Time // with FallBack: adds go through UPnP until then
	selfOnly  bool      // without FallBack: the router refused THIRD_PARTY
}

var (
	_ igd.GuardedClient    = (*Backend)(nil)
	_ igd.Lister           = (*Backend)(nil)
	_ igd.Reader           = (*Backend)(nil)
	_ igd.SelfOnlyReporter = (*Backend)(nil)
	_ igd.MappedChecker    = (*Backend)(nil)
)

// fallBackFor is how long a Backend with BackendConfig.FallBack writes
// through UPnP, without trying PCP, after the router did not take a PCP
// request.
const fallBackFor = time.Minute

// BackendConfig configures a Backend.
type BackendConfig struct {
	// UPnP reads the router, and makes the plain adds and deletes. Nil:
	// the router is written through PCP only and never read.
	UPnP igd.Client
	// PCP writes an owner's mappings. Required.
	PCP *Client
	// Secret derives the nonces (HMAC-SHA256 of owner and key): at least MinSecretLen bytes,
	// the same in every process of one cluster. A new secret makes every
	// mapping made under the old one another owner's: they stay until
	// their lease ends and are then mapped again.
	Secret []byte
	// FallBack makes AddFor write through UPnP, with the caller's
	// description, when the router does not take the PCP request: nothing
	// answers on its PCP port (ICMP port unreachable, or no answer within
	// the PCP client's CallTimeout), it refuses PCP version 2, or it
	// refuses THIRD_PARTY. AddFor logs it, and writes through UPnP for
	// a minute; DeleteFor then deletes that mapping through UPnP. False
	// returns those errors. It needs UPnP.
	FallBack bool
}

// NewBackend returns a Backend configured by cfg. It does no I/O.
func NewBackend(cfg BackendConfig) (*Backend, error) {
	switch {
	case cfg.PCP == nil:
		return nil, errors.New("pcp: backend: BackendConfig.PCP is required")
	case cfg.FallBack && cfg.UPnP == nil:
		return nil, errors.New("pcp: backend: BackendConfig.FallBack needs BackendConfig.UPnP")
	case len(cfg.Secret) < MinSecretLen:
		return nil, fmt.Errorf("pcp: backend: BackendConfig.Secret is %d bytes, must be at least %d", len(cfg.Secret), MinSecretLen)
	}
	cfg.Secret = bytes.Clone(cfg.Secret)
	return &Backend{cfg: cfg}, nil
}

// Reads reports whether the backend reads the router (it has a UPnP
// client).
func (b *Backend) Reads() bool { return b.cfg.UPnP != nil }

// errCannotRead is what the reads and the plain writes of a Backend
// without UPnP return.
var errCannotRead = fmt.Errorf("pcp: backend without UPnP: %w", igd.ErrNotSupported)

// ExternalIP asks the UPnP client, or else the PCP server (NAT-PMP); a
// server without an external address gives an error matching
// igd.ErrInvalidExternalIP.
func (b *Backend) ExternalIP(ctx context.Context) (netip.Addr, error) {
	if b.cfg.UPnP != nil {
		return b.cfg.UPnP.ExternalIP(ctx)
	}
	a, err := b.cfg.PCP.wire().ExternalAddr(ctx)
	var re *pcpwire.ResultError
	if errors.As(err, &re) {
		return netip.Addr{}, fmt.Errorf("%w: %w", igd.ErrInvalidExternalIP, err)
	}
	return a, err
}

// LocalAddr asks the UPnP client, or else returns the address the PCP
// client sends from.
func (b *Backend) LocalAddr(ctx context.Context) (netip.Addr, error) {
	if b.cfg.UPnP != nil {
		return b.cfg.UPnP.LocalAddr(ctx)
	}
	return b.cfg.PCP.wire().LocalAddr(ctx)
}

// AddPortMapping is the UPnP client's; without one it is not supported (a
// PCP mapping needs an owner: AddFor).
func (b *Backend) AddPortMapping(ctx context.Context, m igd.Mapping) (igd.Mapping, error) {
	if b.cfg.UPnP == nil {
		return igd.Mapping{}, errCannotRead
	}
	return b.cfg.UPnP.AddPortMapping(ctx, m)
}

// DeletePortMapping is the UPnP client's; without one it is not supported.
func (b *Backend) DeletePortMapping(ctx context.Context, proto igd.Protocol, externalPort uint16) error {
	if b.cfg.UPnP == nil {
		return errCannotRead
	}
	return b.cfg.UPnP.DeletePortMapping(ctx, proto, externalPort)
}

// GetPortMapping is the UPnP client's; without one it is not supported.
func (b *Backend) GetPortMapping(ctx context.Context, proto igd.Protocol, externalPort uint16) (igd.Mapping, error) {
	if b.cfg.UPnP == nil {
		return igd.Mapping{}, errCannotRead
	}
	return b.cfg.UPnP.GetPortMapping(ctx, proto, externalPort)
}

// ListPortMappings lists through the UPnP client when it lists, else
// returns an error matching igd.ErrNotSupported.
func (b *Backend) ListPortMappings(ctx context.Context, proto igd.Protocol, ports igd.PortRange) ([]igd.Mapping, error) {
	if l, ok := b.cfg.UPnP.(igd.Lister); ok {
		return l.ListPortMappings(ctx, proto, ports)
	}
	return nil, fmt.Errorf("pcp: backend: list: %w", igd.ErrNotSupported)
}

// AddFor maps m through PCP for owner, with PREFER_FAILURE and THIRD_PARTY
// when m's internal client is not this host. A lease of 0 asks for
// igd.MaxLease (PCP has no permanent mappings; the router clamps it). It
// returns m with the lease granted. Another mapping at the key gives an
// error matching igd.ErrConflict and igd.ErrPortUnavailable, a port the
// router's permission rules refuse one matching igd.ErrNotAuthorized and
// igd.ErrPortUnavailable (see notProvided); a router that refuses
// THIRD_PARTY gives one matching igd.ErrThirdPartyRefused. Every refusal
// the server answers matches igd.ErrRefused.
func (b *Backend) AddFor(ctx context.Context, owner string, m igd.Mapping) (igd.Mapping, error) {
	if err := m.Validate(); err != nil {
		return igd.Mapping{}, err
	}
	if b.fallingBack() {
		return b.cfg.UPnP.AddPortMapping(ctx, m)
	}
	lifetime := m.Lease
	if lifetime == 0 {
		lifetime = igd.MaxLease
	}
	res, err := b.cfg.PCP.wire().Map(ctx, pcpwire.MapRequest{
		Protocol: m.Protocol, InternalAddr: m.InternalClient, InternalPort: m.InternalPort,
		ExternalPort: m.ExternalPort, Lifetime: lifetime, PreferFailure: true,
		Nonce: pcpwire.NonceFor(b.cfg.Secret, owner, m.Key()),
	})
	if b.fallBack(ctx, "mapping; writing", m, err) {
		return b.cfg.UPnP.AddPortMapping(ctx, m)
	}
	switch {
	case errors.Is(err, pcpwire.ErrCannotProvideExternal):
		return igd.Mapping{}, b.notProvided(ctx, m, err)
	case errors.Is(err, pcpwire.ErrUnsupportedOption):
		b.mu.Lock()
		first := !b.selfOnly
		b.selfOnly = true
		b.mu.Unlock()
		if first {
			klog.FromContext(ctx).Info("Router refuses PCP THIRD_PARTY; mapping to this host only", "key", m.Key(), "internalClient", m.InternalClient, "err", err)
		}
		return igd.Mapping{}, fmt.Errorf("pcp: map %s to %s: the router refuses THIRD_PARTY (miniupnpd: pcp_allow_thirdparty=yes allows it); map to this host only: %w", m.Key(), m.InternalClient, err)
	case err != nil:
		return igd.Mapping{}, err
	}
	m.Lease = res.Lifetime
	return m, nil
}

// notProvided tells apart the two reasons miniupnpd 2.3.1 has not to give
// m's external port to a MAP with PREFER_FAILURE (err matches
// pcpwire.ErrCannotProvideExternal): another mapping holds the port (an error
// matching igd.ErrConflict), or its permission rules (the allow and deny
// lines of miniupnpd.conf) refuse it (igd.ErrNotAuthorized, as UPnP's 606).
// Either error still matches pcpwire.ErrCannotProvideExternal (and so
// igd.ErrPortUnavailable).
//
// Built with CHECK_PORTINUSE (Debian's is), miniupnpd answers a port
// another mapping holds by mapping the next free one, which Map undoes
// (an error of the client's, no pcpwire.ResultError): held. The server's own
// CANNOT_PROVIDE_EXTERNAL comes from its permission check, which it runs
// first; a build without CHECK_PORTINUSE answers it to a held port too. So
// the server's answer is read again through UPnP when the backend has it:
// no mapping at the key means the rules refused it. Without UPnP it is taken
// as the rules' refusal, as the CHECK_PORTINUSE build means it (the load
// balancer's sweep of its own old mappings still runs on it).
func (b *Backend) notProvided(ctx context.Context, m igd.Mapping, err error) error {
	var re *pcpwire.ResultError
	if !errors.As(err, &re) || re.Code != pcpwire.CannotProvideExternal {
		return fmt.Errorf("%w: %w", igd.ErrConflict, err)
	}
	refused := fmt.Errorf("%w: %w (the router's permission rules refuse external port %s)", igd.ErrNotAuthorized, err, m.Key())
	if b.cfg.UPnP == nil {
		return refused
	}
	_, rerr := b.cfg.UPnP.GetPortMapping(ctx, m.Protocol, m.ExternalPort)
	switch {
	case errors.Is(rerr, igd.ErrNoSuchEntry):
		return refused
	case rerr != nil:
		return fmt.Errorf("%w: %w (reading the port to tell a held port from a refused one failed: %w)", igd.ErrConflict, err, rerr)
	}
	return fmt.Errorf("%w: %w", igd.ErrConflict, err)
}

// SelfOnly reports whether the router refused a mapping for another host
// (THIRD_PARTY) to a Backend without FallBack: like a router in secure mode
// it maps only to this host from then on, until the process restarts. The
// load balancer then targets its own node.
func (b *Backend) SelfOnly() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.selfOnly
}

// fallingBack reports whether adds go through UPnP now.
func (b *Backend) fallingBack() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return time.Now().Before(b.upnpUntil)
}

// fallBack reports whether the PCP request for m failed with err because
// the router does not take it (notTaken) and the backend falls back to UPnP;
// then it writes through UPnP for fallBackFor, and logs what (the request,
// and what is done instead).
func (b *Backend) fallBack(ctx context.Context, what string, m igd.Mapping, err error) bool {
	if err == nil || !b.cfg.FallBack || ctx.Err() != nil || !notTaken(err) {
		return false
	}
	b.mu.Lock()
	b.upnpUntil = time.Now().Add(fallBackFor)
	b.mu.Unlock()
	klog.FromContext(ctx).Info("Router did not take a PCP "+what+" through UPnP", "key", m.Key(), "internalClient", m.InternalClient, "for", fallBackFor, "err", err)
	return true
}

// notTaken reports whether a Map failed because the router does not do what
// it was asked over PCP (see BackendConfig.FallBack).
func notTaken(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, pcpwire.ErrUnsupportedVersion) || errors.Is(err, pcpwire.ErrUnsupportedOption)
}

// DeleteFor removes m for owner. A mapping PCP made (its description carries
// a nonce) is deleted through PCP with owner's nonce: the router refuses
// (an error matching igd.ErrNotAuthorized) when the mapping to m's internal
// address and port carries another, and a router holding none answers
// NO_RESOURCES, which counts as deleted. Any other mapping (made through
// UPnP, by an earlier version), and one whose internal port the caller does
// not know (miniupnpd 2.3.6 with nftables reports 0, and a PCP delete names
// the mapping by its internal port), is deleted through UPnP, on the proof
// of the caller's read alone; so is a mapping PCP made, with FallBack, when
// the router does not take the PCP delete. Without UPnP every delete goes
// through PCP.
func (b *Backend) DeleteFor(ctx context.Context, owner string, m igd.Mapping) error {
	if b.cfg.UPnP != nil && (!strings.HasPrefix(m.Description, descriptionPrefix) || m.InternalPort == 0) {
		return b.cfg.UPnP.DeletePortMapping(ctx, m.Protocol, m.ExternalPort)
	}
	err := b.cfg.PCP.wire().Delete(ctx, m.Protocol, m.InternalClient, m.InternalPort, pcpwire.NonceFor(b.cfg.Secret, owner, m.Key()))
	// As AddFor writes: else a mapping PCP made could not be deleted (nor
	// moved) before its lease ends.
	if b.fallBack(ctx, "delete; deleting", m, err) {
		return b.cfg.UPnP.DeletePortMapping(ctx, m.Protocol, m.ExternalPort)
	}
	switch {
	case errors.Is(err, pcpwire.ErrNoResources):
		return nil
	case errors.Is(err, pcpwire.ErrNotAuthorized):
		return fmt.Errorf("%w: %w", igd.ErrNotAuthorized, err)
	}
	return err
}

// Mapped reports whether the router holds a mapping of proto to
// internalAddr:internalPort, without changing it and without UPnP: it sends
// a PCP delete carrying a random nonce, which the router refuses
// (NOT_AUTHORIZED) when such a mapping is there and answers NO_RESOURCES
// when none is (miniupnpd's DeletePCPMap). A router that deletes it anyway
// (SUCCESS: it ignores nonces, against RFC 6887 §11.3) makes the answer
// false: the mapping is gone now. A client that cannot read asks it to
// check whether the router lost a mapping it wrote.
func (b *Backend) Mapped(ctx context.Context, proto igd.Protocol, internalAddr netip.Addr, internalPort uint16) (bool, error) {
	var nonce [12]byte
	_, _ = cryptorand.Read(nonce[:]) // never fails (crypto/rand)
	err := b.cfg.PCP.wire().Delete(ctx, proto, internalAddr, internalPort, nonce)
	switch {
	case errors.Is(err, pcpwire.ErrNotAuthorized):
		return true, nil
	case err == nil, errors.Is(err, pcpwire.ErrNoResources):
		return false, nil
	}
	return false, fmt.Errorf("pcp: is %s to %s:%d mapped: %w", proto, internalAddr, internalPort, err)
}

// OwnedBy reports whether m's description is the one the router stores for
// a mapping AddFor made for owner at m's key: "PCP MAP " and the nonce's
// three 32-bit words, each as 8 hex digits in the router's byte order
// (either order is taken).
func (b *Backend) OwnedBy(owner string, m igd.Mapping) bool {
	if !strings.HasPrefix(m.Description, descriptionPrefix) {
		return false
	}
	n := pcpwire.NonceFor(b.cfg.Secret, owner, m.Key())
	return m.Description == pcpwire.Description(n, binary.LittleEndian) || m.Description == pcpwire.Description(n, binary.BigEndian)
}

const descriptionPrefix = igd.PCPDescriptionPrefix
