package fake

import (
	"cmp"
	"net/netip"
	"slices"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/internal/upnp"
)

// DefaultExternalIP is the external address a Router reports when
// RouterConfig.ExternalIP is unset. It is the WAN address of the lab router
// (a public-looking address that exists only inside the lab's namespaces).
var DefaultExternalIP = netip.MustParseAddr("198.51.101.7")

// RouterConfig configures a Router. The zero value is a miniupnpd 2.3.1 router
// in its default configuration: not in secure mode, any lease accepted, no
// table limit, the real clock.
type RouterConfig struct {
	// ExternalIP is the address the router reports on its WAN side. Zero
	// means DefaultExternalIP. It may be a non-public address (a router that
	// is itself behind carrier-grade NAT); the fake still maps ports then.
	ExternalIP netip.Addr

	// SecureMode makes the router behave like miniupnpd with
	// secure_mode=yes: a host may only map ports to its own address
	// (AddPortMapping to another address fails with 718 even on a free port,
	// AddAnyPortMapping with 606) and may not delete another host's mapping
	// (606).
	SecureMode bool

	// OnlyPermanentLeases makes the router refuse every non-zero lease with
	// 725 OnlyPermanentLeasesSupported, as some IGD:1 routers do. Such a
	// router stores a lease of 0 as 0: the mapping never expires. miniupnpd
	// never answers 725, so this mode is checked on the fakes only.
	OnlyPermanentLeases bool

	// Capacity is the largest number of mappings the table holds; adding a
	// new key to a full table fails with 728 NoPortMapsAvailable. Zero means
	// unlimited.
	Capacity int

	// NoList makes Client.ListPortMappings fail with igd.ErrNotSupported,
	// like a router that can only be read entry by entry (IGD:1,
	// WANPPPConnection:1) or a backend with no table to list.
	NoList bool

	// CrashOnLongList makes the router die as old miniupnpd does
	// (igd/DESIGN.md): a GetListOfPortMappings whose range holds more than
	// upnp.SafeListWidth mappings of its protocol, whatever NewNumberOfPorts
	// says, kills it. Through a Server that call
	// and every later request get no answer (the connection is closed) until
	// Reboot; Router.Crashed reports it. The in-memory Client is not
	// affected: it models the client, which never sends the call.
	CrashOnLongList bool

	// ReportInternalPortZero makes the router answer NewInternalPort 0 for
	// every mapping it reports (GetSpecificPortMappingEntry,
	// GetGenericPortMappingEntry, GetListOfPortMappings, and the Client's
	// GetPortMapping and ListPortMappings), as miniupnpd 2.3.6 with the
	// nftables backend does (miniupnpd issue 768). The stored internal port
	// is kept (Router.Mappings shows it) and still decides whether a re-add
	// renews or replaces a mapping.
	ReportInternalPortZero bool

	// Permissions are miniupnpd's permission lines, in order: the first
	// that matches a mapping (its external port, internal client and
	// internal port) allows or denies it; a mapping none matches is
	// allowed (check_upnp_rule_against_permissions). Nil allows every
	// mapping. A denied AddPortMapping gets 606; a PCP MAP skips a denied
	// port (with PREFER_FAILURE it is answered CANNOT_PROVIDE_EXTERNAL) and
	// gets NOT_AUTHORIZED when the lines allow no port at all.
	// AddAnyPortMapping does not check them.
	Permissions []Permission

	// Clock is what leases expire on. Nil means the real clock; tests pass a
	// k8s.io/utils/clock/testing.FakeClock and step it.
	Clock clock.PassiveClock
}

// Permission is one of miniupnpd's permission lines, "allow|deny EXTPORTS
// ADDR/MASK INTPORTS" in miniupnpd.conf (OpenWrt: a upnpd perm_rule).
type Permission struct {
	// Allow allows the mappings the line matches; false denies them.
	Allow bool
	// External are the external ports the line matches.
	External igd.PortRange
	// Client are the internal clients it matches.
	Client netip.Prefix
	// Internal are the internal ports it matches.
	Internal igd.PortRange
}

// Router is an in-memory UPnP IGD port-mapping table with the semantics of
// miniupnpd 2.3.1 (see the package documentation for the rules and for what
// it does not model). Hosts talk to it through Client values (an igd.Client)
// or through a Server (real SOAP over HTTP). It is safe for concurrent use.
type Router struct {
	cfg   RouterConfig // read-only after NewRouter
	clock clock.PassiveClock

	// mu guards every field below it.
	mu         sync.Mutex
	externalIP netip.Addr
	table      map[igd.Key]*entry
	seq        uint64        // insertion counter; higher is newer
	booted     time.Time     // when the router last (re)started, on its clock
	hooks      []RouterHooks // newest first
	calls      []Call
	crashed    bool // see RouterConfig.CrashOnLongList
	// pinholes are the IPv6 pinholes by UniqueID (pinhole.go);
	// lastPinholeID is the last ID given, 0 after a reboot.
	pinholes      map[uint16]*pinholeEntry
	lastPinholeID uint16
}

// Crashed reports whether a long listing killed the router (see
// RouterConfig.CrashOnLongList) since it was created or last rebooted.
func (r *Router) Crashed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.crashed
}

// crash records that the router died.
func (r *Router) crash() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.crashed = true
}

// entry is one stored mapping.
type entry struct {
	m       igd.Mapping // Lease is the lease as granted
	expires time.Time   // zero: never expires
	seq     uint64
}

// NewRouter returns an empty router configured by cfg.
func NewRouter(cfg RouterConfig) *Router {
	r := &Router{
		cfg:   cfg,
		clock: cfg.Clock,
		table: make(map[igd.Key]*entry),

		pinholes: make(map[uint16]*pinholeEntry),
	}
	if r.clock == nil {
		r.clock = clock.RealClock{}
	}
	r.booted = r.clock.Now()
	r.externalIP = cfg.ExternalIP
	if !r.externalIP.IsValid() {
		r.externalIP = DefaultExternalIP
	}
	return r
}

// Config returns the configuration the router was created with (Clock and
// ExternalIP as given, not defaulted).
func (r *Router) Config() RouterConfig { return r.cfg }

// Client returns an igd.Client that acts from host local: local is the
// caller's address the router sees, which decides ownership in secure mode,
// and what LocalAddr returns. Clients of one Router share its table.
func (r *Router) Client(local netip.Addr) *Client {
	return &Client{router: r, local: local.Unmap()}
}

// Mappings returns a copy of the table, without expired entries, sorted by
// protocol and external port. Each Lease is the time left, rounded up to a
// whole second (0 for a mapping that never expires), as
// GetSpecificPortMappingEntry reports it.
func (r *Router) Mappings() []igd.Mapping {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clock.Now()
	r.expireLocked(now)
	out := make([]igd.Mapping, 0, len(r.table))
	for _, e := range r.table {
		out = append(out, e.readLocked(now))
	}
	slices.SortFunc(out, func(a, b igd.Mapping) int {
		return cmp.Or(cmp.Compare(a.Protocol, b.Protocol), cmp.Compare(a.ExternalPort, b.ExternalPort))
	})
	return out
}

// Put stores m directly, bypassing every check (validation, conflicts,
// secure mode, capacity, hooks and the call log): a way to seed the table,
// for example with another host's mapping. A Lease of 0 never expires (as a
// mapping miniupnpd reads back after a restart); a positive Lease expires
// that long from now. Put replaces whatever is stored at m's key.
func (r *Router) Put(m igd.Mapping) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m.InternalClient = m.InternalClient.Unmap()
	m.Enabled = true
	e := &entry{m: m}
	if m.Lease > 0 {
		e.expires = r.clock.Now().Add(m.Lease)
	}
	r.seq++
	e.seq = r.seq
	r.table[m.Key()] = e
}

// Reboot simulates a router reboot: the table and the pinholes are wiped
// (and pinhole IDs start from 1 again, as miniupnpd's do), a crashed router
// (RouterConfig.CrashOnLongList) answers again, and the uptime
// (GetStatusInfo through a Server) starts again from 0. The router answers
// again at once; hooks (Intercept) simulate the outage of a real reboot.
// RouterHooks, the call log and the external address are kept.
func (r *Router) Reboot() {
	r.mu.Lock()
	defer r.mu.Unlock()
	clear(r.table)
	clear(r.pinholes)
	r.lastPinholeID = 0
	r.crashed = false
	r.booted = r.clock.Now()
}

// Uptime returns how long the router has run since it was created or last
// rebooted, on its clock.
func (r *Router) Uptime() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.clock.Since(r.booted)
}

// SetExternalIP changes the address the router reports on its WAN side; the
// zero Addr restores DefaultExternalIP. Any address is accepted, including
// non-public ones.
func (r *Router) SetExternalIP(a netip.Addr) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !a.IsValid() {
		a = DefaultExternalIP
	}
	r.externalIP = a
}

// ExternalIP returns the address the router reports on its WAN side.
func (r *Router) ExternalIP() netip.Addr {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.externalIP
}

// readLocked returns the stored mapping with Lease set to the time left.
func (e *entry) readLocked(now time.Time) igd.Mapping {
	m := e.m
	if e.expires.IsZero() {
		m.Lease = 0
		return m
	}
	left := e.expires.Sub(now)
	// Round up: a mapping with half a second left must not read as lease 0,
	// which means "permanent".
	m.Lease = (left + time.Second - 1).Truncate(time.Second)
	return m
}

// expireLocked removes the mappings whose lease has run out.
func (r *Router) expireLocked(now time.Time) {
	for k, e := range r.table {
		if !e.expires.IsZero() && !now.Before(e.expires) {
			delete(r.table, k)
		}
	}
}

// upnpErr returns the error the router answers with code. Descriptions are
// miniupnpd's.
func upnpErr(action string, code int) *igd.UPnPError {
	return &igd.UPnPError{Action: action, Code: code, Description: errorDescription(code)}
}

// errorDescription is miniupnpd's text for a UPnP error code.
func errorDescription(code int) string {
	switch code {
	case upnp.CodeInvalidAction:
		return "Invalid Action"
	case upnp.CodeInvalidArgs:
		return "Invalid Args"
	case upnp.CodeActionFailed:
		return "ActionFailed"
	case upnp.CodeNotAuthorized:
		return "Action not authorized"
	case upnp.CodeInvalidArrayIndex:
		return "SpecifiedArrayIndexInvalid"
	case upnp.CodeNoSuchEntry:
		return "NoSuchEntryInArray"
	case upnp.CodeWildCardNotPermittedInExt:
		return "Wildcard not permited in ExtPort" // sic, as miniupnpd spells it
	case upnp.CodeConflict:
		return "ConflictInMappingEntry"
	case upnp.CodeSamePortValuesRequired:
		return "SamePortValuesRequired"
	case upnp.CodeOnlyPermanentLeases:
		return "OnlyPermanentLeasesSupported"
	case upnp.CodeNoPortMapsAvailable:
		return "NoPortMapsAvailable"
	case upnp.CodePortMappingNotFound:
		return "PortMappingNotFound"
	case codeInconsistentParameters:
		return "InconsistentParameters"
	}
	return "ActionFailed"
}

// codeInconsistentParameters is UPnP 733 (IGD:2): a port range whose start
// is above its end.
const codeInconsistentParameters = 733

// add stores m for caller. m has been validated. It returns the mapping as
// stored (Lease as granted).
func (r *Router) add(action string, caller netip.Addr, m igd.Mapping) (igd.Mapping, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// In secure mode miniupnpd answers 718, not 606, to a mapping for another
	// host: indistinguishable from a real conflict.
	now, err := r.admitLocked(action, caller, &m, upnp.CodeConflict)
	if err != nil {
		return igd.Mapping{}, err
	}
	if !r.permitted(m.ExternalPort, m.InternalClient, m.InternalPort) {
		return igd.Mapping{}, upnpErr(action, upnp.CodeNotAuthorized)
	}
	old, exists := r.table[m.Key()]
	if exists && old.m.InternalClient != m.InternalClient {
		return igd.Mapping{}, upnpErr(action, upnp.CodeConflict)
	}
	if r.cfg.OnlyPermanentLeases && m.Lease != 0 {
		return igd.Mapping{}, upnpErr(action, upnp.CodeOnlyPermanentLeases)
	}
	if !exists && r.cfg.Capacity > 0 && len(r.table) >= r.cfg.Capacity {
		return igd.Mapping{}, upnpErr(action, upnp.CodeNoPortMapsAvailable)
	}
	r.storeLocked(now, m, old)
	return r.table[m.Key()].m, nil
}

// storeLocked writes m into the table over old (nil: a new key), as
// miniupnpd 2.3.1 does: a re-add with old's internal port only renews the
// lease, keeping old's description and its place in the listing order; a
// re-add with another internal port replaces the mapping, which then lists
// as the newest.
func (r *Router) storeLocked(now time.Time, m igd.Mapping, old *entry) {
	m.Enabled = true
	e := &entry{}
	switch {
	case r.cfg.OnlyPermanentLeases:
		// Lease is 0 here: a permanent mapping that never expires.
	case m.Lease == 0 || m.Lease > igd.MaxLease:
		// miniupnpd (IGD:2) stores "permanent" and over-long leases as
		// 604800 s, as the IGD:2 specification requires.
		m.Lease = igd.MaxLease
	}
	if m.Lease > 0 {
		e.expires = now.Add(m.Lease)
	}
	if old != nil && old.m.InternalPort == m.InternalPort {
		m.Description = old.m.Description
		e.seq = old.seq
	} else {
		r.seq++
		e.seq = r.seq
	}
	e.m = m
	r.table[m.Key()] = e
}

// addAny implements AddAnyPortMapping: like add, but when the key is taken
// by another host the router picks a free external port instead of failing.
// Ports are tried upwards from the one asked for, wrapping from 65535 to
// 1024; when 65535 tries find no port (every one held by another host) or
// the table is full, the answer is 728.
func (r *Router) addAny(action string, caller netip.Addr, m igd.Mapping) (igd.Mapping, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now, err := r.admitLocked(action, caller, &m, upnp.CodeNotAuthorized)
	if err != nil {
		return igd.Mapping{}, err
	}
	if r.cfg.OnlyPermanentLeases && m.Lease != 0 {
		return igd.Mapping{}, upnpErr(action, upnp.CodeOnlyPermanentLeases)
	}
	// At most 65535 tries: the search ends even when the asked port is below
	// 1024, where the wrap-around never comes back to it.
	for range 65535 {
		old, exists := r.table[m.Key()]
		if !exists || old.m.InternalClient == m.InternalClient {
			if !exists && r.cfg.Capacity > 0 && len(r.table) >= r.cfg.Capacity {
				break
			}
			r.storeLocked(now, m, old)
			return r.table[m.Key()].m, nil
		}
		m.ExternalPort++
		if m.ExternalPort == 0 {
			m.ExternalPort = 1024
		}
	}
	return igd.Mapping{}, upnpErr(action, upnp.CodeNoPortMapsAvailable)
}

// permitted reports whether RouterConfig.Permissions allow a mapping of
// externalPort to client:internalPort: the first line that matches
// decides, and none matching allows it.
func (r *Router) permitted(externalPort uint16, client netip.Addr, internalPort uint16) bool {
	in := func(p uint16, pr igd.PortRange) bool { return p >= pr.First && p <= pr.Last }
	for _, p := range r.cfg.Permissions {
		if in(externalPort, p.External) && p.Client.Contains(client.Unmap()) && in(internalPort, p.Internal) {
			return p.Allow
		}
	}
	return true
}

// admitLocked starts an add: it drops expired mappings, normalizes m's
// internal client, and in secure mode refuses, with secureCode, a mapping
// for a host other than caller. It returns the router's time.
func (r *Router) admitLocked(action string, caller netip.Addr, m *igd.Mapping, secureCode int) (time.Time, error) {
	now := r.clock.Now()
	r.expireLocked(now)
	m.InternalClient = m.InternalClient.Unmap()
	if r.cfg.SecureMode && m.InternalClient != caller {
		return now, upnpErr(action, secureCode)
	}
	return now, nil
}

// remove deletes the mapping at k for caller. A missing mapping is not an
// error (miniupnpd 2.3.1 answers success).
func (r *Router) remove(action string, caller netip.Addr, k igd.Key) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.expireLocked(r.clock.Now())
	e, ok := r.table[k]
	if !ok {
		return nil
	}
	if r.cfg.SecureMode && e.m.InternalClient != caller {
		return upnpErr(action, upnp.CodeNotAuthorized)
	}
	delete(r.table, k)
	return nil
}

// removeRange implements DeletePortMappingRange. With manage false (or in
// secure mode) only caller's own mappings are removed. A range holding none
// of them gives 730.
func (r *Router) removeRange(action string, caller netip.Addr, proto igd.Protocol, start, end uint16, manage bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.expireLocked(r.clock.Now())
	n := 0
	for k, e := range r.table {
		if k.Protocol != proto || k.ExternalPort < start || k.ExternalPort > end {
			continue
		}
		if (!manage || r.cfg.SecureMode) && e.m.InternalClient != caller {
			continue
		}
		delete(r.table, k)
		n++
	}
	if n == 0 {
		return upnpErr(action, upnp.CodePortMappingNotFound)
	}
	return nil
}

// get returns the mapping at k with the time left on its lease.
func (r *Router) get(action string, k igd.Key) (igd.Mapping, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clock.Now()
	r.expireLocked(now)
	e, ok := r.table[k]
	if !ok {
		return igd.Mapping{}, upnpErr(action, upnp.CodeNoSuchEntry)
	}
	return r.reportLocked(e, now), nil
}

// reportLocked is e as the router reports it to a host.
func (r *Router) reportLocked(e *entry, now time.Time) igd.Mapping {
	m := e.readLocked(now)
	if r.cfg.ReportInternalPortZero {
		m.InternalPort = 0
	}
	return m
}

// listRange returns the mappings of proto in ports, newest first, as
// miniupnpd lists them.
func (r *Router) listRange(proto igd.Protocol, ports igd.PortRange) []igd.Mapping {
	var out []igd.Mapping
	for _, m := range r.list() {
		if m.Protocol == proto && m.ExternalPort >= ports.First && m.ExternalPort <= ports.Last {
			out = append(out, m)
		}
	}
	return out
}

// list returns the table newest first, as miniupnpd lists it.
func (r *Router) list() []igd.Mapping {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clock.Now()
	r.expireLocked(now)
	es := make([]*entry, 0, len(r.table))
	for _, e := range r.table {
		es = append(es, e)
	}
	slices.SortFunc(es, func(a, b *entry) int { return cmp.Compare(b.seq, a.seq) })
	out := make([]igd.Mapping, len(es))
	for i, e := range es {
		out[i] = r.reportLocked(e, now)
	}
	return out
}
