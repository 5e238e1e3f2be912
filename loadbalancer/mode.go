package loadbalancer

import (
	"context"
	"net/netip"

	"github.com/ccmkit/ccmkit/igd"
)

// routerMode is how the load balancer proves and changes what the router
// holds: chosen once, in New, from what Config.Client declares (newMode).
// One implementation per mode, each in a file named for it:
//
//   - readingMode (reading.go): a client without a guard (UPnP), which
//     reads the router before every write and writes plainly;
//   - guardedMode (guarded.go): an igd.GuardedClient that reads (PCP
//     writes, UPnP reads: igd/pcp.Backend with UPnP);
//   - blindMode (blind.go): an igd.GuardedClient that cannot read
//     (igd.Reader false: igd/pcp.Backend without UPnP), whose writes the
//     router conditions or guards, and which recalls what it wrote in place
//     of a read.
//
// The rest of the package asks the mode, never which mode it is.
type routerMode interface {
	// read returns what the router holds at o's keys, the proof every
	// write rests on (see LoadBalancer.read).
	read(ctx context.Context, o owner, keys []igd.Key) (reading, error)
	// canRead reports whether read asks the router. Else read recalls
	// what this process wrote: it shows no other's mapping, and confirms
	// no write.
	canRead() bool
	// hints lists the router's table where the client can: where Services
	// may hold mappings nothing else records (empty: nothing to list).
	hints(ctx context.Context) (tableHints, error)
	// guardedFor reports whether m, as read, carries o's token where the
	// router keeps it in place of our description (igd.GuardedClient's
	// OwnedBy); never without a guard.
	guardedFor(o owner, m igd.Mapping) bool
	// deleteFirst reports whether o's mapping old, which already forwards
	// to p's target, is deleted before p's add because the router would
	// not rewrite it in place.
	deleteFirst(o owner, old igd.Mapping, p portPlan) bool
	// add writes want, a mapping of o's, and returns it as stored.
	add(ctx context.Context, o owner, want igd.Mapping) (igd.Mapping, error)
	// addFailed turns the error of add for req's key k into a PortError,
	// or nil when the router stored the add anyway.
	addFailed(ctx context.Context, req request, k igd.Key, err error) error
	// refusalKeeps reports whether err, add's error for a renewal turned
	// by addFailed, is a refusal that left the mapping it renews in place.
	refusalKeeps(err error) bool
	// delete deletes o's mapping m, as read (or recalled): nil when it is
	// gone, or left to end with its lease.
	delete(ctx context.Context, o owner, m igd.Mapping) error
	// deletesOnlyOurs reports whether the router's guard keeps every
	// delete off any mapping but ours, so that one sent late, after the
	// lease ended and another host took the key, removes nothing.
	deletesOnlyOurs() bool
	// sweep deletes o's mappings at each key of nodePorts to that nodePort
	// on every node address seen but except, where the mode cannot read
	// them but this process (before a restart) or another may have written
	// them. It returns how many keys it swept; a mode that reads sweeps
	// nothing.
	sweep(ctx context.Context, o owner, nodePorts map[igd.Key]uint16, except netip.Addr) (int, error)
	// routerRestarted is told that the router announced a restart, which
	// the pass that follows repairs.
	routerRestarted()
	// lost reports whether the router lost or changed want, a mapping this
	// process wrote. With ask, a mode that cannot read asks the router
	// whether it holds it. A failed call reports nothing lost.
	lost(ctx context.Context, want igd.Mapping, ask bool) bool
	// selfOnly reports whether the client says its router maps only to
	// this host now (igd.SelfOnlyReporter).
	selfOnly() bool
}

// newMode chooses lb's router mode from what Config.Client declares: a
// guard (igd.GuardedClient), whether it reads (igd.Reader), whether it
// lists (igd.Lister), whether it says its router maps only to this host
// (igd.SelfOnlyReporter), whether it asks the router for one mapping
// without reading (igd.MappedChecker).
func newMode(lb *LoadBalancer) routerMode {
	c := lb.cfg.Client
	base := modeBase{lb: lb}
	base.lister, _ = c.(igd.Lister)
	base.reporter, _ = c.(igd.SelfOnlyReporter)
	g, guarded := c.(igd.GuardedClient)
	r, declares := c.(igd.Reader)
	switch {
	case !guarded:
		return &readingMode{reads{base}}
	case declares && !r.Reads():
		checker, _ := c.(igd.MappedChecker)
		return &blindMode{modeBase: base, guard: g, checker: checker}
	}
	return &guardedMode{reads: reads{base}, guard: g}
}

// modeBase is what every mode holds: the load balancer, and what its client
// declares that no mode decides on.
type modeBase struct {
	lb       *LoadBalancer
	lister   igd.Lister           // nil: the client reads key by key
	reporter igd.SelfOnlyReporter // nil: the client never says so
}

func (b modeBase) selfOnly() bool { return b.reporter != nil && b.reporter.SelfOnly() }

// reads is what the two modes that read the router share: a read finds
// every mapping of ours at the keys it reads, and what a restart lost.
type reads struct{ modeBase }

// deletesOnlyOurs: a delete is plain, or falls back to one on a fresh read.
func (reads) deletesOnlyOurs() bool { return false }

// sweep: a read finds every mapping of ours at the keys it reads.
func (reads) sweep(context.Context, owner, map[igd.Key]uint16, netip.Addr) (int, error) {
	return 0, nil
}

// routerRestarted: the repair's reads show what the router lost.
func (reads) routerRestarted() {}

func (r reads) lost(ctx context.Context, want igd.Mapping, _ bool) bool {
	return r.lb.lostOnRead(ctx, want)
}
