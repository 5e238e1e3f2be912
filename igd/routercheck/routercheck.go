// Package routercheck tells what the router this host finds allows, before a
// load balancer is deployed on it: which router and daemon, which IGD
// service, whether its external IP is public, whether it lists its table,
// whether it lets this host map to other LAN hosts (secure mode), ports
// below 1024, finite leases, and each port the Services will use. Each
// finding says what to do about it: the edge cloud-config key to set, or
// the router setting to change.
//
// # Safety
//
// Run writes only probe mappings of its own, and never touches another's:
// each probe reads its key first and uses only a free one, carries a
// description unique to the run ("ccmkit-check" and random hex), has a short
// lease (Options.Lease) and is removed at once, after reading it back shows
// it is still the probe's (same internal client and port, and its
// description or a router's cut of it, at least 16 bytes). An add the
// router did not answer, or answered with an error other than a refusal
// that stores nothing (606, 718, ...), is read back too, and removed if the
// router stored it anyway.
// UPnP has no conditional write, so a residual window stays: a mapping to
// the probe's own target (this host, or Options.OtherHost for the
// secure-mode probe) that another program adds at the very key between the
// probe's read and its add is replaced by the probe, then removed with it.
// Probe keys are drawn at random from Options.Ports, a range the load
// balancer does not use unless a Service asks for it, and OtherHost is by
// default the router's own address, which no program maps to: that takes a
// coincidence of milliseconds on one key of a thousand. The keys of
// Options.ServicePorts are the Services' own: a load balancer mapping one of
// them to this host at that very moment has its mapping replaced by the
// probe and removed with it, and maps it again at its next repair.
package routercheck

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/pcp"
	"github.com/ccmkit/ccmkit/internal/igderr"
	"github.com/ccmkit/ccmkit/internal/pcpwire"
	"github.com/ccmkit/ccmkit/internal/upnp"
)

// Status is the outcome of one check.
type Status string

// The outcomes, from good to bad. Only Fail stops a deployment: the load
// balancer will not work with the configuration as given.
const (
	OK      Status = "ok"
	Skipped Status = "skipped"
	Warn    Status = "warn"
	Fail    Status = "fail"
)

// The checks' names, stable for scripts (Finding.Check).
const (
	CheckRouter     = "router"
	CheckService    = "igd-service"
	CheckExternalIP = "external-ip"
	CheckListing    = "listing"
	CheckMapSelf    = "map-this-host"
	CheckLease      = "finite-lease"
	CheckSecureMode = "secure-mode"
	CheckLowPorts   = "ports-below-1024"
	CheckPort       = "port" // one per Options.ServicePorts key; Finding.Port names it
	CheckIPv6       = "ipv6-pinholes"
	CheckPCP        = "pcp"
)

// Finding is what one check learnt.
type Finding struct {
	// Check is the check's name, one of the Check* constants.
	Check string `json:"check"`
	// Status is the outcome.
	Status Status `json:"status"`
	// Detail says what the router answered.
	Detail string `json:"detail"`
	// Fix says what to do when Status is Warn or Fail: the cloud-config key
	// to set or the router setting to change; empty otherwise.
	Fix string `json:"fix,omitempty"`
	// Port is the key a CheckPort finding is about; nil for other checks.
	Port *igd.Key `json:"port,omitempty"`
}

// Report is the outcome of Run.
type Report struct {
	// Gateway is the router the client found.
	Gateway igd.Gateway `json:"gateway"`
	// Findings are in the order of the Check* constants.
	Findings []Finding `json:"findings"`
}

// Problem returns the first finding that failed, or nil when the load
// balancer will work with the configuration the Options describe.
func (r Report) Problem() *Finding {
	for i := range r.Findings {
		if r.Findings[i].Status == Fail {
			return &r.Findings[i]
		}
	}
	return nil
}

// Options are the configuration the load balancer will run with, against
// which findings are judged, and how to probe. The zero value is the edge
// cloud-config's defaults.
type Options struct {
	// SecureMode, PermanentLease and AllowNonPublicExternalIP are the
	// cloud-config's loadBalancer keys of those names.
	SecureMode, PermanentLease, AllowNonPublicExternalIP bool
	// OtherHost is a LAN address other than this host's, the target of the
	// secure-mode probe (a mapping to a closed port, removed at once). The
	// zero value is the router's own LAN address.
	OtherHost netip.Addr
	// Ports is where probe keys are drawn from. The zero value is
	// DefaultPorts. It must lie at or above 1024.
	Ports igd.PortRange
	// Lease is the probe mappings' lease. Zero is DefaultLease.
	Lease time.Duration
	// PCP asks the router's PCP server (RFC 6887). Nil means a client for
	// the router's LAN address on pcp.Port.
	PCP *pcp.Client
	// RequirePCP says the load balancer writes only through PCP (the edge
	// cloud-config's gateway.protocol "pcp"): a router without a PCP
	// server then fails the pcp check, and one refusing THIRD_PARTY
	// without SecureMode warns (the load balancer maps to its own node).
	RequirePCP bool
	// ServicePorts are the external ports the load balancer will be asked
	// to map (the Services' ports). Each is read, and probed at its own key
	// (to this host) when the router holds nothing there: a CheckPort
	// finding per key says whether the router allows it, refuses it (Fail)
	// or holds it for another (Warn). When one lies below 1024, they replace
	// the CheckLowPorts probe. Nil probes none.
	ServicePorts []igd.Key
}

// Defaults of Options.
var (
	DefaultPorts = igd.PortRange{First: 61000, Last: 61999}
	DefaultLease = 2 * time.Minute
)

// lowPorts is where the probe for ports below 1024 draws its key: ports
// no common service a Service would expose uses.
var lowPorts = igd.PortRange{First: 1000, Last: 1023}

// Run checks the router c finds and reports what it allows. It returns an
// error only when no router answers (or o is invalid); everything a router
// refuses is a Finding, and so are routers that answer but cannot be used
// (the Report's Gateway is then zero).
func Run(ctx context.Context, c *igd.UPnPClient, o Options) (Report, error) {
	if o.Ports == (igd.PortRange{}) {
		o.Ports = DefaultPorts
	}
	if o.Ports.First < 1024 || o.Ports.First > o.Ports.Last {
		return Report{}, fmt.Errorf("routercheck: Options.Ports %d-%d: must be a range at or above 1024", o.Ports.First, o.Ports.Last)
	}
	if o.Lease == 0 {
		o.Lease = DefaultLease
	}
	if o.Lease < time.Second || o.Lease > igd.MaxLease {
		return Report{}, fmt.Errorf("routercheck: Options.Lease %s: must be between 1s and %s", o.Lease, igd.MaxLease)
	}
	for i, k := range o.ServicePorts {
		if !k.Protocol.Valid() || k.ExternalPort == 0 {
			return Report{}, fmt.Errorf("routercheck: Options.ServicePorts[%d] %s: want TCP or UDP and a port of 1-65535", i, k)
		}
	}
	gw, err := c.Discover(ctx)
	var nge *igderr.NoGatewayError[igd.Candidate]
	if errors.As(err, &nge) && len(nge.Found) > 0 {
		return unusable(nge, o.ServicePorts), nil
	}
	if err != nil {
		return Report{}, fmt.Errorf("routercheck: find the router: %w", err)
	}
	self, err := c.LocalAddr(ctx)
	if err != nil {
		return Report{}, fmt.Errorf("routercheck: this host's address toward the router: %w", err)
	}
	other := o.OtherHost
	if !other.IsValid() {
		other = gw.Addr
	}
	r := &run{c: c, o: o, tag: tagPrefix + randomHex()}
	rep := Report{Gateway: gw}
	add := func(f Finding) { rep.Findings = append(rep.Findings, f) }
	add(router(gw))
	add(service(gw))
	add(externalIP(gw, o))
	add(r.listing(ctx))
	self1, lease := r.mapSelf(ctx, self)
	add(self1)
	if self1.Status == Fail {
		const refused = "not probed: the router refused this host's own mapping"
		for _, name := range []string{CheckLease, CheckSecureMode, CheckLowPorts} {
			add(Finding{Check: name, Status: Skipped, Detail: refused})
		}
		for _, k := range o.ServicePorts {
			add(Finding{Check: CheckPort, Status: Skipped, Detail: refused, Port: &k})
		}
	} else {
		add(lease)
		add(r.secureMode(ctx, self, other))
		if slices.ContainsFunc(o.ServicePorts, func(k igd.Key) bool { return k.ExternalPort < 1024 }) {
			add(Finding{Check: CheckLowPorts, Status: Skipped, Detail: "not probed: the ports below 1024 given are probed one by one"})
		} else {
			add(r.lowPorts(ctx, self))
		}
		for _, k := range o.ServicePorts {
			add(r.servicePort(ctx, k, self))
		}
	}
	add(ipv6(gw))
	add(r.pcp(ctx, gw, self, other))
	return rep, nil
}

// unusable reports routers that answered but none of which discovery could
// use: one without an external address fails CheckExternalIP (miniupnpd
// answers an empty one when its WAN address is private or shared, as
// behind a carrier's NAT), any other CheckRouter; the ports are not probed.
func unusable(nge *igderr.NoGatewayError[igd.Candidate], ports []igd.Key) Report {
	noIP := slices.ContainsFunc(nge.Found, func(c igd.Candidate) bool { return c.Status == "Connected" && !c.ExternalIP.IsValid() })
	var rep Report
	for _, name := range checks {
		f := Finding{Check: name, Status: Skipped, Detail: "not probed: no usable router"}
		switch {
		case name == CheckRouter && noIP:
			f.Status, f.Detail = OK, nge.Error()
		case name == CheckRouter:
			f.Status, f.Detail = Fail, nge.Error()
			f.Fix = "see why each device found was rejected: only this host's default gateway is used, its WAN connection must be up and its description on its own address; to use another router, name it with gateway.url"
		case name == CheckExternalIP && noIP:
			f.Status = Fail
			f.Detail = "the router is connected but has no external address to give: its WAN address is private or shared (behind a carrier's CGNAT, or another router), and it maps no ports"
			f.Fix = "ask the ISP for a public IPv4 address, or put the upstream modem in bridge mode; ccmkit cannot map ports on this router"
		}
		rep.Findings = append(rep.Findings, f)
		if name == CheckLowPorts {
			for _, k := range ports {
				rep.Findings = append(rep.Findings, Finding{Check: CheckPort, Status: Skipped, Detail: "not probed: no usable router", Port: &k})
			}
		}
	}
	return rep
}

// checks are the Check* constants in the order of a Report's findings
// (CheckPort, one per port, follows CheckLowPorts).
var checks = []string{CheckRouter, CheckService, CheckExternalIP, CheckListing, CheckMapSelf, CheckLease, CheckSecureMode, CheckLowPorts, CheckIPv6, CheckPCP}

// router says which device is used and why, and which other hosts
// answered and were not used.
func router(gw igd.Gateway) Finding {
	d := fmt.Sprintf("%q at %s", gw.FriendlyName, gw.Location)
	if gw.Server != "" {
		d += fmt.Sprintf(", server %q", gw.Server)
	}
	switch {
	case strings.HasPrefix(gw.Accepted, "named by"):
		d += "; used because the configuration names it (gateway.url)"
	case gw.Accepted != "":
		d += "; used because it is " + gw.Accepted + ", the only router discovery accepts"
	}
	var ignored []string
	for _, c := range gw.Candidates {
		if c.Addr != gw.Addr {
			ignored = append(ignored, c.String())
		}
	}
	if len(ignored) > 0 {
		d += "; not used: " + strings.Join(ignored, "; ")
	}
	if gw.GuardedListing {
		d += fmt.Sprintf("; a daemon that dies when one table listing holds more than %d mappings of a protocol (miniupnpd before 2.3.4, or no version): listed only in parts that stay under that", upnp.SafeListWidth)
	}
	return Finding{Check: CheckRouter, Status: OK, Detail: d}
}

func service(gw igd.Gateway) Finding {
	var others []string
	for _, c := range gw.Candidates {
		if c.Addr == gw.Addr && (c.ServiceType != gw.ServiceType || c.Location != gw.Location) {
			others = append(others, c.String())
		}
	}
	d := "uses " + gw.ServiceType + " (" + gw.Reason + ")"
	if len(others) > 0 {
		d += "; also found on it: " + strings.Join(others, "; ")
	}
	if gw.ServiceType != upnp.ServiceWANIPConnection2 {
		d += "; an IGD:1 service: the table is read entry by entry"
	}
	return Finding{Check: CheckService, Status: OK, Detail: d}
}

func externalIP(gw igd.Gateway, o Options) Finding {
	f := Finding{Check: CheckExternalIP, Status: OK, Detail: fmt.Sprintf("%s, public", gw.ExternalIP)}
	if gw.PublicExternalIP {
		return f
	}
	f.Detail = fmt.Sprintf("%s is not public: the router is itself behind NAT (a carrier's CGNAT, or another router), so its mappings are not reachable from the internet", gw.ExternalIP)
	if o.AllowNonPublicExternalIP {
		f.Status = Warn
		f.Fix = "nothing to set (loadBalancer.allowNonPublicExternalIP is true): Services get this address, reachable from the upstream network only"
		return f
	}
	f.Status = Fail
	f.Fix = "ask the ISP for a public IPv4 address (or put the upstream router in bridge mode); or set loadBalancer.allowNonPublicExternalIP: true to serve the upstream network only"
	return f
}

func ipv6(gw igd.Gateway) Finding {
	f := Finding{Check: CheckIPv6, Status: OK}
	if gw.IPv6Firewall {
		f.Detail = "describes an IPv6 firewall service (WANIPv6FirewallControl:1) in its IPv4 description: IPv6 pinholes (the edge cloud-config's gateway.ipv6) are asked for over IPv6, which this check does not do"
	} else {
		f.Detail = "describes no IPv6 firewall service in its IPv4 description (an IGD:1 description hides it): UPnP IPv6 pinholes (the edge cloud-config's gateway.ipv6) need one on its IPv6 description; PCP opens them without"
	}
	return f
}

// run is one Run's probing state.
type run struct {
	c   *igd.UPnPClient
	o   Options
	tag string // the description of every probe mapping
}

func (r *run) listing(ctx context.Context) Finding {
	// A read of one port: any will do, free or not.
	_, err := r.c.ListPortMappings(ctx, igd.TCP, igd.PortRange{First: r.o.Ports.First, Last: r.o.Ports.First})
	switch {
	case err == nil:
		return Finding{Check: CheckListing, Status: OK, Detail: "lists its table (GetListOfPortMappings)"}
	case errors.Is(err, igd.ErrNotSupported):
		return Finding{Check: CheckListing, Status: OK, Detail: "does not list its table; it is read entry by entry (slower with many mappings): " + err.Error()}
	}
	return Finding{Check: CheckListing, Status: Warn, Detail: "listing failed: " + err.Error(), Fix: "see the router's log"}
}

// mapSelf probes a mapping to this host, with a finite lease unless the
// configuration asks for permanent ones, and returns that finding and the
// lease's.
func (r *run) mapSelf(ctx context.Context, self netip.Addr) (Finding, Finding) {
	lease := r.leaseFor()
	got, err := r.probe(ctx, r.o.Ports, self, lease)
	if err != nil {
		f := Finding{Check: CheckMapSelf, Status: Fail, Detail: fmt.Sprintf("mapping to this host (%s): %v", self, err),
			Fix: "turn UPnP on in the router (OpenWrt: uci set upnpd.config.enabled=1; miniupnpd.conf: enable_upnp=yes) and allow this host's address in its permission rules (OpenWrt: a perm_rule with action allow; miniupnpd.conf: an allow line before the deny)"}
		return f, Finding{}
	}
	mapped := Finding{Check: CheckMapSelf, Status: OK, Detail: fmt.Sprintf("maps %s to this host (%s)", got.Key(), self)}
	switch {
	case r.o.PermanentLease:
		return mapped, Finding{Check: CheckLease, Status: Skipped, Detail: "not probed: loadBalancer.permanentLease is true"}
	case got.Lease == 0:
		return mapped, Finding{Check: CheckLease, Status: Warn,
			Detail: "keeps only permanent mappings (refused a lease of " + lease.String() + "): mappings outlive a load balancer that stops without deleting them",
			Fix:    "set loadBalancer.permanentLease: true to skip the refused first try of every add"}
	}
	return mapped, Finding{Check: CheckLease, Status: OK, Detail: "accepts a lease of " + lease.String()}
}

func (r *run) secureMode(ctx context.Context, self, other netip.Addr) Finding {
	f := Finding{Check: CheckSecureMode}
	if other == self {
		f.Status, f.Detail = Skipped, fmt.Sprintf("not probed: Options.OtherHost %s is this host", other)
		return f
	}
	_, err := r.probe(ctx, r.o.Ports, other, r.leaseFor())
	switch {
	case err == nil && r.o.SecureMode:
		f.Status, f.Detail = OK, fmt.Sprintf("maps to another LAN host (%s): not in secure mode", other)
		f.Fix = "optional: set loadBalancer.secureMode: false to spread Services over the nodes"
	case err == nil:
		f.Status, f.Detail = OK, fmt.Sprintf("maps to another LAN host (%s): not in secure mode", other)
	case (errors.Is(err, igd.ErrConflict) || errors.Is(err, igd.ErrNotAuthorized)) && r.o.SecureMode:
		f.Status, f.Detail = OK, fmt.Sprintf("secure mode: refused a mapping to another LAN host (%s): %v; loadBalancer.secureMode is true", other, err)
	case errors.Is(err, igd.ErrConflict) || errors.Is(err, igd.ErrNotAuthorized):
		f.Status, f.Detail = Fail, fmt.Sprintf("secure mode: refused a mapping to another LAN host (%s): %v; Services hashed to another node would fail", other, err)
		f.Fix = "set loadBalancer.secureMode: true (every Service then maps to the node this process runs on); or turn secure mode off on the router (OpenWrt: uci set upnpd.config.secure_mode=0; uci commit upnpd; miniupnpd.conf: secure_mode=no)"
	default:
		f.Status, f.Detail = Warn, fmt.Sprintf("could not tell: a mapping to another LAN host (%s) failed: %v", other, err)
		f.Fix = "give Options.OtherHost (doctor: --other-host) the address of another node"
	}
	return f
}

func (r *run) lowPorts(ctx context.Context, self netip.Addr) Finding {
	got, err := r.probe(ctx, lowPorts, self, r.leaseFor())
	switch {
	case err == nil:
		return Finding{Check: CheckLowPorts, Status: OK, Detail: fmt.Sprintf("maps %s, below 1024", got.Key())}
	case errors.Is(err, igd.ErrNotAuthorized) || errors.Is(err, igd.ErrConflict):
		return Finding{Check: CheckLowPorts, Status: Warn,
			Detail: fmt.Sprintf("refuses a port of %d-%d: %v; a Service's port the router refuses gets the error ccmkit.io/NotAuthorized in its status, its other ports are served", lowPorts.First, lowPorts.Last, err),
			Fix:    "probe the ports your Services will use (doctor: --ports 80,443): it says per port what the router does and which rule allows it; or give Services ports at or above 1024"}
	}
	return Finding{Check: CheckLowPorts, Status: Warn, Detail: "could not tell: " + err.Error(), Fix: "see the router's log"}
}

// servicePort reads k and, when the router holds nothing there, probes it
// with a mapping to this host: what the router will do when a Service asks
// for it.
func (r *run) servicePort(ctx context.Context, k igd.Key, self netip.Addr) Finding {
	f := Finding{Check: CheckPort, Port: &k}
	held, err := r.c.GetPortMapping(ctx, k.Protocol, k.ExternalPort)
	switch {
	case err == nil:
		f.Status = Warn
		f.Detail = fmt.Sprintf("held by %s:%d (%q): the router allows the port, but a Service gets it only once it is free (ccmkit.io/PortInUse until then)", held.InternalClient, held.InternalPort, held.Description)
		f.Fix = "nothing if that is the load balancer's own mapping (its description starts with ck1 and the cluster name); else free the port on the router, or give the Service another port"
		return f
	case !errors.Is(err, igd.ErrNoSuchEntry):
		f.Status, f.Detail, f.Fix = Warn, fmt.Sprintf("could not tell: read %s: %v", k, err), "see the router's log"
		return f
	}
	got, err := r.probeAt(ctx, k, self, r.leaseFor())
	switch {
	case err == nil:
		f.Status, f.Detail = OK, fmt.Sprintf("allows it: mapped %s to this host (%s:%d), removed at once", k, self, got.InternalPort)
	case errors.Is(err, igd.ErrNotAuthorized) || errors.Is(err, igd.ErrConflict):
		f.Status = Fail
		f.Detail = fmt.Sprintf("refuses it: %v; a Service's port %s gets ccmkit.io/NotAuthorized (a Service with no other port stays <pending>)", err, k)
		f.Fix = allowPortFix(k.ExternalPort)
	default:
		f.Status, f.Detail, f.Fix = Warn, "could not tell: "+err.Error(), "see the router's log"
	}
	return f
}

// allowPortFix says how to let the load balancer map external port on a
// miniupnpd router, whose permission rules are read first match first:
// the miniupnpd.conf line, and the OpenWrt perm_rule its init script turns
// into that line (one port, or one N-M range, per rule; internal ports are
// nodePorts, 30000-32767 by default).
func allowPortFix(port uint16) string {
	return fmt.Sprintf("allow external port %d on the router, for internal ports 1024-65535 (nodePorts): "+
		"miniupnpd.conf: allow %d 0.0.0.0/0 1024-65535 above the deny line; "+
		"OpenWrt: uci add upnpd perm_rule; uci set upnpd.@perm_rule[-1].action=allow; uci set upnpd.@perm_rule[-1].ext_ports=%d; "+
		"uci set upnpd.@perm_rule[-1].int_addr=0.0.0.0/0; uci set upnpd.@perm_rule[-1].int_ports=1024-65535; "+
		"uci reorder upnpd.@perm_rule[-1]=1; uci commit upnpd; service miniupnpd restart (the rule must come before Default deny)", port, port, port)
}

func (r *run) leaseFor() time.Duration {
	if r.o.PermanentLease {
		return 0
	}
	return r.o.Lease
}

// probe adds a probe mapping to target at a free key of ports, reads it
// back and removes it. It returns the mapping as the router stored it (Lease
// 0 when it keeps only permanent ones) or the router's refusal.
func (r *run) probe(ctx context.Context, ports igd.PortRange, target netip.Addr, lease time.Duration) (igd.Mapping, error) {
	k, err := r.freeKey(ctx, ports)
	if err != nil {
		return igd.Mapping{}, err
	}
	return r.probeAt(ctx, k, target, lease)
}

// probeAt is probe at k, which the caller has just read free.
func (r *run) probeAt(ctx context.Context, k igd.Key, target netip.Addr, lease time.Duration) (igd.Mapping, error) {
	m := igd.Mapping{Protocol: k.Protocol, ExternalPort: k.ExternalPort, InternalClient: target,
		InternalPort: probeInternalPort(k), Description: r.tag, Lease: lease, Enabled: true}
	sent, err := r.c.AddPortMapping(ctx, m)
	switch {
	case err != nil && refusedStoringNothing(err):
		return igd.Mapping{}, err
	case err != nil:
		// No answer (a timeout, a lost reply) or an error the router may
		// give after storing the probe (501): remove it if it is there and
		// still the probe's.
		return igd.Mapping{}, errors.Join(err, r.removeIfOurs(ctx, m))
	}
	stored, err := r.c.GetPortMapping(ctx, k.Protocol, k.ExternalPort)
	if err != nil {
		return igd.Mapping{}, fmt.Errorf("read the probe %s back: %w", k, err)
	}
	if !isProbe(stored, m) {
		return igd.Mapping{}, fmt.Errorf("probe %s was taken by %s:%d (%q) before it could be removed; left alone", k, stored.InternalClient, stored.InternalPort, stored.Description)
	}
	if err := r.c.DeletePortMapping(ctx, k.Protocol, k.ExternalPort); err != nil {
		return igd.Mapping{}, fmt.Errorf("remove the probe %s (its lease ends it): %w", k, err)
	}
	stored.Lease = sent.Lease
	return stored, nil
}

// removeIfOurs deletes the mapping at m's key when reading it shows the
// probe m (isProbe), and leaves anything else alone.
func (r *run) removeIfOurs(ctx context.Context, m igd.Mapping) error {
	k := m.Key()
	got, err := r.c.GetPortMapping(ctx, k.Protocol, k.ExternalPort)
	switch {
	case errors.Is(err, igd.ErrNoSuchEntry):
		return nil
	case err != nil:
		return fmt.Errorf("read %s to remove a probe the router may hold (its lease ends it): %w", k, err)
	case !isProbe(got, m):
		return nil
	}
	if err := r.c.DeletePortMapping(ctx, k.Protocol, k.ExternalPort); err != nil {
		return fmt.Errorf("remove the probe %s (its lease ends it): %w", k, err)
	}
	return nil
}

// refusedStoringNothing reports whether err is a router's answer that says
// the add was not stored: a refusal by its rules (606), a key held by
// another (718), arguments or a lease it does not take (402, 724, 725) or
// a full table (728). After those the probe's key is not read for removal:
// what is there is another's.
func refusedStoringNothing(err error) bool {
	switch igd.Code(err) {
	case upnp.CodeInvalidArgs, upnp.CodeNotAuthorized, upnp.CodeConflict, upnp.CodeSamePortValuesRequired,
		upnp.CodeOnlyPermanentLeases, upnp.CodeNoPortMapsAvailable:
		return true
	}
	return false
}

// tagPrefix starts every probe's description; random hex follows.
const tagPrefix = "ccmkit-check "

// minTagCut is the shortest cut of a probe's description taken for the
// probe: the prefix and three of its random hex digits (routers cut
// descriptions, some at 16 bytes). A shorter description ("ccmkit", "c")
// is another program's.
const minTagCut = len(tagPrefix) + 3

// isProbe reports whether stored, as read, is the probe m: the same
// internal client and port (0: the router did not say), and the probe's
// description or a cut of it at least minTagCut long.
func isProbe(stored, m igd.Mapping) bool {
	return stored.InternalClient == m.InternalClient &&
		(stored.InternalPort == m.InternalPort || stored.InternalPort == 0) &&
		len(stored.Description) >= min(minTagCut, len(m.Description)) && strings.HasPrefix(m.Description, stored.Description)
}

// pcpCallTimeout bounds each PCP probe: a router without a PCP server may
// drop the request rather than refuse it.
const pcpCallTimeout = 3 * time.Second

// pcp probes the router's PCP server: a MAP for this host with
// PREFER_FAILURE at a free key, then one for other with THIRD_PARTY, each
// deleted at once with its nonce (random, this run's own).
func (r *run) pcp(ctx context.Context, gw igd.Gateway, self, other netip.Addr) Finding {
	f := Finding{Check: CheckPCP}
	c := r.o.PCP
	if c == nil {
		var err error
		if c, err = pcp.NewClient(pcp.Config{Server: netip.AddrPortFrom(gw.Addr, pcp.Port), CallTimeout: pcpCallTimeout}); err != nil {
			f.Status, f.Detail = Warn, "could not tell: "+err.Error()
			return f
		}
	}
	mapped, err := r.pcpProbe(ctx, (*pcpwire.Client)(c), netip.Addr{})
	switch {
	case err != nil && errors.As(err, new(*pcpwire.ResultError)):
		f.Status, f.Detail = OK, "a PCP server answers on port 5351 but refused a mapping for this host: "+err.Error()
		if r.o.RequirePCP {
			f.Status, f.Fix = Fail, "gateway.protocol: auto (writes through UPnP where PCP refuses), or allow PCP mappings on the router"
		}
		return f
	case err != nil:
		f.Status, f.Detail = OK, "no PCP server answered on port 5351 ("+err.Error()+"): the load balancer speaks UPnP IGD"
		if r.o.RequirePCP {
			f.Status, f.Detail = Fail, "no PCP server answered on port 5351 ("+err.Error()+")"
			f.Fix = "miniupnpd.conf: enable_natpmp=yes (OpenWrt: uci set upnpd.config.enable_natpmp=1), or gateway.protocol: auto"
		}
		return f
	}
	f.Status = OK
	f.Detail = fmt.Sprintf("a PCP server answers on port 5351: mapped %s for this host", mapped)
	if other == self {
		f.Detail += "; THIRD_PARTY not probed (Options.OtherHost is this host)"
		return f
	}
	switch _, err := r.pcpProbe(ctx, (*pcpwire.Client)(c), other); {
	case err == nil:
		f.Detail += fmt.Sprintf("; THIRD_PARTY allowed (mapped for %s)", other)
	case errors.Is(err, pcpwire.ErrUnsupportedOption):
		f.Detail += fmt.Sprintf("; THIRD_PARTY refused (for %s): through PCP a host maps only for itself, as in secure mode (miniupnpd.conf: pcp_allow_thirdparty=yes allows it)", other)
		if r.o.RequirePCP && !r.o.SecureMode {
			f.Status, f.Fix = Warn, "every Service will map to the CCM's own node; miniupnpd.conf: pcp_allow_thirdparty=yes lets it map to any node (or gateway.protocol: auto, through UPnP)"
		}
	default:
		f.Detail += fmt.Sprintf("; THIRD_PARTY could not be told (for %s): %v", other, err)
	}
	return f
}

// pcpProbe maps a free key through PCP for target (zero: this host) with
// PREFER_FAILURE and a random nonce, and deletes it with that nonce.
func (r *run) pcpProbe(ctx context.Context, c *pcpwire.Client, target netip.Addr) (igd.Key, error) {
	k, err := r.freeKey(ctx, r.o.Ports)
	if err != nil {
		return igd.Key{}, err
	}
	var nonce [12]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return igd.Key{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, pcpCallTimeout)
	defer cancel()
	internalPort := probeInternalPort(k)
	res, err := c.Map(ctx, pcpwire.MapRequest{Protocol: k.Protocol, InternalAddr: target, InternalPort: internalPort,
		ExternalPort: k.ExternalPort, Lifetime: r.o.Lease, PreferFailure: true, Nonce: nonce})
	if err != nil {
		return igd.Key{}, err
	}
	if err := c.Delete(ctx, k.Protocol, target, internalPort, nonce); err != nil {
		return igd.Key{}, fmt.Errorf("remove the PCP probe %s (its lifetime of %s ends it): %w", k, res.Lifetime, err)
	}
	return k, nil
}

// probeInternalPort is the internal port of the probe at k: one of the
// nodePort range (30000-32767), as the load balancer's are, since routers'
// permission rules bound internal ports too.
func probeInternalPort(k igd.Key) uint16 { return 30000 + k.ExternalPort%2768 }

// freeKeyTries bounds the keys read before giving up on finding a free one.
const freeKeyTries = 8

// freeKey returns a TCP key of ports that holds no mapping, read just now.
func (r *run) freeKey(ctx context.Context, ports igd.PortRange) (igd.Key, error) {
	width := int64(ports.Last) - int64(ports.First) + 1
	for range freeKeyTries {
		n, err := rand.Int(rand.Reader, big.NewInt(width))
		if err != nil {
			return igd.Key{}, err
		}
		k := igd.Key{Protocol: igd.TCP, ExternalPort: ports.First + uint16(n.Int64())}
		_, err = r.c.GetPortMapping(ctx, k.Protocol, k.ExternalPort)
		switch {
		case errors.Is(err, igd.ErrNoSuchEntry):
			return k, nil
		case err != nil:
			return igd.Key{}, fmt.Errorf("read %s: %w", k, err)
		}
	}
	return igd.Key{}, fmt.Errorf("no free key found in TCP/%d-%d after %d tries", ports.First, ports.Last, freeKeyTries)
}

func randomHex() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
