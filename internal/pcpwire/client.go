package pcpwire

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/internal/hostinfo"
	"github.com/ccmkit/ccmkit/internal/igderr"
	"github.com/ccmkit/ccmkit/internal/igdmetrics"
)

// Port is the UDP port PCP servers listen on (RFC 6887 §19.1).
const Port = 5351

// DefaultCallTimeout bounds one Map or Delete, retransmissions included,
// when Config.CallTimeout is zero. A router on the LAN answers in
// milliseconds; five seconds leaves room for five sends (see
// initialRT) and still lets a controller move on quickly when nothing
// answers.
const DefaultCallTimeout = 5 * time.Second

// Retransmission (RFC 6887 §8.1.1) with LAN bounds. The RFC's IRT of 3 s
// and MRT of 1024 s are meant for any path to any server; the server here is
// the host's own gateway, a LAN hop away, that answers in a few
// milliseconds (miniupnpd is single-threaded, so a busy one may take a few
// hundred). A first retransmission after 250 ms recovers a lost datagram
// quickly without doubling the load of a router that is merely slow, and
// the interval doubles from there up to 2 s. The ±10% jitter of the RFC is
// kept so that many clients do not retransmit in step after a router
// restart. The call's context (and CallTimeout) ends the sequence: MRC and
// MRD are not used.
const (
	initialRT = 250 * time.Millisecond
	maxRT     = 2 * time.Second
)

// Config configures a Client. It is pcp.Config field for field, so that
// pcp converts one to the other (a field added to one and not the other
// stops that conversion compiling); pcp.Config documents each field. The
// zero value finds the server at the default gateway.
type Config struct {
	// Server is the PCP server; zero: the default gateway on Port.
	Server netip.AddrPort
	// Gateway returns the default gateway; nil: hostinfo.System's, or
	// with IPv6 the IPv6 default router.
	Gateway func(ctx context.Context) (netip.Addr, error)
	// IPv6 makes a nil Gateway the IPv6 default router's.
	IPv6 bool
	// CallTimeout bounds one call; zero: DefaultCallTimeout.
	CallTimeout time.Duration
	// DialContext makes each call's UDP socket; nil: a zero net.Dialer.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
	// ListenPacket opens ListenAnnounce's socket; nil: SO_REUSEADDR.
	ListenPacket func(ctx context.Context, network, addr string) (net.PacketConn, error)
}

// withDefaults returns cfg with every zero field filled in. This is the only
// place defaults are set.
func (cfg Config) withDefaults() Config {
	switch {
	case cfg.Gateway == nil && cfg.IPv6:
		cfg.Gateway = defaultRouter6
	case cfg.Gateway == nil:
		cfg.Gateway = hostinfo.System{}.DefaultGateway
	}
	if cfg.CallTimeout == 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	if cfg.DialContext == nil {
		cfg.DialContext = (&net.Dialer{}).DialContext
	}
	if cfg.ListenPacket == nil {
		lc := &net.ListenConfig{Control: reuseAddr}
		cfg.ListenPacket = lc.ListenPacket
	}
	return cfg
}

func (cfg Config) validate() error {
	switch {
	case cfg.Server.IsValid() && !unicast(cfg.Server.Addr().Unmap()):
		return fmt.Errorf("pcp: invalid Config.Server %s: must be a unicast IPv4 or IPv6 address", cfg.Server)
	case cfg.Server.IsValid() && cfg.IPv6 && !cfg.Server.Addr().Is6():
		return fmt.Errorf("pcp: invalid Config.Server %s: must be an IPv6 address with Config.IPv6", cfg.Server)
	case cfg.Server.IsValid() && cfg.Server.Port() == 0:
		return fmt.Errorf("pcp: invalid Config.Server %s: port must not be 0 (PCP is %d)", cfg.Server, Port)
	case cfg.CallTimeout < 0:
		return fmt.Errorf("pcp: invalid Config.CallTimeout %s: must not be negative", cfg.CallTimeout)
	}
	return nil
}

// unicast reports whether a can be a server's or a host's address: not
// unspecified, multicast or broadcast.
func unicast(a netip.Addr) bool {
	return a.IsValid() && !a.IsUnspecified() && !a.IsMulticast() && a != netip.AddrFrom4([4]byte{255, 255, 255, 255})
}

// Client speaks PCP (RFC 6887) MAP to one server, over IPv4 or IPv6 as the
// server's address is: an IPv4 server maps IPv4 addresses (NAT), an IPv6
// server opens IPv6 pinholes (no NAT: the external address and port are
// the internal ones). It is safe for concurrent use. pcp.Client is a
// defined type over it.
type Client struct {
	cfg      Config
	restarts chan struct{}

	mu    sync.Mutex
	epoch epochState // what the last answer said
	// asked is what the last answer to one of this client's own PCP
	// requests said: never an ANNOUNCE, which anyone can send.
	asked epochState
	// natpmpEpoch is what the last NAT-PMP answer (ExternalAddr) said:
	// compared with NAT-PMP answers only, in case a server counts them
	// from another origin.
	natpmpEpoch epochState
}

// epochState is what the client last heard from a server (RFC 6887 §8.5).
type epochState struct {
	server netip.Addr // zero before the first answer
	epoch  uint32     // the server's Epoch Time then
	local  time.Time  // this host's time then (monotonic)
}

// NewClient returns a client for cfg. It does no I/O.
func NewClient(cfg Config) (*Client, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Client{cfg: cfg.withDefaults(), restarts: make(chan struct{}, 1)}, nil
}

// Restarts returns a channel that receives when the client detects that the
// server lost its state: an answer's Epoch Time went back or advanced much
// less than this host's clock (RFC 6887 §8.5), or ListenAnnounce received
// an ANNOUNCE. A load balancer waits on it and then maps everything again.
// Detections that come while a value is pending are merged into it.
func (c *Client) Restarts() <-chan struct{} { return c.restarts }

// MapRequest asks for one mapping.
type MapRequest struct {
	// Protocol is igd.TCP or igd.UDP. Required.
	Protocol igd.Protocol
	// InternalAddr is the LAN host the mapping forwards to, of the
	// server's family (IPv4 or IPv6, without a zone). The zero value, or
	// this host's own address toward the server, maps to this host;
	// another address is sent in a THIRD_PARTY option, which the server
	// may refuse (ErrUnsupportedOption).
	InternalAddr netip.Addr
	// InternalPort is the port on InternalAddr. Required (non-zero).
	InternalPort uint16
	// ExternalPort is the suggested external port; 0 lets the server pick.
	ExternalPort uint16
	// Lifetime is the requested lifetime, at least one second; fractions
	// of a second are dropped. The server may grant another (miniupnpd
	// clamps it to its [min_lifetime, max_lifetime]).
	Lifetime time.Duration
	// PreferFailure sends the PREFER_FAILURE option: the server must map
	// exactly ExternalPort or fail with ErrCannotProvideExternal, rather
	// than pick another port. It needs a non-zero ExternalPort. A server
	// that ignores the option and grants another port (miniupnpd 2.3.1
	// built with CHECK_PORTINUSE does, when another mapping holds the
	// port) gets its mapping deleted again by Map, which then returns an
	// error matching ErrCannotProvideExternal.
	PreferFailure bool
	// Nonce identifies the mapping's owner to the server: a change or
	// delete of the mapping must carry it. See NonceFor.
	Nonce [12]byte
	// Once sends the request once and waits for its answer until the call
	// ends, with no retransmission: a MAP the server carried out whose
	// answer was lost, or slower than the retransmission time, is not
	// sent again. Set it where a repeated MAP is not idempotent: miniupnpd
	// before 2.3.6 renews an IPv6 pinhole in place on the second MAP and
	// drops its nonce, after which no delete is authorized (igd/pcp's
	// Pinholes). A lost request or answer then costs the whole call
	// (CallTimeout) and an error; the caller retries.
	Once bool
}

// MapResult is what the server granted.
type MapResult struct {
	// ExternalAddr and ExternalPort are the assigned external address and
	// port.
	ExternalAddr netip.Addr
	ExternalPort uint16
	// Lifetime is the granted lifetime; renew before it ends.
	Lifetime time.Duration
	// Epoch is the server's Epoch Time in the answer, in seconds.
	Epoch uint32
}

func (r MapRequest) validate() error {
	switch {
	case !r.Protocol.Valid():
		return &igderr.FieldError{Field: "Protocol", Value: fmt.Sprintf("%q", r.Protocol), Reason: "must be TCP or UDP"}
	case r.InternalAddr.IsValid() && !unicast(r.InternalAddr.Unmap()):
		return &igderr.FieldError{Field: "InternalAddr", Value: r.InternalAddr.String(), Reason: "must be a host address or the zero Addr"}
	case r.InternalAddr.Zone() != "":
		return &igderr.FieldError{Field: "InternalAddr", Value: r.InternalAddr.String(), Reason: "must have no zone"}
	case r.InternalPort == 0:
		return &igderr.FieldError{Field: "InternalPort", Value: "0", Reason: "must be 1-65535"}
	case r.Lifetime < time.Second || r.Lifetime/time.Second > math.MaxUint32:
		return &igderr.FieldError{Field: "Lifetime", Value: r.Lifetime.String(), Reason: "must be 1s to 2^32-1 s (Delete removes a mapping)"}
	case r.PreferFailure && r.ExternalPort == 0:
		return &igderr.FieldError{Field: "ExternalPort", Value: "0", Reason: "must be set with PreferFailure"}
	}
	return nil
}

// Map creates or renews a mapping (a MAP request) and returns what the
// server granted. A result code other than SUCCESS is a *ResultError.
// Retransmissions repeat the same request; MAP with the same nonce is
// idempotent on the server.
func (c *Client) Map(ctx context.Context, req MapRequest) (MapResult, error) {
	if err := req.validate(); err != nil {
		return MapResult{}, fmt.Errorf("pcp: map: %w", err)
	}
	m := mapMessage{
		Lifetime:      uint32(req.Lifetime / time.Second),
		Nonce:         req.Nonce,
		Protocol:      wireProto(req.Protocol),
		InternalPort:  req.InternalPort,
		ExternalPort:  req.ExternalPort,
		PreferFailure: req.PreferFailure,
	}
	a, err := c.call(ctx, "map", m, req.InternalAddr.Unmap(), !req.Once)
	if err != nil {
		return MapResult{}, err
	}
	family := "IPv4"
	if a.ClientAddr.Is6() {
		family = "IPv6"
	}
	if a.ExternalAddr.Is6() != a.ClientAddr.Is6() || !unicast(a.ExternalAddr) || a.ExternalPort == 0 {
		return MapResult{}, fmt.Errorf("pcp: map: server answered SUCCESS with external %s port %d, not a usable %s address and port", a.ExternalAddr, a.ExternalPort, family)
	}
	if req.PreferFailure && a.ExternalPort != req.ExternalPort {
		// miniupnpd built with CHECK_PORTINUSE (Debian's is) skips a port
		// another host's mapping holds before it looks at PREFER_FAILURE
		// (pcpserver.c, CreatePCPMap_NAT). Undo the mapping it made on
		// the other port, and answer as the RFC requires.
		err := fmt.Errorf("pcp: map: %w: the server ignored PREFER_FAILURE and assigned port %d instead of %d", ErrCannotProvideExternal, a.ExternalPort, req.ExternalPort)
		if derr := c.Delete(ctx, req.Protocol, req.InternalAddr, req.InternalPort, req.Nonce); derr != nil {
			err = errors.Join(err, fmt.Errorf("pcp: map: undo the mapping on port %d: %w", a.ExternalPort, derr))
		}
		return MapResult{}, err
	}
	return MapResult{
		ExternalAddr: a.ExternalAddr,
		ExternalPort: a.ExternalPort,
		Lifetime:     time.Duration(a.Lifetime) * time.Second,
		Epoch:        a.Epoch,
	}, nil
}

// Delete removes the mapping of proto to internalAddr:internalPort (a MAP
// with lifetime 0, the all-zeros external address of the server's family
// and external port 0, per RFC 6887 §15 and erratum 3621). internalAddr follows
// MapRequest.InternalAddr: zero means this host. The server deletes only
// with the nonce that created the mapping (ErrNotAuthorized otherwise).
// miniupnpd 2.3.1 answers ErrNoResources when it holds no PCP or UPnP
// mapping to internalAddr:internalPort, so a retransmission after a lost
// answer, or a second Delete, gets that error; for an IPv6 pinhole it
// holds no more it answers SUCCESS.
func (c *Client) Delete(ctx context.Context, proto igd.Protocol, internalAddr netip.Addr, internalPort uint16, nonce [12]byte) error {
	// Lifetime is set to pass validation; the request carries 0.
	req := MapRequest{Protocol: proto, InternalAddr: internalAddr, InternalPort: internalPort, Lifetime: time.Second}
	if err := req.validate(); err != nil {
		return fmt.Errorf("pcp: delete: %w", err)
	}
	m := mapMessage{Nonce: nonce, Protocol: wireProto(proto), InternalPort: internalPort}
	_, err := c.call(ctx, "delete", m, internalAddr.Unmap(), true)
	return err
}

func wireProto(p igd.Protocol) uint8 {
	if p == igd.UDP {
		return protoUDP
	}
	return protoTCP
}

// call sends m (completed with the client address, the all-zeros
// suggested external address of the server's family when m has none and,
// when internal is another host, THIRD_PARTY) until the matching answer
// comes or ctx or CallTimeout ends, and returns the answer, with
// ClientAddr set to the address the request was sent from, when its result
// is SUCCESS. An internal address of the other family than the server's is
// a *igderr.FieldError. Without retransmit, m is sent once (see
// MapRequest.Once).
func (c *Client) call(ctx context.Context, op string, m mapMessage, internal netip.Addr, retransmit bool) (_ mapMessage, err error) {
	defer func(start time.Time) { igdmetrics.ObserveRequest("MAP", start, errorCode(err)) }(time.Now())
	ctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	defer cancel()
	conn, server, err := c.dial(ctx, op)
	if err != nil {
		return mapMessage{}, err
	}
	defer conn.Close()
	if m.ClientAddr, err = localAddr(conn, op); err != nil {
		return mapMessage{}, err
	}
	if internal.IsValid() && internal.Is4() != server.Addr().Is4() {
		return mapMessage{}, fmt.Errorf("pcp: %s: %w", op, &igderr.FieldError{Field: "InternalAddr", Value: internal.String(),
			Reason: fmt.Sprintf("must be of the family of the server %s", server.Addr())})
	}
	if !m.ExternalAddr.IsValid() && m.ClientAddr.Is6() {
		m.ExternalAddr = netip.IPv6Unspecified()
	}
	if internal.IsValid() && internal != m.ClientAddr {
		m.ThirdParty = internal
	}
	var a mapMessage
	err = exchange(ctx, conn, server, op, encodeMap(m), retransmit, func(b []byte) (bool, error) {
		if isUnsupportedVersion(b) {
			return true, &ResultError{Op: op, Code: UnsuppVersion}
		}
		var ok bool
		if a, ok = decodeMapAnswer(b, m); !ok {
			return false, nil // not the answer: another message, or garbage
		}
		c.observeEpoch(server.Addr(), a.Epoch, time.Now())
		c.mu.Lock()
		c.asked = epochState{server: server.Addr(), epoch: a.Epoch, local: time.Now()}
		c.mu.Unlock()
		if a.Result != Success {
			return true, &ResultError{Op: op, Code: a.Result, Lifetime: time.Duration(a.Lifetime) * time.Second}
		}
		return true, nil
	})
	if err != nil {
		return mapMessage{}, err
	}
	a.ClientAddr = m.ClientAddr
	return a, nil
}

// EpochLost asks the server for its Epoch Time (a PCP ANNOUNCE request,
// RFC 6887 §14.1) and reports whether it shows the server lost its state
// since the last answer to one of this client's own requests (RFC 6887
// §8.5: the epoch went back by more than a second, or advanced unlike this
// host's clock); an ANNOUNCE heard by ListenAnnounce does not count, since
// anyone on the LAN can send one. With no such answer before, it reports
// false. The answer is recorded as the last heard without signalling
// Restarts: the caller acts on the result. A server that refuses the
// request answers a *ResultError.
func (c *Client) EpochLost(ctx context.Context) (_ bool, err error) {
	defer func(start time.Time) { igdmetrics.ObserveRequest("ANNOUNCE", start, errorCode(err)) }(time.Now())
	ctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	defer cancel()
	const op = "ask epoch"
	conn, server, err := c.dial(ctx, op)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	client, err := localAddr(conn, op)
	if err != nil {
		return false, err
	}
	var epoch uint32
	err = exchange(ctx, conn, server, op, encodeAnnounceRequest(client), true, func(b []byte) (bool, error) {
		e, result, ok := decodeAnnounceAnswer(b)
		switch {
		case !ok:
			return false, nil // not the answer
		case result != Success:
			return true, &ResultError{Op: op, Code: result}
		}
		epoch = e
		return true, nil
	})
	if err != nil {
		return false, err
	}
	now := time.Now()
	st := epochState{server: server.Addr(), epoch: epoch, local: now}
	c.mu.Lock()
	prev := c.asked
	c.asked, c.epoch = st, st
	c.mu.Unlock()
	return prev.server == st.server && lostState(prev.epoch, epoch, now.Sub(prev.local)), nil
}

// exchange sends req on conn to server, again after each retransmission
// time (RFC 6887 §8.1.1; only once without retransmit), until answer takes
// a datagram (done) or ctx ends, and returns answer's error. ICMP port unreachable ends it at once:
// nothing listens on the server's port (a router without PCP, or one
// restarting); callers retry later.
func exchange(ctx context.Context, conn net.Conn, server netip.AddrPort, op string, req []byte, retransmit bool, answer func(b []byte) (done bool, err error)) error {
	// A read blocks until its deadline; cancelling ctx moves the deadline
	// to now so that the loop below sees ctx.Err at once.
	stop := context.AfterFunc(ctx, func() { conn.SetReadDeadline(time.Now()) })
	defer stop()

	buf := make([]byte, maxMessageLen+1)
	for rt, sent := jitter(initialRT), false; ctx.Err() == nil; rt = jitter(min(2*rt, maxRT)) {
		if !sent || retransmit {
			if _, err := conn.Write(req); err != nil {
				return fmt.Errorf("pcp: %s: send to %s: %w", op, server, err)
			}
			sent = true
		}
		if err := conn.SetReadDeadline(time.Now().Add(rt)); err != nil {
			return fmt.Errorf("pcp: %s: %w", op, err)
		}
		// ctx is checked after the deadline is set: AfterFunc may have
		// run before.
		for ctx.Err() == nil {
			n, err := conn.Read(buf)
			var ne net.Error
			switch {
			case errors.Is(err, syscall.ECONNREFUSED):
				return fmt.Errorf("pcp: %s: %s: %w", op, server, err)
			case errors.As(err, &ne) && ne.Timeout():
			case err != nil:
				return fmt.Errorf("pcp: %s: receive from %s: %w", op, server, err)
			default:
				if done, err := answer(buf[:n]); done {
					return err
				}
				continue
			}
			break // the retransmission time ended
		}
	}
	return fmt.Errorf("pcp: %s: no answer from %s: %w", op, server, ctx.Err())
}

// errorCode is the code label of a failed call (see igdmetrics.ObserveRequest): the
// result code's name, or timeout, canceled or transport; "" for none.
func errorCode(err error) string {
	var re *ResultError
	switch {
	case err == nil:
		return ""
	case errors.As(err, &re) && int(re.Code) < len(codeNames):
		return re.Code.String()
	case errors.As(err, &re):
		return "other"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	return "transport"
}

// jitter returns d scaled by a random factor in [0.9, 1.1] (RFC 6887
// §8.1.1, RAND).
func jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.9 + 0.2*rand.Float64()))
}

// server returns Config.Server, or the default gateway on Port. An IPv6
// address keeps its zone (a link-local router needs it).
func (c *Client) server(ctx context.Context) (netip.AddrPort, error) {
	if c.cfg.Server.IsValid() {
		return netip.AddrPortFrom(c.cfg.Server.Addr().Unmap(), c.cfg.Server.Port()), nil
	}
	gw, err := c.cfg.Gateway(ctx)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("find server: %w", err)
	}
	if !unicast(gw.Unmap()) {
		return netip.AddrPort{}, fmt.Errorf("find server: default gateway %s is not a unicast address", gw)
	}
	return netip.AddrPortFrom(gw.Unmap(), Port), nil
}

// observeEpoch records an answer's Epoch Time and signals Restarts when it
// shows the server lost its state (RFC 6887 §8.5): the epoch went back by
// more than a second, or the server's clock and this host's advanced by
// amounts that differ by more than 2 s plus 1/16 of the larger.
func (c *Client) observeEpoch(server netip.Addr, epoch uint32, now time.Time) {
	c.observeEpochIn(&c.epoch, server, epoch, now)
}

// observeEpochIn is observeEpoch on the state st (guarded by c.mu).
func (c *Client) observeEpochIn(st *epochState, server netip.Addr, epoch uint32, now time.Time) {
	c.mu.Lock()
	prev := *st
	*st = epochState{server: server, epoch: epoch, local: now}
	c.mu.Unlock()
	if prev.server != server {
		return // the first answer from this server: nothing to compare
	}
	if lostState(prev.epoch, epoch, now.Sub(prev.local)) {
		c.signalRestart()
	}
}

// lostState is the test of RFC 6887 §8.5 on one pair of answers.
func lostState(prevEpoch, epoch uint32, elapsed time.Duration) bool {
	if int64(epoch)+1 < int64(prevEpoch) {
		return true
	}
	cDelta := elapsed.Seconds()
	sDelta := float64(epoch) - float64(prevEpoch)
	return cDelta+2 < sDelta-sDelta/16 || sDelta+2 < cDelta-cDelta/16
}

func (c *Client) signalRestart() {
	select {
	case c.restarts <- struct{}{}:
	default: // one is pending already
	}
}
