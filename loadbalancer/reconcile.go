package loadbalancer

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"k8s.io/cloud-provider/api"
	"k8s.io/klog/v2"

	"github.com/ccmkit/ccmkit/igd"
)

// request is the desired state of one Service on the router.
type request struct {
	owner owner
	// ports are the mappings the Service wants; none means "remove all of
	// the Service's mappings".
	ports []portPlan
	// candidates are the nodes the mappings may target, sorted by name.
	candidates []target
	// noTarget explains an empty candidates list. It is returned when ports
	// is not empty and there is no candidate.
	noTarget error
	// self is the node this process runs on, for secure-mode routers ("" when
	// not in secure mode).
	self string
}

// table is one observation of the router's port-mapping table.
type table map[igd.Key]igd.Mapping

// readTable reads the router's whole table: the one ListPortMappings call of
// an operation.
func (lb *LoadBalancer) readTable(ctx context.Context) (table, error) {
	ms, err := igd.ReadTable(ctx, lb.cfg.Client)
	if err != nil {
		return nil, fmt.Errorf("loadbalancer: read router table: %w", err)
	}
	t := make(table, len(ms))
	for _, m := range ms {
		t[m.Key()] = m
	}
	return t, nil
}

// owns reports whether m belongs to o: its description names o, and it points
// at an address of one of our nodes (any LAN host can write any description).
func (lb *LoadBalancer) owns(o owner, m igd.Mapping) bool {
	p, ok := parseDescription(m.Description)
	return ok && p.token == o.token && lb.isNodeAddr(m.InternalClient)
}

// reconcile converges the router towards req, starting from the observation
// t: it adds missing mappings, re-points or renews the Service's own mappings
// that are out of date, and deletes the Service's own mappings for ports it
// no longer has. It never touches a mapping the Service does not own. A port
// that fails does not stop the others; the errors are joined, with an
// api.RetryError among them when the caller should come back at a fixed
// delay. The caller holds the Service's gate.
func (lb *LoadBalancer) reconcile(ctx context.Context, t table, req request) error {
	o := req.owner
	ours := make(map[igd.Key]igd.Mapping)
	var current []netip.Addr
	for k, m := range t {
		if lb.owns(o, m) {
			ours[k] = m
			current = append(current, m.InternalClient.Unmap())
		}
	}
	slices.SortFunc(current, netip.Addr.Compare)

	var errs []error
	var retry time.Duration
	wait := func(d time.Duration) {
		if retry == 0 || d < retry {
			retry = d
		}
	}
	if len(req.ports) > 0 {
		tgt, ok := chooseTarget(o.key(), req.candidates, current)
		if !ok {
			// Leave the table alone: without a node there is nothing
			// better to point at, and the background work re-points as
			// soon as a node qualifies.
			return req.noTarget
		}
		for _, p := range req.ports {
			old, exists := t[p.key]
			_, mine := ours[p.key]
			var err error
			switch {
			case exists && !mine:
				err = &PortError{Service: o.key(), Key: p.key, Holder: &old, Err: ErrPortInUse}
			case exists && lb.upToDate(old, p, tgt):
				err = lb.claim(o, p.key)
			default:
				var after time.Duration
				after, err = lb.apply(ctx, req, p, tgt, old, mine)
				if after > 0 {
					wait(after)
				}
			}
			if err != nil {
				errs = append(errs, err)
			}
		}
	}
	var gone []igd.Key
	for k := range ours {
		if !slices.ContainsFunc(req.ports, func(p portPlan) bool { return p.key == k }) {
			gone = append(gone, k)
		}
	}
	slices.SortFunc(gone, compareKeys)
	kept := make(map[igd.Key]bool) // ours, not wanted, still on the router
	for _, k := range gone {
		after, err := lb.remove(ctx, o, ours[k])
		if err != nil {
			errs = append(errs, err)
			kept[k] = true
		}
		if after > 0 {
			wait(after)
		}
	}
	lb.releaseUnwanted(req, kept)
	if retry > 0 {
		errs = append(errs, api.NewRetryError(fmt.Sprintf("loadbalancer: service %s: retrying in %s", o.key(), retry), retry))
	}
	return errors.Join(errs...)
}

// upToDate reports whether our mapping m already is what p wants on tgt, with
// enough lease left. The lease left is what the router reports (miniupnpd
// reports the time left) or, for mappings this process added, what is left
// of the lease the router granted, whichever is less: some routers report
// the lease as granted.
func (lb *LoadBalancer) upToDate(m igd.Mapping, p portPlan, tgt target) bool {
	if m.InternalClient.Unmap() != tgt.addr || m.InternalPort != p.nodePort || lb.staleDescription(m, p) {
		return false
	}
	below := lb.cfg.renewBelow()
	if m.Lease != 0 && m.Lease < below {
		return false
	}
	lb.mu.Lock()
	exp, ok := lb.expires[m.Key()]
	lb.mu.Unlock()
	return !ok || exp.Sub(lb.cfg.Clock.Now()) >= below
}

// staleDescription reports whether our mapping m needs p's description
// written. It does not when this process's last write there already was that
// description and the router reports another: such a router alters
// descriptions, and rewriting would repeat on every pass without end. (After
// a restart such a mapping is rewritten once.)
func (lb *LoadBalancer) staleDescription(m igd.Mapping, p portPlan) bool {
	if m.Description == p.description {
		return false
	}
	lb.mu.Lock()
	defer lb.mu.Unlock()
	return lb.written[m.Key()] != p.description
}

// apply makes the mapping for p point at tgt, with p's description. old is
// what the table holds at p's key; mine says whether it is the Service's own.
// Our mapping is deleted first when it must move to another node, or when
// only its description changes (miniupnpd keeps the description on a re-add
// with the same internal client and port); otherwise one add updates it. It
// returns a delay when the caller should retry at a fixed rate.
func (lb *LoadBalancer) apply(ctx context.Context, req request, p portPlan, tgt target, old igd.Mapping, mine bool) (time.Duration, error) {
	logger := klog.FromContext(ctx)
	o := req.owner
	if err := lb.claim(o, p.key); err != nil {
		return 0, err
	}
	lb.forget(o)
	// moved: our mapping must point at another node. relabel: only its
	// description is out of date (a Service port was renamed, or the
	// description format changed).
	moved := mine && old.InternalClient.Unmap() != tgt.addr
	relabel := mine && !moved && old.InternalPort == p.nodePort && lb.staleDescription(old, p)
	if moved || relabel {
		// A router keeps a key for the internal client holding it (another
		// client gets 718): moving a mapping to another node is a delete
		// followed by an add. And miniupnpd only renews the lease of a
		// mapping re-added with the same internal client and port, keeping
		// its old description: a re-add alone would leave the description
		// stale and every later pass would re-add it again. The mapping is
		// ours, so it is deleted and added afresh. Between the two calls
		// (two router round trips) the port is not forwarded, and another
		// LAN host could take it: the add then fails with a PortError
		// naming that host.
		if err := lb.cfg.Client.DeletePortMapping(ctx, p.key.Protocol, p.key.ExternalPort); err != nil {
			return lb.deleteFailed(o, old, err)
		}
		mine = false
		lb.mu.Lock()
		delete(lb.expires, p.key)
		delete(lb.written, p.key)
		lb.mu.Unlock()
		if moved {
			logger.Info("Deleted port mapping to move it", "service", o.key(), "key", p.key, "from", old.InternalClient, "to", tgt.addr)
		} else {
			logger.Info("Deleted port mapping to change its description", "service", o.key(), "key", p.key, "from", old.Description, "to", p.description)
		}
	}
	want := igd.Mapping{
		Protocol:       p.key.Protocol,
		ExternalPort:   p.key.ExternalPort,
		InternalClient: tgt.addr,
		InternalPort:   p.nodePort,
		Description:    p.description,
		Lease:          lb.cfg.requestLease(),
		Enabled:        true,
	}
	stored, err := lb.cfg.Client.AddPortMapping(ctx, want)
	if err != nil {
		if !mine {
			lb.release(o, p.key)
		}
		return 0, lb.addFailed(ctx, req, p.key, err)
	}
	lb.mu.Lock()
	if stored.Lease > 0 {
		lb.expires[p.key] = lb.cfg.Clock.Now().Add(stored.Lease)
	} else {
		delete(lb.expires, p.key) // permanent
	}
	lb.written[p.key] = p.description
	lb.mu.Unlock()
	if want.Lease != 0 && stored.Lease == 0 {
		lb.permanentOnce.Do(func() {
			logger.Info("Router only accepts permanent leases; mappings are permanent and still renewed", "requestedLease", want.Lease)
		})
	}
	if mine {
		logger.V(2).Info("Updated port mapping", "service", o.key(), "key", p.key, "node", tgt.name, "internalClient", tgt.addr, "nodePort", p.nodePort)
	} else {
		logger.Info("Added port mapping", "service", o.key(), "key", p.key, "node", tgt.name, "internalClient", tgt.addr, "nodePort", p.nodePort)
	}
	return 0, nil
}

// addFailed turns an AddPortMapping error into a PortError. A conflict on a
// key the table showed free or ours means another host took it meanwhile, or
// that the router is in secure mode; one GetPortMapping names the holder.
func (lb *LoadBalancer) addFailed(ctx context.Context, req request, k igd.Key, err error) error {
	o := req.owner
	if !errors.Is(err, igd.ErrConflict) {
		return &PortError{Service: o.key(), Key: k, Err: err}
	}
	holder, gerr := lb.cfg.Client.GetPortMapping(ctx, k.Protocol, k.ExternalPort)
	if gerr != nil {
		// Nobody holds the port: the router refuses to map to our target.
		if lb.cfg.SecureMode {
			err = fmt.Errorf("%w (the port is free: a secure-mode router maps only to the caller's own address; is node %s this host's address toward the router?)", err, req.self)
		} else {
			err = fmt.Errorf("%w (the port is free: is the router in secure mode? then set SecureMode)", err)
		}
		return &PortError{Service: o.key(), Key: k, Err: err}
	}
	return &PortError{Service: o.key(), Key: k, Holder: &holder, Err: fmt.Errorf("%w: %w", ErrPortInUse, err)}
}

// deleteFailed turns a DeletePortMapping error for our mapping old into a
// PortError. A secure-mode router refuses (606) to let us delete a mapping
// that another node made (the previous leader): it expires with its lease,
// so the caller is told to come back then.
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

// maxSecureWait bounds the fixed retry delay while waiting for a previous
// leader's mapping to expire (the service controller's own back-off cap).
const maxSecureWait = 5 * time.Minute

// remove deletes our mapping m.
func (lb *LoadBalancer) remove(ctx context.Context, o owner, m igd.Mapping) (time.Duration, error) {
	lb.forget(o)
	if err := lb.cfg.Client.DeletePortMapping(ctx, m.Protocol, m.ExternalPort); err != nil {
		return lb.deleteFailed(o, m, err)
	}
	lb.release(o, m.Key())
	klog.FromContext(ctx).Info("Deleted port mapping", "service", o.key(), "key", m.Key(), "internalClient", m.InternalClient)
	return 0, nil
}

// claim reserves k for o in this process, before any router call that would
// make o hold k. It fails when another Service holds the reservation: of two
// Services racing for one port, exactly one wins, even though both may have
// seen the port free.
func (lb *LoadBalancer) claim(o owner, k igd.Key) error {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	if other, ok := lb.claims[k]; ok && other.token != o.token {
		return &PortError{Service: o.key(), Key: k, Claimant: other.key(), Err: ErrPortInUse}
	}
	lb.claims[k] = o
	return nil
}

// releaseUnwanted drops the reservations of req's Service for keys it no
// longer wants and holds no mapping at (kept lists the mappings it still
// holds). Without this, a reservation whose mapping vanished from the router
// (a reboot) before the Service gave the port up would keep every other
// Service off that port for the life of the process.
func (lb *LoadBalancer) releaseUnwanted(req request, kept map[igd.Key]bool) {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	for k, c := range lb.claims {
		if c.token != req.owner.token || kept[k] || slices.ContainsFunc(req.ports, func(p portPlan) bool { return p.key == k }) {
			continue
		}
		delete(lb.claims, k)
		delete(lb.expires, k)
		delete(lb.written, k)
	}
}

// release drops o's reservation of k, once o holds no mapping at k.
func (lb *LoadBalancer) release(o owner, k igd.Key) {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	if lb.claims[k].token == o.token {
		delete(lb.claims, k)
		delete(lb.expires, k)
		delete(lb.written, k)
	}
}
