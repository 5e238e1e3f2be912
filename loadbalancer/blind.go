package loadbalancer

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"k8s.io/klog/v2"

	"github.com/ccmkit/ccmkit/igd"
)

// blindMode is the router mode of an igd.GuardedClient that cannot read
// (igd.Reader false: igd/pcp.Backend without UPnP), written blind: every
// write is conditional or guarded by the router (an add takes a key only
// where it is free or forwards to the same node and port; a delete removes
// only the mapping to the node and port that carries the Service's nonce),
// so a write never rests on a read, and what this process wrote stands in
// for the read. See the package documentation.
type blindMode struct {
	modeBase
	guard   igd.GuardedClient
	checker igd.MappedChecker // nil: lost asks nothing
}

// read is recall: there is no read.
func (b *blindMode) read(_ context.Context, o owner, keys []igd.Key) (reading, error) {
	return b.recall(o, keys), nil
}

func (b *blindMode) canRead() bool { return false }

// hints: a client that cannot read has no table to list (its listing fails
// with igd.ErrNotSupported).
func (b *blindMode) hints(context.Context) (tableHints, error) { return tableHints{}, nil }

func (b *blindMode) guardedFor(o owner, m igd.Mapping) bool { return b.guard.OwnedBy(o.token, m) }

// deleteFirst: as guardedMode's (PCP refuses a MAP at a key its mapping
// holds for another internal port).
func (b *blindMode) deleteFirst(o owner, old igd.Mapping, p portPlan) bool {
	return b.lb.internalPort(o, old) != p.nodePort
}

// add maps want through the guard. Refused because the key holds a mapping
// (igd.ErrPortUnavailable): ours to another node or this one's former
// address, written by a process before this one? Those are deleted (the
// router checks the nonce) and, if the key was swept now, the add is asked
// once more. A failed sweep is returned with the refusal.
func (b *blindMode) add(ctx context.Context, o owner, want igd.Mapping) (igd.Mapping, error) {
	stored, err := b.guard.AddFor(ctx, o.token, want)
	if errors.Is(err, igd.ErrPortUnavailable) {
		swept, serr := b.sweep(ctx, o, map[igd.Key]uint16{want.Key(): want.InternalPort}, want.InternalClient)
		if serr != nil {
			return igd.Mapping{}, errors.Join(err, serr)
		}
		if swept > 0 {
			stored, err = b.guard.AddFor(ctx, o.token, want)
		}
	}
	return stored, err
}

// refusalKeeps: a refused renewal (keptByRefusal) is still the Service's,
// still to renew or delete: nothing reads the router to say so.
func (b *blindMode) refusalKeeps(err error) bool { return keptByRefusal(err) }

// delete deletes our mapping m, as recalled, through the router's guard.
// Refused (igd.ErrNotAuthorized: another mapping to the same internal
// address and port is listed first), there is nothing to read: the mapping
// is no longer renewed and ends with its lease. One whose lease has ended,
// which a router now refusing THIRD_PARTY will not delete, is gone
// (leaseEnded).
func (b *blindMode) delete(ctx context.Context, o owner, m igd.Mapping) error {
	lb, g := b.lb, b.guard
	m.InternalPort = lb.internalPort(o, m)
	err := g.DeleteFor(ctx, o.token, m)
	switch {
	case errors.Is(err, igd.ErrNotAuthorized):
		klog.FromContext(ctx).Info("Router refused a guarded delete (another mapping to the same internal address and port is listed first); the mapping is left to expire", "service", o.key(), "key", m.Key(), "err", err)
		return nil
	case b.leaseEnded(o, m, err):
		return nil
	}
	return err
}

// deletesOnlyOurs: every delete goes through the guard, which deletes only
// the mapping with our nonce.
func (b *blindMode) deletesOnlyOurs() bool { return true }

// routerRestarted: nothing else would tell that the mappings this process
// wrote are gone.
func (b *blindMode) routerRestarted() { b.lb.expireAll() }

// lost asks the router, with ask, whether it holds want (igd.MappedChecker:
// one PCP request; periodic probes send nothing), else reads it as the
// other modes do (a client that cannot read answers igd.ErrNotSupported).
func (b *blindMode) lost(ctx context.Context, want igd.Mapping, ask bool) bool {
	if b.checker != nil && ask {
		mapped, err := b.checker.Mapped(ctx, want.Protocol, want.InternalClient, want.InternalPort)
		if err != nil {
			klog.FromContext(ctx).V(2).Info("Probe of a port mapping failed", "key", want.Key(), "err", err)
		}
		return err == nil && !mapped
	}
	return b.lb.lostOnRead(ctx, want)
}

// recall is read's stand-in on a blind client: the mappings this process
// wrote at keys for o, as written, with no lease of the router's (the lease
// granted decides when they are renewed).
func (b *blindMode) recall(o owner, keys []igd.Key) reading {
	lb := b.lb
	r := reading{at: lb.cfg.Clock.Now(), mappings: make(map[igd.Key]igd.Mapping, len(keys))}
	for _, k := range keys {
		if h := lb.heldAt(o, k); h.written.InternalClient.IsValid() {
			m := h.written
			m.Lease = 0
			r.mappings[k] = m
		}
	}
	return r
}

// sweep deletes, through the router's guard, o's mappings at each key of
// nodePorts to that nodePort on any node address seen: the mappings of a
// Service this process did not write (it restarted, or another process of
// the cluster wrote them). A refusal (the first mapping to that node and
// port is another's), a node holding none and a router refusing THIRD_PARTY
// are not errors. A key swept for the same nodePort less than a lease ago
// is skipped (sweptLately). It returns how many keys it swept.
func (b *blindMode) sweep(ctx context.Context, o owner, nodePorts map[igd.Key]uint16, except netip.Addr) (int, error) {
	lb, g := b.lb, b.guard
	lb.mu.Lock()
	addrs := make([]netip.Addr, 0, len(lb.nodeAddrs))
	for a := range lb.nodeAddrs {
		if a != except {
			addrs = append(addrs, a)
		}
	}
	lb.mu.Unlock()
	slices.SortFunc(addrs, netip.Addr.Compare)
	var errs []error
	swept := make(map[igd.Key]uint16)
	for k, port := range nodePorts {
		if b.sweptLately(o, k, port) {
			continue
		}
		failed := false
		for _, a := range addrs {
			err := g.DeleteFor(ctx, o.token, igd.Mapping{Protocol: k.Protocol, ExternalPort: k.ExternalPort, InternalClient: a, InternalPort: port})
			// UNSUPP_OPTION: the router refuses THIRD_PARTY, so it
			// made no mapping for that node through PCP either.
			if err != nil && !errors.Is(err, igd.ErrNotAuthorized) && !errors.Is(err, igd.ErrThirdPartyRefused) {
				failed = true
				errs = append(errs, fmt.Errorf("loadbalancer: service %s: delete %s to %s:%d: %w", o.key(), k, a, port, err))
			}
		}
		if !failed {
			swept[k] = port
		}
	}
	if len(swept) > 0 {
		now := lb.cfg.Clock.Now()
		lb.update(o, func(s *serviceState) {
			if s.swept == nil {
				s.swept = make(map[igd.Key]sweep)
			}
			for k, port := range swept {
				s.swept[k] = sweep{nodePort: port, at: now}
			}
		})
	}
	if len(errs) == 0 && len(swept) > 0 {
		klog.FromContext(ctx).V(2).Info("Swept the Service's mappings it did not write", "service", o.key(), "keys", len(swept), "nodes", len(addrs))
	}
	return len(swept), errors.Join(errs...)
}

// addFailed: the router's refusal is the answer (nothing of ours was stored
// at k), anything else leaves k held.
func (b *blindMode) addFailed(_ context.Context, req request, k igd.Key, err error) error {
	lb, o := b.lb, req.owner
	if !pcpRefused(err) {
		return &PortError{Service: o.key(), Key: k, Err: err} // outcome unknown: k stays held
	}
	lb.update(o, func(s *serviceState) { delete(s.held, k) })
	if errors.Is(err, igd.ErrPortUnavailable) && !errors.Is(err, igd.ErrNotAuthorized) {
		err = fmt.Errorf("%w: %w", ErrPortInUse, err)
	}
	return &PortError{Service: o.key(), Key: k, Err: err}
}

// expireAll makes every mapping this process wrote due for renewal: a
// blind client's router restarted, and nothing else would tell that they
// are gone.
func (lb *LoadBalancer) expireAll() {
	now := lb.cfg.Clock.Now()
	lb.mu.Lock()
	defer lb.mu.Unlock()
	for _, s := range lb.services {
		for k, h := range s.held {
			if h.written.InternalClient.IsValid() {
				h.expires = now
				s.held[k] = h
			}
		}
	}
}

// sweptLately reports whether o's mappings at k to nodePort were swept
// off the other nodes less than a lease ago: anything of ours another
// process wrote before that sweep is gone, and what it wrote since expires
// within a lease of its last renewal, so the refused add is not swept
// again before.
func (b *blindMode) sweptLately(o owner, k igd.Key, nodePort uint16) bool {
	lb := b.lb
	lb.mu.Lock()
	defer lb.mu.Unlock()
	s := lb.services[o.token]
	if s == nil {
		return false
	}
	w, ok := s.swept[k]
	return ok && w.nodePort == nodePort && lb.cfg.Clock.Since(w.at) < lb.cfg.effectiveLease()
}

// leaseEnded reports whether err, the router's refusal to delete our
// mapping m, means it is gone: on a blind client nothing reads the router,
// so a mapping this process wrote whose lease has ended (the router
// dropped it), and whose delete a router now refusing THIRD_PARTY refuses,
// would otherwise be held for ever. (A refusal for another mapping to the
// same node and port, NOT_AUTHORIZED, never gets here: delete leaves that
// mapping to its lease at once.)
func (b *blindMode) leaseEnded(o owner, m igd.Mapping, err error) bool {
	lb := b.lb
	if !errors.Is(err, igd.ErrThirdPartyRefused) {
		return false
	}
	exp := lb.heldAt(o, m.Key()).expires
	return !exp.IsZero() && !exp.After(lb.cfg.Clock.Now())
}
