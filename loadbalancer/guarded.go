package loadbalancer

import (
	"context"
	"errors"

	"k8s.io/klog/v2"

	"github.com/ccmkit/ccmkit/igd"
)

// guardedMode is the router mode of an igd.GuardedClient that reads
// (igd/pcp.Backend with UPnP): reads, and so every proof of ownership, are
// the client's as in readingMode; the Service's own adds and deletes go
// through the router's guard (PCP with the Service's nonce), which keeps a
// token in place of our description.
type guardedMode struct {
	reads
	guard igd.GuardedClient
}

// read lists the keys where the client lists, else gets them one by one.
func (gm *guardedMode) read(ctx context.Context, _ owner, keys []igd.Key) (reading, error) {
	return gm.lb.readRouter(ctx, gm.lister, keys)
}

func (gm *guardedMode) canRead() bool { return true }

func (gm *guardedMode) hints(ctx context.Context) (tableHints, error) {
	return gm.lb.listHints(ctx, gm.lister, true)
}

func (gm *guardedMode) guardedFor(o owner, m igd.Mapping) bool { return gm.guard.OwnedBy(o.token, m) }

// deleteFirst: through PCP the router refuses a MAP at a key its mapping
// holds for another internal port (CANNOT_PROVIDE_EXTERNAL), where UPnP
// replaces it: a mapping to a stale nodePort, or to one not known (a
// router that reports 0, after a restart), is deleted first. PCP keeps no
// description of ours to rewrite.
func (gm *guardedMode) deleteFirst(o owner, old igd.Mapping, p portPlan) bool {
	return gm.lb.internalPort(o, old) != p.nodePort
}

func (gm *guardedMode) add(ctx context.Context, o owner, want igd.Mapping) (igd.Mapping, error) {
	return gm.guard.AddFor(ctx, o.token, want)
}

func (gm *guardedMode) addFailed(ctx context.Context, req request, k igd.Key, err error) error {
	return gm.lb.addFailed(ctx, req, k, err)
}

func (gm *guardedMode) refusalKeeps(error) bool { return false }

// delete deletes our mapping m, as read, through the router's guard (the
// router then refuses if m is no longer ours).
//
// A PCP delete names the mapping by its internal address and port, and the
// router checks the nonce of the first mapping to them: another one listed
// before ours (a LAN host's, or the Service's own at another key or moved
// there since) refuses it (igd.ErrNotAuthorized) for as long as ours lives.
// The key is then read again, and the mapping deleted through the client's
// plain delete on that proof, as without a guard: if the read finds it still
// ours, to the same address and port, and not about to expire; gone or no
// longer ours, it is deleted already.
func (gm *guardedMode) delete(ctx context.Context, o owner, m igd.Mapping) error {
	lb, g := gm.lb, gm.guard
	m.InternalPort = lb.internalPort(o, m)
	err := g.DeleteFor(ctx, o.token, m)
	if !errors.Is(err, igd.ErrNotAuthorized) {
		return err
	}
	r, rerr := lb.read(ctx, o, []igd.Key{m.Key()})
	if rerr != nil {
		return err
	}
	cur, found := r.mappings[m.Key()]
	switch {
	case !found || !lb.owns(o, cur) || cur.InternalClient.Unmap() != m.InternalClient.Unmap():
		return nil // what was ours at the key is gone
	case cur.InternalPort != 0 && cur.InternalPort != m.InternalPort:
		return err // ours, but not the mapping proved: the caller reads again
	}
	if _, soon := lb.expiring(o, cur, r.at); soon {
		return err
	}
	klog.FromContext(ctx).V(2).Info("Router refused a guarded delete (another mapping to the same internal address and port is listed first); deleting on a fresh read", "service", o.key(), "key", m.Key(), "err", err)
	return lb.cfg.Client.DeletePortMapping(ctx, m.Protocol, m.ExternalPort)
}
