// This file is the IPv6 family of a Service: pinholes in the router's IPv6
// firewall to one node's global address (no NAT), one per port, through
// Config.Pinholes. pipeline.go's family step (serveIPv6) plans what the
// family needs of the Service (a pinholeRequest) and calls servePinholes
// beside the IPv4 mappings; withdrawal closes them (closePinholes, with the
// pinholes the status records); the background work renews and repairs them.

package loadbalancer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/cloud-provider/api"
	"k8s.io/klog/v2"

	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/pinhole"
)

// MaxPinholeLease bounds a pinhole's lease: UPnP's WANIPv6FirewallControl
// takes 1 s to 86400 s. A longer Config.Lease (or PermanentLease) opens
// pinholes for this long, renewed as mappings are.
const MaxPinholeLease = 24 * time.Hour

// PinholeClient opens the router's IPv6 firewall to a node's global address
// (no NAT): a host on the internet then reaches [InternalClient]:InternalPort
// (the Service port, not a nodePort), where
// kube-proxy takes the Service's traffic for its ingress address. Each call
// should be bounded by the client itself, as igd's are.
type PinholeClient interface {
	// OpenPinhole opens p, or renews it when the router already has it,
	// in as few router calls as the protocol allows (UPnP: one AddPinhole;
	// PCP: a delete then a MAP, see igd/pcp).
	OpenPinhole(ctx context.Context, p pinhole.Pinhole) error
	// ClosePinhole closes p; nil when the router no longer has it.
	ClosePinhole(ctx context.Context, p pinhole.Pinhole) error
}

// AnyHostPinholes is a PinholeClient that says whether it opens pinholes for
// any LAN host (PCP with THIRD_PARTY). A client that does not implement it,
// or answers false, opens them only for this host's own address and ports
// from 1024 (UPnP: miniupnpd refuses others with 606): its Services are
// then served on IPv6 only through this process's node.
type AnyHostPinholes interface {
	// PinholesForAnyHost reports whether the client opens pinholes for any
	// LAN host's address now; it is asked at each use, so a client may
	// answer false once the router refused THIRD_PARTY.
	PinholesForAnyHost() bool
}

// OwnHostPinholes is a PinholeClient that opens pinholes only for its own
// host (see AnyHostPinholes) and says which addresses that host has. With
// Config.NodeName empty, the load balancer then finds its node by them too
// (see Config.NodeName): Nodes that report only their IPv6 address are
// found. igd/pinhole's UPnPClient is one.
type OwnHostPinholes interface {
	// LocalAddrs returns this host's global IPv6 addresses the client
	// opens pinholes to (UPnP: those its requests may be sent from). A
	// Node reporting one of them is this host's: no other host has it.
	LocalAddrs(ctx context.Context) ([]netip.Addr, error)
}

var _ interface {
	PinholeClient
	PinholeProber
	OwnHostPinholes
} = (*pinhole.UPnPClient)(nil)

// PinholeProber is a PinholeClient that can ask the router whether it still
// holds a pinhole (UPnP: GetPinholePackets by the pinhole's UniqueID). When
// this process holds no mapping to probe (IPv6-only Services), the
// background probe then checks one pinhole it opened, in turn: one router
// call per Config.ProbeInterval, and a router restart that lost it is
// repaired at once instead of at the next renewal.
type PinholeProber interface {
	// PinholeHeld reports whether the router holds p (its lease unused).
	PinholeHeld(ctx context.Context, p pinhole.Pinhole) (bool, error)
}

// pinholeLease is the lease of every pinhole a status records: the
// mappings', at most MaxPinholeLease.
func (c Config) pinholeLease() time.Duration { return min(c.effectiveLease(), MaxPinholeLease) }

// firstPinholeLease is the lease of a pinhole opened while background work
// runs and no status records it yet: four renewal intervals (at most
// pinholeLease). A pinhole has no description on the router, so until a
// status records it no other process can find it: one whose opening answer
// was lost, or whose process stopped before the status was written, ends
// with this lease when its Service is not served there afterwards. The
// first operation that sees the status record it (the next pass, a renewal
// interval later at most) opens it for pinholeLease, so a process that
// stops after the status recorded it leaves it open for the lease, as its
// mappings; one whose status never records it is renewed when due (after a
// renewal interval and a half), for the first lease again.
func (c Config) firstPinholeLease() time.Duration { return min(c.pinholeLease(), 4*c.RenewInterval) }

// pinholeKey is a pinhole without its lease.
type pinholeKey struct {
	Protocol igd.Protocol
	Addr     netip.Addr
	Port     uint16
}

// pinhole is k opened for lease.
func (k pinholeKey) pinhole(lease time.Duration) pinhole.Pinhole {
	return pinhole.Pinhole{Protocol: k.Protocol, InternalClient: k.Addr, InternalPort: k.Port, Lease: lease}
}

// minPinholePort is the lowest port a client that opens pinholes only for
// its own host (UPnP) may open: miniupnpd refuses lower ones with 606.
const minPinholePort = 1024

// pinholeRequest is what the IPv6 family step needs of a Service, planned
// by the pipeline (serveIPv6): its ports, those Config.Admit admits, the
// pinholes its status records and, for externalTrafficPolicy Local, the
// nodes with a ready endpoint.
type pinholeRequest struct {
	plans    []portPlan             // the ports of the spec, sorted by key
	admitted []portPlan             // those Config.Admit admits
	refused  map[igd.Key]*PortError // the others, each with its PortError
	recorded []pinholeKey           // the pinholes its status records
	local    map[string]bool        // Local: the nodes with a ready endpoint; nil: any node
}

// servePinholes serves a Service's IPv6 family in turn t: one pinhole per
// admitted port of req, to one node's global address (ipv6Target), opened
// when this process holds none there and renewed when due; then every other
// pinhole this process holds for t's Service or req.recorded names is closed
// (a port or node left). It returns the address the pinholes go to and each port of
// req.plans that could not be opened with its reason, or why the family
// cannot be served: no node, every port refused, or a router that failed.
func (lb *LoadBalancer) servePinholes(ctx context.Context, t *turn, req pinholeRequest, nodes []*v1.Node) (netip.Addr, map[igd.Key]*PortError, error) {
	o := t.owner
	failed := req.refused
	if failed == nil {
		failed = make(map[igd.Key]*PortError)
	}
	claims, err := lb.pinholeClaims(o, req.recorded)
	if err != nil {
		// Its pinholes stay: the statuses are not known yet. It holds
		// the recorded ones, due at once (the status this operation
		// returns keeps recording them, joinFamilies), and the next
		// operation closes those no longer wanted.
		lb.update(o, func(s *serviceState) {
			for _, k := range req.recorded {
				if _, held := s.pinholes[k]; !held {
					s.holdPinhole(k, heldPinhole{})
				}
			}
		})
		return netip.Addr{}, nil, err
	}
	tgt, err := lb.ipv6Target(ctx, o, nodes, req, claims)
	if err != nil {
		// IPv6 not served: its status will record no pinhole, so none
		// is kept (a restarted process could not find it, and the
		// address may be another host's once no node reports it).
		return netip.Addr{}, nil, errors.Join(err, lb.closePinholes(ctx, t, lb.notClosed(o, req.recorded), nil))
	}
	anyHost := lb.pinholeScope != nil && lb.pinholeScope.PinholesForAnyHost()
	keep := make(map[pinholeKey]bool)
	var errs []error
	for _, p := range req.admitted {
		k := pinholeKey{Protocol: p.key.Protocol, Addr: tgt.addr, Port: p.key.ExternalPort}
		if !anyHost && k.Port < minPinholePort {
			failed[p.key] = &PortError{Service: o.key(), Key: p.key,
				Err: fmt.Errorf("%w: the router opens IPv6 pinholes from port %d only (UPnP)", igd.ErrNotAuthorized, minPinholePort)}
			continue
		}
		// ipv6Target chose an address where no port is taken; one taken
		// since (another Service of this process reserved it in between)
		// fails the family, and the next try chooses again: the status
		// never lists the address with a port another is served at.
		recorded := slices.Contains(req.recorded, k)
		due, pe := lb.reservePinhole(o, k, recorded)
		if pe != nil {
			errs = append(errs, lb.retry(pe))
			continue
		}
		keep[k] = true
		if !due {
			continue
		}
		if err := lb.openPinhole(ctx, o, k, recorded); err != nil {
			if pe := portRefusal(&PortError{Service: o.key(), Key: p.key, Err: err}); pe != nil {
				failed[p.key] = pe
				delete(keep, k)
				continue
			}
			errs = append(errs, fmt.Errorf("loadbalancer: service %s: open IPv6 pinhole %s %s: %w", o.key(), k.Protocol, netip.AddrPortFrom(k.Addr, k.Port), err))
		}
	}
	errs = append(errs, lb.closePinholes(ctx, t, lb.notClosed(o, req.recorded), keep))
	if err := errors.Join(errs...); err != nil {
		return netip.Addr{}, nil, err
	}
	if len(req.plans) > 0 && len(failed) == len(req.plans) {
		return netip.Addr{}, nil, joinPortErrors(failed)
	}
	return tgt.addr, failed, nil
}

// ipv6Target returns the node o's pinholes go to, with its address: among
// the eligible nodes with a global IPv6 address (through a client that opens
// pinholes only for its own host, this process's node only; for Local, those
// of req.local, with a ready endpoint) where none of its ports is taken (see
// takenPorts), the one they go to now (held or recorded), else the highest
// rendezvous hash, as for IPv4. A Service's IPv6 ingress is the node's own
// address, and kube-proxy takes the traffic to every port of a Service at
// each of its ingress IPs (whatever each port's error), so a Service given
// an ingress where one of its ports is another's would take that one's
// traffic too; a pinhole is per node address, so the port may be free at
// the next node. A node's address is the one its pinholes go to while it
// reports it, else its first global address (globalIPv6). With none:
// ErrNoEligibleNode (through a client for this host only, ErrPortInUse when
// its ports are taken there) and an api.RetryError.
func (lb *LoadBalancer) ipv6Target(ctx context.Context, o owner, nodes []*v1.Node, req pinholeRequest, claims map[pinholeKey]string) (target, error) {
	local := req.local
	current := lb.pinholeAddrs(o, req.recorded)
	reasons := make(map[string]string)
	var cands []target
	for _, n := range nodes {
		if n == nil {
			continue
		}
		guas := globalIPv6(n)
		switch why := unfit(n); {
		case why != "":
			reasons[n.Name] = why
		case len(guas) == 0:
			reasons[n.Name] = "has no global IPv6 address (InternalIP or ExternalIP; not ULA or link-local)"
		default:
			i := slices.IndexFunc(guas, func(a netip.Addr) bool { return slices.Contains(current, a) })
			cands = append(cands, target{name: n.Name, addr: guas[max(i, 0)]})
		}
	}
	if local != nil {
		cands = slices.DeleteFunc(cands, func(t target) bool {
			if !local[t.name] {
				reasons[t.name] = "has no ready endpoint of the Service (externalTrafficPolicy Local)"
			}
			return !local[t.name]
		})
	}
	taken := lb.takenPorts(o, req.plans, cands, claims)
	if lb.pinholeScope == nil || !lb.pinholeScope.PinholesForAnyHost() {
		name, _, err := lb.selfNode(ctx, nodes)
		if err != nil {
			return target{}, fmt.Errorf("loadbalancer: service %s on IPv6: %w", o.key(), err)
		}
		cands = slices.DeleteFunc(cands, func(t target) bool { return t.name != name })
		if len(cands) == 0 {
			why := cmp.Or(reasons[name], "is not among the cluster's nodes")
			return target{}, lb.retry(fmt.Errorf("%w for service %s on IPv6: the router opens pinholes only to this node (UPnP), %s, which %s",
				ErrNoEligibleNode, o.key(), name, why))
		}
		if pe := taken[cands[0].addr]; pe != nil {
			return target{}, lb.retry(pe) // the only node it may be served at
		}
	}
	inUse := false
	cands = slices.DeleteFunc(cands, func(t target) bool {
		pe := taken[t.addr]
		if pe != nil {
			reasons[t.name] = fmt.Sprintf("has %s in use at its address %s by service %s", pe.Key, t.addr, pe.Claimant)
			inUse = true
		}
		return pe != nil
	})
	slices.SortFunc(cands, func(a, b target) int { return cmp.Compare(a.name, b.name) })
	tgt, ok := chooseTarget(o.key(), cands, current)
	switch {
	case !ok && inUse:
		return target{}, lb.retry(fmt.Errorf("%w for service %s on IPv6 (%w): %s", ErrNoEligibleNode, o.key(), ErrPortInUse, describeReasons(reasons)))
	case !ok:
		return target{}, lb.retry(fmt.Errorf("%w for service %s on IPv6: %s", ErrNoEligibleNode, o.key(), describeReasons(reasons)))
	}
	return tgt, nil
}

// takenPorts returns, for each candidate's address where a port of plans is
// taken by another Service (its status records the pinhole: claims; or
// another Service of this process holds it), an ErrPortInUse PortError for
// the first such port, naming its holder.
func (lb *LoadBalancer) takenPorts(o owner, plans []portPlan, cands []target, claims map[pinholeKey]string) map[netip.Addr]*PortError {
	out := make(map[netip.Addr]*PortError)
	lb.mu.Lock()
	defer lb.mu.Unlock()
	for _, c := range cands {
		for _, p := range plans {
			k := pinholeKey{Protocol: p.key.Protocol, Addr: c.addr, Port: p.key.ExternalPort}
			holder, ok := claims[k]
			if !ok {
				holder, ok = lb.pinholeHolderLocked(o, k)
			}
			if ok {
				out[c.addr] = &PortError{Service: o.key(), Key: p.key, Claimant: holder,
					Err: fmt.Errorf("%w: on IPv6 at %s, the address of node %s", ErrPortInUse, c.addr, c.name)}
				break
			}
		}
	}
	return out
}

// pinholeClaims returns the pinholes the statuses of the cluster's Services
// other than o's record, to the first such Service by namespace/name: those
// handed to this LoadBalancer, opted in, not being deleted, with IPv6. As
// for an IPv4 port, a Service whose status records a pinhole keeps it; o is
// not served one another's status records, unless its own records it too
// (own). Only running background work knows the Services, and a pinhole
// has no description on the router, so the statuses are its only record:
// while the Service cache is not current (Initialize without Run yet, Run
// syncing, or returned) it returns an api.RetryError rather than serve
// blind, as waitNodes does for mappings. Without background work at all
// (no Initialize) there is no record to read: none, and the foreground
// arbitrates alone, among the Services of its calls.
func (lb *LoadBalancer) pinholeClaims(o owner, own []pinholeKey) (map[pinholeKey]string, error) {
	ph, w := lb.bg.now()
	switch ph {
	case phaseRunning:
	case phaseNotStarted:
		return nil, nil
	default:
		return nil, api.NewRetryError(fmt.Sprintf("loadbalancer: service %s on IPv6: waiting for the Service cache to sync, to learn the pinholes other Services' statuses record (background work %s)", o.key(), ph), lb.cfg.RetryAfter)
	}
	svcs, err := w.services.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("loadbalancer: service %s on IPv6: list services: %w", o.key(), err)
	}
	claims := make(map[pinholeKey]string)
	for _, s := range svcs {
		if s.Namespace == o.namespace && s.Name == o.name || !lb.handed(s) || !lb.optedIn(s) || s.DeletionTimestamp != nil ||
			!slices.Contains(families(s), v1.IPv6Protocol) {
			continue
		}
		name := s.Namespace + "/" + s.Name
		for _, k := range recordedPinholes(s) {
			if c, ok := claims[k]; !slices.Contains(own, k) && (!ok || name < c) {
				claims[k] = name
			}
		}
	}
	return claims, nil
}

// reservePinhole makes o the holder of k in this process, unless another
// Service holds it (ErrPortInUse naming it), and reports whether k is due to
// be opened: not held yet, due for renewal, or opened for its first lease
// and now recorded (o's status records it), to be opened for the lease.
func (lb *LoadBalancer) reservePinhole(o owner, k pinholeKey, recorded bool) (due bool, _ *PortError) {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	if holder, other := lb.pinholeHolderLocked(o, k); other {
		return false, &PortError{Service: o.key(), Key: igd.Key{Protocol: k.Protocol, ExternalPort: k.Port}, Claimant: holder,
			Err: fmt.Errorf("%w: on IPv6 at %s", ErrPortInUse, k.Addr)}
	}
	s := lb.stateLocked(o)
	h, held := s.pinholes[k]
	if !held {
		s.holdPinhole(k, heldPinhole{})
	}
	return !held || !lb.cfg.Clock.Now().Before(h.renewAt) || recorded && h.first, nil
}

// openPinhole opens (or renews) k for o: one router call, for the lease
// (recorded: o's status records k), else, while background work runs to
// lengthen it, for the first lease (firstPinholeLease; due again as soon as
// the status records it, see reservePinhole). Done, it is due for
// renewal when less than half its lease and half a renewal interval is
// left, counted from when the call was sent; refused, o no longer holds it;
// failed otherwise, o holds it (a lost reply may have opened it), due at once.
func (lb *LoadBalancer) openPinhole(ctx context.Context, o owner, k pinholeKey, recorded bool) error {
	lease := lb.cfg.pinholeLease()
	if ph, _ := lb.bg.now(); !recorded && ph == phaseRunning {
		lease = lb.cfg.firstPinholeLease()
	}
	sent := lb.cfg.Clock.Now()
	err := lb.cfg.Pinholes.OpenPinhole(ctx, k.pinhole(lease))
	refused := err != nil && portRefusal(&PortError{Err: err}) != nil
	lb.update(o, func(s *serviceState) {
		switch {
		case err == nil:
			s.holdPinhole(k, heldPinhole{renewAt: sent.Add(lease/2 - lb.cfg.RenewInterval/2), first: lease < lb.cfg.pinholeLease()})
		case refused:
			delete(s.pinholes, k)
		default:
			s.holdPinhole(k, heldPinhole{})
		}
	})
	if err == nil {
		klog.FromContext(ctx).V(2).Info("Opened IPv6 pinhole", "service", o.key(), "protocol", k.Protocol, "address", k.Addr, "port", k.Port, "lease", lease)
	}
	return err
}

// closePinholes closes, in turn t, every pinhole of t's Service not in keep:
// those this process holds for it and those recorded (what its status
// records, recordedPinholes: what another process, or this one before a
// restart, opened), but none another Service of this process holds. The
// Service holds each from when it is picked until its close returns, so no
// other Service of this process opens it meanwhile. One it
// fails to close is held, and closed again by the next operation; one the
// router refuses to close (UPnP: not this host's) is left to its lease.
// Without Config.Pinholes, or with none to close, it calls nothing.
func (lb *LoadBalancer) closePinholes(ctx context.Context, t *turn, recorded []pinholeKey, keep map[pinholeKey]bool) error {
	if lb.cfg.Pinholes == nil {
		return nil
	}
	o := t.owner
	recorded = slices.Clone(recorded) // the caller's, appended to
	var stale []pinholeKey
	lb.mu.Lock()
	if s := lb.services[o.token]; s != nil {
		for k := range s.pinholes {
			recorded = append(recorded, k)
		}
	}
	for _, k := range recorded {
		if _, other := lb.pinholeHolderLocked(o, k); !keep[k] && !slices.Contains(stale, k) && !other {
			stale = append(stale, k)
		}
	}
	// o holds each until its close returns, as a mapping being removed is
	// held: another Service of this process is refused it (ErrPortInUse,
	// retried) instead of opening it for the close to remove.
	lb.updateLocked(o, func(s *serviceState) {
		for _, k := range stale {
			s.holdPinhole(k, heldPinhole{})
		}
	})
	lb.mu.Unlock()
	slices.SortFunc(stale, comparePinholes)
	var errs []error
	for _, k := range stale {
		err := lb.cfg.Pinholes.ClosePinhole(ctx, k.pinhole(lb.cfg.pinholeLease()))
		refused := err != nil && portRefusal(&PortError{Err: err}) != nil
		if refused {
			// The router will not close it for this host (UPnP: another
			// node's, opened by a process that ran there): its lease ends it.
			klog.FromContext(ctx).V(2).Info("Router refused to close an IPv6 pinhole; left to its lease", "service", o.key(), "address", k.Addr, "port", k.Port, "err", err)
			err = nil
		}
		lb.update(o, func(s *serviceState) {
			if err == nil {
				s.closePinhole(k, lb.cfg.Clock.Now())
				return
			}
			s.holdPinhole(k, heldPinhole{})
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("close IPv6 pinhole %s %s: %w", k.Protocol, netip.AddrPortFrom(k.Addr, k.Port), err))
			continue
		}
		if !refused {
			klog.FromContext(ctx).V(2).Info("Closed IPv6 pinhole", "service", o.key(), "protocol", k.Protocol, "address", k.Addr, "port", k.Port)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("loadbalancer: service %s: %w", o.key(), err)
	}
	return nil
}

// notClosed returns the pinholes of recorded (what o's status records) that
// this process has not closed for o within the last renewal interval since
// it last held them: the retries of a Service whose status goes on recording
// pinholes it no longer has close each at most once per renewal interval
// (through UPnP a close opens the pinhole for a second), and one another
// process opened again (a fail-over's overlap) is closed again within one,
// not left to its lease. A withdrawal closes every recorded pinhole, closed
// before or not.
func (lb *LoadBalancer) notClosed(o owner, recorded []pinholeKey) []pinholeKey {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	s := lb.services[o.token]
	if s == nil || len(s.closed) == 0 {
		return recorded
	}
	// One the status no longer records, or closed a renewal interval ago,
	// needs no memory.
	maps.DeleteFunc(s.closed, func(k pinholeKey, at time.Time) bool {
		return !slices.Contains(recorded, k) || lb.cfg.Clock.Since(at) >= lb.cfg.RenewInterval
	})
	return slices.DeleteFunc(slices.Clone(recorded), func(k pinholeKey) bool { _, ok := s.closed[k]; return ok })
}

// pinholeHolderLocked returns the name of the Service of this process other
// than o that holds k, and whether one does. The caller holds lb.mu.
func (lb *LoadBalancer) pinholeHolderLocked(o owner, k pinholeKey) (name string, held bool) {
	for token, s := range lb.services {
		if _, ok := s.pinholes[k]; ok && token != o.token {
			return s.name, true
		}
	}
	return "", false
}

// pinholesGone reports whether o's IPv6 family, not served with err, holds
// no pinhole: servePinholes found no node for it, or a port of it taken
// (ErrNoEligibleNode, ErrPortInUse), and closed every pinhole this process
// held for it or its status recorded (one that failed to close is still
// held). Its status must then list none: pinholeClaims would read them as
// its, and keep every other Service off them for as long as it is not
// served.
func (lb *LoadBalancer) pinholesGone(o owner, err error) bool {
	return (errors.Is(err, ErrNoEligibleNode) || errors.Is(err, ErrPortInUse)) && !lb.holdsPinholes(o, nil)
}

// pinholeAddrs returns the addresses o's pinholes go to: held, or recorded
// (in its status).
func (lb *LoadBalancer) pinholeAddrs(o owner, recorded []pinholeKey) []netip.Addr {
	var out []netip.Addr
	for _, k := range recorded {
		out = append(out, k.Addr)
	}
	lb.mu.Lock()
	if s := lb.services[o.token]; s != nil {
		for k := range s.pinholes {
			out = append(out, k.Addr)
		}
	}
	lb.mu.Unlock()
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

// holdsPinholes reports whether o may have pinholes open: this process holds
// some, or its status records some (recorded; with Config.Pinholes set).
func (lb *LoadBalancer) holdsPinholes(o owner, recorded []pinholeKey) bool {
	if lb.cfg.Pinholes == nil {
		return false
	}
	lb.mu.Lock()
	s := lb.services[o.token]
	held := s != nil && len(s.pinholes) > 0
	lb.mu.Unlock()
	return held || len(recorded) > 0
}

// expirePinholes makes every pinhole this process holds due at once: the
// router restarted (a probe found a mapping lost, or it announced so), and
// the pass that follows opens them again.
func (lb *LoadBalancer) expirePinholes() {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	for _, s := range lb.services {
		for k, h := range s.pinholes {
			h.renewAt = time.Time{}
			s.pinholes[k] = h
		}
	}
}

func comparePinholes(a, b pinholeKey) int {
	return cmp.Or(cmp.Compare(a.Protocol, b.Protocol), a.Addr.Compare(b.Addr), cmp.Compare(a.Port, b.Port))
}

// probePinhole asks the router, through a PinholeProber, whether it still
// holds a pinhole this process opened (a different one each time), and
// reports whether it lost it: every pinhole is then due at once. Without a
// PinholeProber, or with no pinhole opened, it calls nothing and reports
// false; a failed call reports nothing lost.
func (lb *LoadBalancer) probePinhole(ctx context.Context) bool {
	if lb.pinholeProber == nil {
		return false
	}
	lb.mu.Lock()
	var opened []pinholeKey
	for _, s := range lb.services {
		for k, h := range s.pinholes {
			if !h.renewAt.IsZero() {
				opened = append(opened, k)
			}
		}
	}
	if len(opened) == 0 {
		lb.mu.Unlock()
		return false
	}
	slices.SortFunc(opened, comparePinholes)
	lb.probeSeq++
	k := opened[lb.probeSeq%len(opened)]
	lb.mu.Unlock()
	held, err := lb.pinholeProber.PinholeHeld(ctx, k.pinhole(lb.cfg.pinholeLease()))
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Probe of an IPv6 pinhole failed", "address", k.Addr, "port", k.Port, "err", err)
		return false
	}
	if held {
		return false
	}
	klog.FromContext(ctx).Info("Router lost an IPv6 pinhole; repairing", "protocol", k.Protocol, "address", k.Addr, "port", k.Port)
	repairsTotal.Inc()
	lb.expirePinholes()
	return true
}
