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
	"k8s.io/cloud-provider/api"
	"k8s.io/klog/v2"

	"github.com/ccmkit/ccmkit/igd"
)

// converge brings the Service's own mappings from r, a read of its keys made
// in turn t, to req; a failing port does not stop the others. It returns the
// ports that cannot be forwarded now (held by another, or refused by the
// router; with no node to map to, every port not mapped for it, those not
// held by another with ErrNoEligibleNode), and the other errors joined, with an api.RetryError for a fixed delay.
func (lb *LoadBalancer) converge(ctx context.Context, t *turn, req request, r reading) (failed map[igd.Key]*PortError, _ error) {
	o, got := t.owner, r.mappings
	ours := make(map[igd.Key]igd.Mapping)
	onNode := make(map[igd.Key]netip.Addr) // ours, found at a node's address
	var current []netip.Addr
	for k, m := range got {
		if lb.owns(o, m) {
			ours[k] = m
			current = append(current, m.InternalClient.Unmap())
			if lb.isNodeAddr(m.InternalClient) {
				onNode[k] = m.InternalClient.Unmap()
			}
		}
	}
	slices.SortFunc(current, netip.Addr.Compare)
	tgt, haveTarget := chooseTarget(o.key(), req.candidates, current)

	var errs []error
	var retry time.Duration
	wait := func(d time.Duration, err error) {
		errs = append(errs, err) // errors.Join drops nils
		if d > 0 && (retry == 0 || d < retry) {
			retry = d
		}
	}
	// The read proves o holds nothing else, and what it holds: a write it
	// made stands only where the read shows it. A key the router lost (a
	// reboot) is arbitrated again like any other: this process's memory
	// of holding it may be stale (another process may have given it away).
	lb.update(o, func(s *serviceState) {
		for k, h := range s.held {
			m, ok := ours[k]
			switch {
			case !ok:
				delete(s.held, k)
			case h.unconfirmed && !sameTarget(m, h.written, false), !h.unconfirmed && !sameTarget(m, h.written, true):
				s.held[k] = held{contested: h.contested, found: h.found} // not (or no longer) what this process wrote
			default:
				// A blind client's recall is what it wrote, not
				// what the router holds: it confirms nothing.
				h.unconfirmed = h.unconfirmed && !lb.mode.canRead()
				s.held[k] = h
			}
		}
		for k, at := range onNode {
			if h, ok := s.held[k]; ok {
				h.found = at
				s.held[k] = h
			}
		}
	})
	// Withdraw first, even with no node to take the wanted ports: a port
	// given up, or a mapping to a stale nodePort or to a deleted node (it
	// forwards nowhere, and once the node is forgotten no process can
	// prove it ours), must not stay forwarded. With no node, a mapping
	// stays only while the router still has it: a blind recall of one
	// past its lease is not (see pastLease), and removed it no longer
	// keeps the key from a Service that can be served.
	for _, k := range slices.SortedFunc(maps.Keys(ours), compareKeys) {
		i := slices.IndexFunc(req.ports, func(p portPlan) bool { return p.key == k })
		if i < 0 || !(haveTarget || lb.internalPort(o, ours[k]) == req.ports[i].nodePort && lb.isNodeAddr(ours[k].InternalClient) && !lb.pastLease(o, k)) {
			d, err := lb.remove(ctx, o, ours[k], r.at)
			if d == 0 && err == nil {
				delete(ours, k)
			}
			wait(d, err)
		}
	}
	if len(req.ports) > 0 && !haveTarget {
		// Served nowhere, the Service holds only the ports still mapped
		// for it: one another holds is not its (it does not contend
		// while it has no target: see wants), nor one nothing maps.
		failed = make(map[igd.Key]*PortError)
		for _, p := range req.ports {
			cur, exists := got[p.key]
			_, mine := ours[p.key]
			switch {
			case exists && !mine:
				failed[p.key] = &PortError{Service: o.key(), Key: p.key, Holder: &cur, Claimant: lb.serviceOf(cur), Err: ErrPortInUse}
			case !mine:
				failed[p.key] = &PortError{Service: o.key(), Key: p.key, Err: ErrNoEligibleNode}
			}
		}
		errs = append(errs, req.noTarget)
		return failed, errors.Join(errs...)
	}
	failed = make(map[igd.Key]*PortError)
	contenders := lb.contendersOnce(ctx, req)
	var taken []igd.Key // keys the Service did not hold, added now, or still to confirm
	for _, p := range req.ports {
		cur, exists := got[p.key]
		_, mine := ours[p.key]
		// Ours, but never confirmed by a list after its add: given up
		// and not removed (contested), or not written by this process
		// and not in the status (a process stopped between its add and
		// that list).
		h := lb.heldAt(o, p.key)
		unsure := mine && (h.contested || !h.written.InternalClient.IsValid() && !recordsKey(req.svc, p.key))
		switch {
		case exists && !mine:
			failed[p.key] = &PortError{Service: o.key(), Key: p.key, Holder: &cur, Claimant: lb.serviceOf(cur), Err: ErrPortInUse}
		case mine && lb.upToDate(o, cur, p, tgt):
			lb.update(o, func(s *serviceState) { s.holdFound(p.key, onNode[p.key]) })
			if unsure {
				taken = append(taken, p.key)
			}
		default:
			d, err := lb.apply(ctx, req, p, tgt, cur, r.at, mine, contenders)
			if pe := portRefusal(err); pe != nil && d == 0 { // a delay: our own mapping, retried
				failed[p.key] = pe
				continue
			}
			switch {
			case (!mine || unsure) && err == nil && d == 0:
				taken = append(taken, p.key)
			case (!mine || unsure) && d == 0:
				// No answer: the router may have stored the add,
				// which no list after it confirmed.
				lb.markContested(o, p.key, true)
			}
			wait(d, err)
		}
	}
	// A key taken is kept only if the Services, listed again, still give
	// it to this one.
	lost, err := lb.confirm(ctx, t, req, taken)
	maps.Copy(failed, lost)
	errs = append(errs, err)
	if retry > 0 {
		errs = append(errs, api.NewRetryError(fmt.Sprintf("loadbalancer: service %s: retrying in %s", o.key(), retry), retry))
	}
	return failed, errors.Join(errs...)
}

// pastLease reports whether o's mapping at k, as this process wrote it, is
// one a client that cannot read recalls past the end of the lease the
// router granted: the router no longer has it, though recall still shows
// it. A Service with a node renews its mappings before then; one with none
// renews nothing, and would otherwise hold the key in this process for
// ever. An announced restart does not end it (expireAll only makes the
// mappings due for renewal): any LAN host can send an ANNOUNCE, and the
// mapping it ended would be deleted while the router still has it. A
// client that reads proves what the router has, so never.
func (lb *LoadBalancer) pastLease(o owner, k igd.Key) bool {
	if lb.mode.canRead() {
		return false
	}
	h := lb.heldAt(o, k)
	return h.written.InternalClient.IsValid() && !h.granted.IsZero() && !h.granted.After(lb.cfg.Clock.Now())
}

// sameTarget reports whether m, read at a key, points where w, written there,
// did (w zero: nothing written, nothing to contradict). A router that
// reports internal port 0 (miniupnpd 2.3.6) contradicts nothing about the
// port when portZeroAgrees.
func sameTarget(m, w igd.Mapping, portZeroAgrees bool) bool {
	if !w.InternalClient.IsValid() {
		return true
	}
	return m.InternalClient.Unmap() == w.InternalClient &&
		(m.InternalPort == w.InternalPort || (portZeroAgrees && m.InternalPort == 0))
}

// upToDate reports whether our mapping m is what p wants on tgt, with enough
// lease left by the router's count and by the lease granted (some routers
// report it as granted).
func (lb *LoadBalancer) upToDate(o owner, m igd.Mapping, p portPlan, tgt target) bool {
	h := lb.heldAt(o, m.Key())
	wrote := h.written.InternalClient.IsValid()
	if h.unconfirmed { // an add with no answer (blind): sent again
		return false
	}
	if m.InternalClient.Unmap() != tgt.addr || lb.internalPort(o, m) != p.nodePort {
		return false
	}
	// A router that alters descriptions would be rewritten on every pass.
	// Blind (no read), every mapping was written through PCP, which stores
	// the nonce.
	if m.Description != p.description && !(wrote && h.written.Description == p.description) && !lb.mode.guardedFor(o, m) && lb.mode.canRead() {
		return false
	}
	below := lb.cfg.renewBelow()
	if m.Lease != 0 && m.Lease < below {
		return false
	}
	return !wrote || h.expires.IsZero() || h.expires.Sub(lb.cfg.Clock.Now()) >= below
}

// internalPort is our mapping m's internal port as the router reports it,
// else (miniupnpd 2.3.6 lists 0) as this process wrote it, else 0.
func (lb *LoadBalancer) internalPort(o owner, m igd.Mapping) uint16 {
	return cmp.Or(m.InternalPort, lb.heldAt(o, m.Key()).written.InternalPort)
}

// apply makes p's mapping point at tgt with p's description, from old, what
// the read sent at readAt found at p's key (mine: the Service's own). A delay
// returned asks the caller to retry then.
func (lb *LoadBalancer) apply(ctx context.Context, req request, p portPlan, tgt target, old igd.Mapping, readAt time.Time, mine bool, contenders func() ([]*v1.Service, error)) (time.Duration, error) {
	logger := klog.FromContext(ctx)
	o := req.owner
	if !mine {
		if err := lb.arbitrate(req, p.key, contenders); err != nil {
			if errors.Is(err, ErrPortInUse) && !lb.heldAt(o, p.key).written.InternalClient.IsValid() {
				// Refused (not a failed list) a key where a process
				// before this one (stopped before its list after the
				// add) may have mapped it: swept (blind), so the
				// winner's add finds it free. A failed sweep is not
				// marked swept: the refused port's retry sweeps again.
				_, _ = lb.mode.sweep(ctx, o, map[igd.Key]uint16{p.key: p.nodePort}, netip.Addr{})
			}
			return 0, err
		}
		svcs, _ := contenders() // listed by arbitrate
		if err := lb.reserve(o, p.key, lb.recordedKeys(o.cluster, svcs)); err != nil {
			return 0, err
		}
	}
	moved := mine && old.InternalClient.Unmap() != tgt.addr
	// Relabelled (UPnP) or repointed (PCP) where the router would not
	// rewrite it in place: see the modes' deleteFirst.
	rewrite := mine && !moved && lb.mode.deleteFirst(o, old, p)
	if moved || rewrite {
		if after, ok := lb.expiring(o, old, readAt); ok {
			return after, nil
		}
		// A router keeps a key for its internal client (another gets 718),
		// and miniupnpd keeps the description of a mapping re-added with the
		// same client and port: moving or relabelling is a delete and an
		// add. A LAN host taking the port in between fails the add.
		if err := lb.mode.delete(ctx, o, old); err != nil {
			return lb.deleteFailed(o, old, err)
		}
		logger.Info("Deleted port mapping to rewrite it", "service", o.key(), "key", p.key,
			"from", old.InternalClient, "to", tgt.addr, "description", p.description)
	}
	want := igd.Mapping{Protocol: p.key.Protocol, ExternalPort: p.key.ExternalPort, InternalClient: tgt.addr,
		InternalPort: p.nodePort, Description: p.description, Lease: lb.cfg.requestLease(), Enabled: true}
	sent := lb.cfg.Clock.Now() // a lease granted counts from no later than this
	prev := lb.heldAt(o, p.key)
	renewal := mine && !moved && !rewrite
	h := held{written: want, unconfirmed: true}
	if want.Lease > 0 {
		h.expires = sent.Add(want.Lease)
		h.granted = h.expires
	}
	// Held, with what is sent, before the answer: a router may store an add
	// and lose (or even fault) its reply. The next read of the Service's
	// keys confirms it or drops it.
	lb.update(o, func(s *serviceState) { s.held[p.key] = h })
	stored, err := lb.mode.add(ctx, o, want)
	if err != nil {
		err = lb.mode.addFailed(ctx, req, p.key, err)
		if renewal && lb.mode.refusalKeeps(err) && prev.written.InternalClient.IsValid() {
			// The router refused the renewal and left the mapping it
			// renews as it was: still the Service's, still to renew
			// or delete.
			lb.update(o, func(s *serviceState) { s.held[p.key] = prev })
		}
		return 0, err
	}
	h.unconfirmed = false
	h.expires, h.granted = time.Time{}, time.Time{}
	if stored.Lease > 0 {
		h.expires = sent.Add(stored.Lease)
		h.granted = h.expires
	}
	lb.update(o, func(s *serviceState) { s.held[p.key] = h })
	if want.Lease != 0 && stored.Lease == 0 {
		lb.permanentOnce.Do(func() {
			logger.Info("Router only accepts permanent leases; mappings are permanent and still renewed", "requestedLease", want.Lease)
		})
	}
	msg, v := "Added port mapping", 0
	if mine && !moved && !rewrite {
		msg, v = "Renewed port mapping", 2
	} else {
		lb.tell(req.svc, v1.EventTypeNormal, EventReasonMappedPort, "Mapped %s to %s:%d (%s)", p.key, tgt.name, p.nodePort, tgt.addr)
	}
	logger.V(v).Info(msg, "service", o.key(), "key", p.key, "node", tgt.name, "internalClient", tgt.addr, "nodePort", p.nodePort)
	return 0, nil
}

// addFailed turns an add's error into a PortError where the client reads
// (readingMode, guardedMode); on a conflict, one read names the holder.
func (lb *LoadBalancer) addFailed(ctx context.Context, req request, k igd.Key, err error) error {
	o := req.owner
	if igd.Code(err) == 0 && !pcpRefused(err) {
		return &PortError{Service: o.key(), Key: k, Err: err} // outcome unknown: k stays held
	}
	// The router answered with a fault: one read says whether it stored the
	// add anyway (then k stays held), or who holds k.
	var holder igd.Mapping
	r, gerr := lb.read(ctx, o, []igd.Key{k}) // as every read of the Service's keys
	if gerr == nil {
		var ok bool
		if holder, ok = r.mappings[k]; !ok {
			gerr = igd.ErrNoSuchEntry
		}
	}
	if errors.Is(gerr, igd.ErrNoSuchEntry) || (gerr == nil && !lb.owns(o, holder)) {
		lb.update(o, func(s *serviceState) { delete(s.held, k) })
	}
	if want := lb.heldAt(o, k).written; gerr == nil && lb.owns(o, holder) && want.InternalClient.IsValid() &&
		sameTarget(holder, want, false) {
		return nil // stored as asked, whatever the answer said
	}
	if !errors.Is(err, igd.ErrConflict) {
		return &PortError{Service: o.key(), Key: k, Err: err}
	}
	if gerr != nil && !errors.Is(gerr, igd.ErrNoSuchEntry) {
		return &PortError{Service: o.key(), Key: k, Err: fmt.Errorf("%w (reading who holds the port failed: %w)", err, gerr)}
	}
	if gerr != nil {
		if lb.cfg.SecureMode {
			err = fmt.Errorf("%w (the port is free: a secure-mode router maps only to the caller's own address; is node %s this host's address toward the router?)", err, req.self)
		} else {
			err = fmt.Errorf("%w (the port is free: is the router in secure mode? then set SecureMode)", err)
		}
		return &PortError{Service: o.key(), Key: k, Err: err}
	}
	return &PortError{Service: o.key(), Key: k, Holder: &holder, Claimant: lb.serviceOf(holder), Err: fmt.Errorf("%w: %w", ErrPortInUse, err)}
}

// keptByRefusal reports whether a refused renewal left the mapping it
// renews in place: a PCP result (igd.ErrRefused) other than
// CANNOT_PROVIDE_EXTERNAL (igd.ErrPortUnavailable: the key is another's)
// and UNSUPP_OPTION (igd.ErrThirdPartyRefused: such a mapping can be
// neither renewed nor deleted, only left to expire).
func keptByRefusal(err error) bool {
	return errors.Is(err, igd.ErrRefused) && !errors.Is(err, igd.ErrPortUnavailable) && !errors.Is(err, igd.ErrThirdPartyRefused)
}

// pcpRefused reports whether a guarded add failed because the router answered
// with a refusal (a PCP result code: igd.ErrRefused, or a port it would not
// give: igd.ErrPortUnavailable), not because it could not be reached.
func pcpRefused(err error) bool {
	return errors.Is(err, igd.ErrRefused) || errors.Is(err, igd.ErrPortUnavailable)
}

// deleteFailed turns a DeletePortMapping error for our mapping old into a
// PortError. A secure-mode router refuses (606) to delete a previous
// leader's mapping: the caller is told to come back when it expires.
func (lb *LoadBalancer) deleteFailed(o owner, old igd.Mapping, err error) (time.Duration, error) {
	if lb.cfg.SecureMode && errors.Is(err, igd.ErrNotAuthorized) {
		after := old.Lease + time.Second
		if old.Lease == 0 || after > maxSecureWait {
			after = maxSecureWait
		}
		return after, &PortError{Service: o.key(), Key: old.Key(), Holder: &old,
			Err: fmt.Errorf("secure-mode router lets only %s change this cluster's mapping (made by a previous leader); it expires with its lease: %w", old.InternalClient, err)}
	}
	return 0, &PortError{Service: o.key(), Key: old.Key(), Err: err}
}

// maxSecureWait bounds the wait for a previous leader's mapping to expire
// (the service controller's own back-off cap).
const maxSecureWait = 5 * time.Minute

// remove deletes m, which a read of this operation, sent at readAt, proved ours.
func (lb *LoadBalancer) remove(ctx context.Context, o owner, m igd.Mapping, readAt time.Time) (time.Duration, error) {
	if after, ok := lb.expiring(o, m, readAt); ok {
		return after, nil
	}
	if err := lb.mode.delete(ctx, o, m); err != nil {
		return lb.deleteFailed(o, m, err)
	}
	lb.update(o, func(s *serviceState) { delete(s.held, m.Key()) })
	klog.FromContext(ctx).Info("Deleted port mapping", "service", o.key(), "key", m.Key(), "internalClient", m.InternalClient)
	return 0, nil
}

// expiringLease is the lease left under which a mapping is not deleted (or
// rewritten) but left to expire and the operation retried: another host
// could take the key before the delete lands, which would then delete that
// host's mapping.
const expiringLease = 5 * time.Second

// expiring reports whether our mapping m, read at readAt, has less than
// expiringLease left now, as a delete is about to be sent, and if so when to
// come back: once it has expired.
func (lb *LoadBalancer) expiring(o owner, m igd.Mapping, readAt time.Time) (time.Duration, bool) {
	if lb.mode.deletesOnlyOurs() {
		return 0, false // the router deletes only the mapping with our nonce
	}
	left, ok := lb.leaseLeft(o, m, readAt)
	if !ok || left >= expiringLease {
		return 0, false
	}
	return max(left, 0) + time.Second, true
}
