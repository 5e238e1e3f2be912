package igd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ccmkit/ccmkit/internal/hostinfo"
	"github.com/ccmkit/ccmkit/internal/igdmetrics"
	"github.com/ccmkit/ccmkit/internal/upnp"
	"golang.org/x/sync/semaphore"
	"k8s.io/klog/v2"
)

// Defaults for the zero values of Config.
const (
	// DefaultDiscoveryTimeout bounds a whole discovery; it matters only when
	// no router answers (DESIGN.md has the numbers behind each default).
	DefaultDiscoveryTimeout = 3 * time.Second
	// defaultSettleTime is how long discovery keeps listening after the first
	// usable router, so that a better one answering a little later is not
	// beaten by arrival order.
	defaultSettleTime = 100 * time.Millisecond
	// DefaultCallTimeout bounds one SOAP call or description fetch: room for
	// a busy router, while still noticing a dead one quickly.
	DefaultCallTimeout = 2 * time.Second
	// defaultDiscoveryBackoff is how long the calls that need the router
	// reuse the error of a discovery that found none, so that a retrying
	// caller does not spend its time searching.
	defaultDiscoveryBackoff = 5 * time.Second
	// defaultMaxListEntries bounds the entries ListPortMappings reads from a
	// router, so that a router whose answers never run out cannot keep it
	// going.
	defaultMaxListEntries = 4096
)

// Config configures a UPnPClient. The zero value is usable: SSDP discovery
// with the operating system's sockets and routes.
type Config struct {
	// RootDescURL is the URL of the router's root description, for example
	// "http://192.168.1.1:5000/rootDesc.xml". When set, discovery fetches it
	// directly and sends no SSDP search (for networks that filter multicast,
	// and for tests). Empty means discover by SSDP.
	RootDescURL string

	// Router is the LAN address of the one router SSDP discovery uses, for
	// a router that is not this host's default gateway. Zero means the
	// host's IPv4 default gateway (Host.DefaultGateway). Discovery probes
	// only the answers sent from this address; every other host that
	// answers is listed among the candidates, rejected, and sent no
	// request, however good the service it claims. It must be an IPv4
	// host address, and must not be set with RootDescURL, which names the
	// router itself.
	Router netip.Addr

	// DiscoveryTimeout bounds one discovery, from the first search to the
	// chosen router. Zero means DefaultDiscoveryTimeout.
	DiscoveryTimeout time.Duration

	// DiscoveryBackoff is how long, after a discovery that found no router,
	// the calls that need one return that discovery's error at once rather
	// than each starting another. It does not apply to Discover, which
	// always searches, nor to the rediscovery after a cached router stopped
	// answering. Zero means 5 s; a negative value turns
	// the back-off off (every call that needs the router discovers again).
	DiscoveryBackoff time.Duration

	// SettleTime is how long SSDP discovery keeps collecting answers after
	// the first usable router answered. Zero means 100 ms.
	SettleTime time.Duration

	// CallTimeout bounds each SOAP call and each description fetch. Zero
	// means DefaultCallTimeout. The list call (GetListOfPortMappings) gets
	// five times this bound, since it returns up to 1000 entries at once.
	CallTimeout time.Duration

	// MaxListEntries bounds the entries ListPortMappings reads: the indexes
	// the entry-by-entry walk asks for, or the distinct mappings
	// GetListOfPortMappings answers (an answer repeats mappings of earlier
	// ones when a port range is read again in halves; those are not
	// counted). Past it the listing fails. Zero means 4096.
	MaxListEntries int

	// HTTPClient makes every HTTP request: description fetches and SOAP
	// calls. Nil means a private client whose transport dials with
	// DialContext, uses no proxy and no keep-alive (routers close every
	// connection anyway). When set, DialContext is not applied to it. Either
	// way the client uses a copy whose transport caps every answer (see
	// ErrAnswerTooLarge) and which follows no redirect (a 3xx answer is an
	// error naming the URL and where it pointed, whatever the given
	// client's CheckRedirect); the given client is not modified. goupnp's global
	// HTTPClientDefault is never used.
	HTTPClient *http.Client

	// DialContext opens connections for the default HTTP client and the UDP
	// socket the default Host reads its local address from. Nil means a
	// zero net.Dialer. Set it to pin the client to an interface or run it
	// inside a network namespace.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)

	// ListenPacket opens the UDP socket SSDP discovery searches from; it is
	// called with ("udp4", "0.0.0.0:0"). Nil means a zero net.ListenConfig.
	// The searches leave through the interface the host routes
	// 239.255.255.250 to (usually the default route's); to search on
	// another interface, return a socket set up for it (IP_MULTICAST_IF).
	ListenPacket func(ctx context.Context, network, addr string) (net.PacketConn, error)

	// Host answers the questions about this host that discovery and LocalAddr
	// depend on. Nil reads the operating system (see HostInfo and the package
	// documentation), with DialContext.
	Host HostInfo
}

// withDefaults returns cfg with every zero field filled in. This is the only
// place defaults are set.
func (cfg Config) withDefaults() Config {
	if cfg.DiscoveryTimeout == 0 {
		cfg.DiscoveryTimeout = DefaultDiscoveryTimeout
	}
	if cfg.DiscoveryBackoff == 0 {
		cfg.DiscoveryBackoff = defaultDiscoveryBackoff
	}
	if cfg.SettleTime == 0 {
		cfg.SettleTime = defaultSettleTime
	}
	if cfg.CallTimeout == 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	if cfg.MaxListEntries == 0 {
		cfg.MaxListEntries = defaultMaxListEntries
	}
	if cfg.DialContext == nil {
		cfg.DialContext = (&net.Dialer{}).DialContext
	}
	if cfg.ListenPacket == nil {
		lc := &net.ListenConfig{}
		cfg.ListenPacket = lc.ListenPacket
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{
			Transport: &http.Transport{
				Proxy:             nil, // a LAN router is never reached through a proxy
				DialContext:       cfg.DialContext,
				DisableKeepAlives: true,
			},
		}
	}
	cfg.HTTPClient = cappedClient(cfg.HTTPClient)
	if cfg.Host == nil {
		cfg.Host = hostinfo.System{DialContext: cfg.DialContext}
	}
	return cfg
}

func (cfg Config) validate() error {
	switch {
	case cfg.DiscoveryTimeout < 0:
		return fmt.Errorf("igd: invalid Config.DiscoveryTimeout %s: must not be negative", cfg.DiscoveryTimeout)
	case cfg.SettleTime < 0:
		return fmt.Errorf("igd: invalid Config.SettleTime %s: must not be negative", cfg.SettleTime)
	case cfg.CallTimeout < 0:
		return fmt.Errorf("igd: invalid Config.CallTimeout %s: must not be negative", cfg.CallTimeout)
	case cfg.MaxListEntries < 0:
		return fmt.Errorf("igd: invalid Config.MaxListEntries %d: must not be negative", cfg.MaxListEntries)
	}
	if r := cfg.Router; r.IsValid() {
		switch {
		case !r.Is4():
			return fmt.Errorf("igd: invalid Config.Router %s: must be an IPv4 address (SSDP discovery searches over IPv4)", r)
		case r.IsUnspecified() || r.IsMulticast() || r == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
			return fmt.Errorf("igd: invalid Config.Router %s: must be a host address", r)
		case cfg.RootDescURL != "":
			return fmt.Errorf("igd: invalid Config.Router %s: RootDescURL %q already names the router; set one of them", r, cfg.RootDescURL)
		}
	}
	if cfg.RootDescURL != "" {
		u, err := url.Parse(cfg.RootDescURL)
		if err != nil {
			return fmt.Errorf("igd: invalid Config.RootDescURL %q: %w", cfg.RootDescURL, err)
		}
		if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("igd: invalid Config.RootDescURL %q: must be an absolute http URL", cfg.RootDescURL)
		}
	}
	return nil
}

// Candidate is one connection service that discovery found, and what it
// learnt about it.
type Candidate struct {
	// Location is the URL of the root description that holds the service.
	Location string
	// FriendlyName is the device's name from its description.
	FriendlyName string
	// ServiceType is the service's URN: WANIPConnection:2, WANIPConnection:1
	// or WANPPPConnection:1 (urn:schemas-upnp-org:service:...).
	ServiceType string
	// ControlURL is where the service's SOAP calls go.
	ControlURL string
	// Addr is the router's LAN address (the host of ControlURL).
	Addr netip.Addr
	// Status is what GetStatusInfo answered ("Connected" when the WAN
	// connection is up, "Disconnected", …),
	// or empty when the router does not answer it.
	Status string
	// ExternalIP is what GetExternalIPAddress answered.
	ExternalIP netip.Addr
	// OnDefaultGateway reports whether Addr is this host's default gateway.
	// Without Config.Router and Config.RootDescURL, only such candidates
	// are probed.
	OnDefaultGateway bool
	// Rejected says why the service cannot be used; empty when it can.
	Rejected string
	// Server is how the router's HTTP server describes itself (the Server
	// header of the root description, else the SSDP answer's SERVER header),
	// for example "Debian/12 UPnP/1.1 MiniUPnPd/2.3.1"; empty when it said
	// nothing. Known buggy versions are worked around (see the package
	// documentation).
	Server string
	// IPv6Firewall reports whether the device describes an IGD:2
	// WANIPv6FirewallControl:1 service (IPv6 pinholes). It is not used:
	// this package maps IPv4.
	IPv6Firewall bool
}

// connected reports whether the router said its WAN connection is up.
func (c Candidate) connected() bool { return c.Status == "Connected" }

// String describes the candidate for logs and error messages.
func (c Candidate) String() string {
	s := fmt.Sprintf("%s at %s", shortService(c.ServiceType), c.Location)
	if c.ExternalIP.IsValid() {
		s += fmt.Sprintf(" (external IP %s", c.ExternalIP)
		if !IsPublic(c.ExternalIP) {
			s += ", not public"
		}
		s += ")"
	}
	if c.Rejected != "" {
		s += ": " + c.Rejected
	}
	return s
}

// Gateway describes the router a UPnPClient talks to: the chosen service,
// why it was chosen, and everything else discovery saw.
type Gateway struct {
	Candidate
	// PublicExternalIP reports whether ExternalIP is public (IsPublic). When
	// false, the router is itself behind NAT (private or CGNAT address) and
	// its mappings are not reachable from the internet: tell the user.
	PublicExternalIP bool
	// GuardedListing reports whether this client lists the router's table
	// only in ranges known to hold at most 128 mappings, because
	// its daemon may die on longer GetListOfPortMappings answers (DESIGN.md).
	GuardedListing bool
	// Accepted says which router discovery used and why: "the default
	// gateway 192.0.2.1", "Config.Router 192.0.2.7" or "named by
	// Config.RootDescURL". It uses no other.
	Accepted string
	// Reason says why this router was used (Accepted) and why this service
	// was chosen among its candidates.
	Reason string
	// Candidates is every service discovery found, the chosen one included,
	// each with its rejection reason if any.
	Candidates []Candidate
	// DiscoveredAt is when discovery chose this gateway.
	DiscoveredAt time.Time
}

// gateway is a discovered router with its live service client.
type gateway struct {
	info Gateway
	conn wanConnection
	// listRefusal is the router's refusal of GetListOfPortMappings (see
	// ListPortMappings), once it refused: later listings return it at once.
	listRefusal atomic.Pointer[UPnPError]

	// mu guards known.
	mu sync.Mutex
	// known is, on a guarded router, the sorted external ports of each
	// protocol's mappings as last read, with this client's own adds since
	// and without its own deletes since; a protocol is absent until a read
	// covered all its ports.
	known map[Protocol][]uint16
}

// UPnPClient is the goupnp-based Client. It finds the router lazily, inside
// the first call that needs it, caches it, and discovers again after the
// router stopped answering (a transport error or timeout; a UPnP fault keeps
// it). Callers that need the router while a discovery is in flight wait for
// that one instead of starting their own, and after a discovery that found
// no router they get its error back for Config.DiscoveryBackoff. It is safe
// for concurrent use. Its mapping calls go to the router one at a time,
// since routers such as miniupnpd serve one request at a time; only a
// discovery started while calls are in flight (Discover, or a rediscovery)
// probes the router alongside them.
type UPnPClient struct {
	cfg Config
	// listPage is the NewNumberOfPorts of a GetListOfPortMappings call, and
	// the answer size that makes a range be read again in halves: listPage
	// (1000) except in tests, which lower it to page through a real
	// router's table without a thousand mappings.
	listPage int

	// sem holds one token per request in flight to the router (capacity 1).
	sem chan struct{}
	// writes orders this client's table writes against its walks and its
	// guarded listings: an add or delete holds one unit, a walk or a guarded
	// listing of a wide range all of them, so that no write of this process
	// shifts the entry indexes a walk is reading (see walk) or lands in a
	// range between the guard's plan and what it learns from the listing
	// (see listGuarded). Other reads take none.
	writes *semaphore.Weighted

	// mu guards the fields below. It is never held across a network call.
	mu sync.Mutex
	// gw is the cached router: nil before the first successful discovery
	// and after the router stopped answering.
	gw *gateway
	// flight is the discovery in progress, if any.
	flight *discovery
	// failed is the error of the last discovery when it found no router
	// (only while gw is nil), and failedAt when it ended.
	failed   error
	failedAt time.Time
}

// discovery is one discovery in flight, shared by every caller that needs
// its result. gw and err are written once, before done is closed.
type discovery struct {
	done   chan struct{}
	cancel context.CancelFunc
	// waiters counts the callers waiting on done; guarded by UPnPClient.mu.
	// When the last one gives up, the discovery is cancelled.
	waiters int
	gw      *gateway
	err     error
}

var _ Client = (*UPnPClient)(nil)

// NewClient returns a client configured by cfg. It does no I/O: the router is
// discovered by Discover or by the first call that needs it. The error is
// only for an invalid Config.
func NewClient(cfg Config) (*UPnPClient, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &UPnPClient{
		cfg:      cfg.withDefaults(),
		listPage: listPage,
		sem:      make(chan struct{}, 1),
		writes:   semaphore.NewWeighted(maxWriters),
	}, nil
}

// Discover finds the router now, replacing any cached one, and returns what it
// found. With Config.RootDescURL it fetches that description; otherwise it
// searches by SSDP and chooses among the answers (see the package
// documentation). A discovery already in flight is joined rather than
// duplicated, and Config.DiscoveryBackoff does not apply. When no router
// qualifies the error matches ErrNoGateway and lists what was found and why
// each was rejected; a router cached earlier is then kept.
//
// The discovery runs in its own goroutine, bounded by
// Config.DiscoveryTimeout, so that the callers sharing it do not depend on
// each other's contexts: when ctx ends, Discover returns ctx's error, and the
// discovery goes on for the other callers waiting on it or is cancelled if
// there are none. Values of ctx (its logger) are kept.
func (c *UPnPClient) Discover(ctx context.Context) (Gateway, error) {
	gw, err := c.awaitDiscovery(ctx, true)
	if err != nil {
		return Gateway{}, err
	}
	return gw.info.clone(), nil
}

func (g Gateway) clone() Gateway {
	g.Candidates = slices.Clone(g.Candidates)
	return g
}

// gateway returns the cached router, discovering it first if needed.
func (c *UPnPClient) gateway(ctx context.Context) (*gateway, error) {
	return c.awaitDiscovery(ctx, false)
}

// awaitDiscovery waits for the discovery in flight, starting one if there is
// none. Unless force is set, it returns the cached router, or the last
// failed discovery's error during the back-off, without discovering.
func (c *UPnPClient) awaitDiscovery(ctx context.Context, force bool) (*gateway, error) {
	c.mu.Lock()
	if !force {
		if gw := c.gw; gw != nil {
			c.mu.Unlock()
			return gw, nil
		}
		if err := c.backoffLocked(); err != nil {
			c.mu.Unlock()
			return nil, err
		}
	}
	d := c.flight
	if d == nil {
		d = c.startDiscoveryLocked(ctx)
	}
	d.waiters++
	c.mu.Unlock()

	select {
	case <-d.done:
		return d.gw, d.err
	case <-ctx.Done():
	}
	c.mu.Lock()
	d.waiters--
	last := d.waiters == 0
	if last && c.flight == d {
		// Later callers start afresh rather than join a cancelled discovery.
		c.flight = nil
	}
	c.mu.Unlock()
	if !last {
		return nil, fmt.Errorf("igd: discover: stopped waiting for the discovery in flight: %w", ctx.Err())
	}
	// Nobody else wants the result: stop the discovery and report what it
	// had found by now. Every step of a discovery ends with its context, so
	// this wait is short.
	d.cancel()
	<-d.done
	if d.err == nil {
		return d.gw, nil
	}
	var nge *noGatewayError
	if errors.As(d.err, &nge) {
		cp := *nge
		cp.Err = ctx.Err()
		return nil, &cp
	}
	return nil, fmt.Errorf("%w (%w)", d.err, ctx.Err())
}

// backoffLocked returns the last discovery's error while the back-off after
// it lasts, and nil otherwise. c.mu is held.
func (c *UPnPClient) backoffLocked() error {
	if c.failed == nil || c.cfg.DiscoveryBackoff < 0 {
		return nil
	}
	left := c.cfg.DiscoveryBackoff - time.Since(c.failedAt)
	if left <= 0 {
		return nil
	}
	return fmt.Errorf("%w (not discovering again for %s)", c.failed, left.Round(time.Millisecond))
}

// startDiscoveryLocked starts a discovery in its own goroutine, detached
// from ctx's cancellation but keeping its values (the logger). c.mu is held.
func (c *UPnPClient) startDiscoveryLocked(ctx context.Context) *discovery {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	d := &discovery{done: make(chan struct{}), cancel: cancel}
	c.flight = d
	go c.runDiscovery(ctx, d)
	return d
}

// runDiscovery runs d and commits its result: a router found replaces the
// cached one; a failure starts the back-off unless a router is cached or
// every waiter gave up (which says nothing about the router).
func (c *UPnPClient) runDiscovery(ctx context.Context, d *discovery) {
	defer d.cancel()
	gw, err := c.discover(ctx)
	c.mu.Lock()
	if c.flight == d {
		c.flight = nil
	}
	observeDiscovery(ctx, err)
	switch {
	case err == nil:
		if c.gw == nil {
			igdmetrics.RouterKnown(1)
		}
		c.gw, c.failed = gw, nil
	case c.gw == nil && ctx.Err() == nil:
		c.failed, c.failedAt = err, time.Now()
	}
	c.mu.Unlock()
	if err == nil {
		klog.FromContext(ctx).Info("Discovered internet gateway device",
			"location", gw.info.Location, "service", gw.info.ServiceType,
			"externalIP", gw.info.ExternalIP, "publicExternalIP", gw.info.PublicExternalIP,
			"reason", gw.info.Reason, "candidates", len(gw.info.Candidates), "server", gw.info.Server)
	}
	d.gw, d.err = gw, err
	close(d.done)
}

// forget drops gw from the cache (if it is still the cached one) so that the
// next call discovers again.
func (c *UPnPClient) forget(ctx context.Context, gw *gateway, cause error) {
	c.mu.Lock()
	dropped := c.gw == gw
	if dropped {
		c.gw = nil
		igdmetrics.RouterKnown(-1)
	}
	c.mu.Unlock()
	if dropped {
		klog.FromContext(ctx).Info("Internet gateway device stopped answering, will discover again",
			"location", gw.info.Location, "err", cause)
	}
}

// maxWriters is the capacity of UPnPClient.writes: more adds and deletes
// than can ever be in flight at once.
const maxWriters = 1 << 30

// holdWrites waits (honouring ctx) until this client's adds and deletes in
// flight have ended, and keeps new ones waiting until the returned func is
// called.
func (c *UPnPClient) holdWrites(ctx context.Context, action string) (func(), error) {
	if err := c.writes.Acquire(ctx, maxWriters); err != nil {
		return nil, fmt.Errorf("%s: waiting for this client's writes to end: %w", action, err)
	}
	return func() { c.writes.Release(maxWriters) }, nil
}

// holdWrite waits (honouring ctx) until no walk is running and keeps walks
// off until the returned func is called.
func (c *UPnPClient) holdWrite(ctx context.Context, action string) (func(), error) {
	if err := c.writes.Acquire(ctx, 1); err != nil {
		return nil, fmt.Errorf("%s: waiting for a table walk to end: %w", action, err)
	}
	return func() { c.writes.Release(1) }, nil
}

func acquire(ctx context.Context, sem chan struct{}) error {
	select {
	case sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func release(sem chan struct{}) { <-sem }

// call runs one SOAP action on the router: it waits for the router to be free
// (honouring ctx), bounds the call by timeout, and maps the result with
// callError. A transport error or timeout (but not the caller's own
// cancellation) makes the client forget the router.
func (c *UPnPClient) call(ctx context.Context, gw *gateway, action string, timeout time.Duration, fn func(ctx context.Context) error) error {
	if err := acquire(ctx, c.sem); err != nil {
		return fmt.Errorf("%s: waiting for the router: %w", action, err)
	}
	defer release(c.sem)
	callCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	callCtx = withOversizeRecord(callCtx)
	start := time.Now()
	err := fn(callCtx)
	if err == nil {
		observeCall(action, start, nil)
		return nil
	}
	wrapped, transport := callError(callCtx, action, err)
	observeCall(action, start, wrapped)
	if transport && ctx.Err() == nil {
		c.forget(ctx, gw, wrapped)
	}
	return wrapped
}

// ExternalIP implements Client. Every answer is validated: one that is no
// IPv4 host address (empty, unparsable, unspecified, IPv6, loopback,
// multicast, broadcast) gives an error matching ErrInvalidExternalIP that
// quotes the answer and names the router, and the router stays cached. The
// address may be non-public (see IsPublic and Gateway.PublicExternalIP); it
// is returned all the same.
func (c *UPnPClient) ExternalIP(ctx context.Context) (netip.Addr, error) {
	gw, err := c.gateway(ctx)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("igd: external IP: %w", err)
	}
	var s string
	err = c.call(ctx, gw, "GetExternalIPAddress", c.cfg.CallTimeout, func(ctx context.Context) (err error) {
		s, err = gw.conn.GetExternalIPAddressCtx(ctx)
		return err
	})
	if err != nil {
		return netip.Addr{}, fmt.Errorf("igd: external IP of %s: %w", gw.info.Location, err)
	}
	a, err := parseExternalIP(s)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("igd: external IP of %s: %w", gw.info.Location, err)
	}
	return a, nil
}

// AddPortMapping implements Client. m is validated first and an invalid
// mapping reaches no router. When the router refuses a finite lease (725, or
// 402 from routers that reject the lease argument) the mapping is added again
// with a permanent lease and the result says Lease 0; IGD:2 routers still
// expire a permanent mapping after MaxLease.
func (c *UPnPClient) AddPortMapping(ctx context.Context, m Mapping) (Mapping, error) {
	if err := m.Validate(); err != nil {
		return Mapping{}, fmt.Errorf("igd: add port mapping %s: %w", m.Key(), err)
	}
	gw, err := c.gateway(ctx)
	if err != nil {
		return Mapping{}, fmt.Errorf("igd: add port mapping %s: %w", m.Key(), err)
	}
	m.Enabled = true
	done, err := c.holdWrite(ctx, "AddPortMapping")
	if err != nil {
		return Mapping{}, fmt.Errorf("igd: add port mapping %s on %s: %w", m.Key(), gw.info.Location, err)
	}
	defer done()
	err = c.addPortMapping(ctx, gw, m)
	if m.Lease != 0 && (errors.Is(err, ErrOnlyPermanentLeases) || Code(err) == upnp.CodeInvalidArgs) {
		m.Lease = 0
		err = c.addPortMapping(ctx, gw, m)
	}
	if err != nil {
		return Mapping{}, fmt.Errorf("igd: add port mapping %s on %s: %w", m.Key(), gw.info.Location, err)
	}
	return m, nil
}

func (c *UPnPClient) addPortMapping(ctx context.Context, gw *gateway, m Mapping) error {
	return c.call(ctx, gw, "AddPortMapping", c.cfg.CallTimeout, func(ctx context.Context) error {
		// Counted before it is sent, whatever the answer: a router may store
		// an add whose answer is lost.
		gw.wrote(m.Key(), true)
		return gw.conn.AddPortMappingCtx(ctx, remoteHostArg(m.RemoteHost), m.ExternalPort, string(m.Protocol),
			m.InternalPort, m.InternalClient.Unmap().String(), true, m.Description, uint32(m.Lease/time.Second))
	})
}

func remoteHostArg(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	return a.Unmap().String()
}

// DeletePortMapping implements Client. It is idempotent: the spec's 714 for a
// missing mapping is success (miniupnpd already answers OK).
func (c *UPnPClient) DeletePortMapping(ctx context.Context, proto Protocol, externalPort uint16) error {
	k := Key{Protocol: proto, ExternalPort: externalPort}
	if err := k.validate(); err != nil {
		return fmt.Errorf("igd: delete port mapping %s: %w", k, err)
	}
	gw, err := c.gateway(ctx)
	if err != nil {
		return fmt.Errorf("igd: delete port mapping %s: %w", k, err)
	}
	done, err := c.holdWrite(ctx, "DeletePortMapping")
	if err != nil {
		return fmt.Errorf("igd: delete port mapping %s on %s: %w", k, gw.info.Location, err)
	}
	defer done()
	err = c.call(ctx, gw, "DeletePortMapping", c.cfg.CallTimeout, func(ctx context.Context) error {
		err := gw.conn.DeletePortMappingCtx(ctx, "", externalPort, string(proto))
		if err == nil || Code(err) == upnp.CodeNoSuchEntry {
			// Uncounted only once the router said it is gone, and before the
			// next call to it (c.sem is held), so that counts follow the
			// order the router saw this client's writes in.
			gw.wrote(k, false)
		}
		return err
	})
	if err != nil && !errors.Is(err, ErrNoSuchEntry) {
		return fmt.Errorf("igd: delete port mapping %s on %s: %w", k, gw.info.Location, err)
	}
	return nil
}

// GetPortMapping implements Client. A missing mapping gives an error matching
// ErrNoSuchEntry.
func (c *UPnPClient) GetPortMapping(ctx context.Context, proto Protocol, externalPort uint16) (Mapping, error) {
	k := Key{Protocol: proto, ExternalPort: externalPort}
	if err := k.validate(); err != nil {
		return Mapping{}, fmt.Errorf("igd: get port mapping %s: %w", k, err)
	}
	gw, err := c.gateway(ctx)
	if err != nil {
		return Mapping{}, fmt.Errorf("igd: get port mapping %s: %w", k, err)
	}
	m := Mapping{Protocol: proto, ExternalPort: externalPort}
	err = c.call(ctx, gw, "GetSpecificPortMappingEntry", c.cfg.CallTimeout, func(ctx context.Context) error {
		port, client, enabled, desc, lease, err := gw.conn.GetSpecificPortMappingEntryCtx(ctx, "", externalPort, string(proto))
		if err != nil {
			return err
		}
		m.InternalPort, m.InternalClient, m.Enabled, m.Description = port, parseAddr(client), enabled, desc
		m.Lease = time.Duration(lease) * time.Second
		return nil
	})
	if err != nil {
		return Mapping{}, fmt.Errorf("igd: get port mapping %s on %s: %w", k, gw.info.Location, err)
	}
	return m, nil
}

// parseAddr reads an address a router returned; anything unreadable (a
// wildcard written as "*", a host name) becomes the zero Addr rather than
// hiding the entry.
func parseAddr(s string) netip.Addr {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}
	}
	return a.Unmap()
}

// LocalAddr implements Client: this host's address toward the router, from
// Config.Host (no packet is sent).
func (c *UPnPClient) LocalAddr(ctx context.Context) (netip.Addr, error) {
	gw, err := c.gateway(ctx)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("igd: local address: %w", err)
	}
	a, err := c.cfg.Host.LocalAddr(ctx, gw.info.Addr)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("igd: local address toward %s: %w", gw.info.Location, err)
	}
	return a, nil
}
