package loadbalancer

import (
	"context"

	"github.com/ccmkit/ccmkit/igd"
)

// readingMode is the router mode of a client without a guard (UPnP): every
// write rests on a read of the router made in the same operation, and the
// description a mapping carries is the only record of who owns it.
type readingMode struct{ reads }

// read lists the keys where the client lists, else gets them one by one.
func (rm *readingMode) read(ctx context.Context, _ owner, keys []igd.Key) (reading, error) {
	return rm.lb.readRouter(ctx, rm.lister, keys)
}

func (rm *readingMode) canRead() bool { return true }

func (rm *readingMode) hints(ctx context.Context) (tableHints, error) {
	return rm.lb.listHints(ctx, rm.lister, false)
}

func (rm *readingMode) guardedFor(owner, igd.Mapping) bool { return false }

// deleteFirst: the router stores our description, and miniupnpd keeps the
// one first stored on a re-add with the same client and port, so a new
// description is a delete and an add.
func (rm *readingMode) deleteFirst(o owner, old igd.Mapping, p portPlan) bool {
	return rm.lb.internalPort(o, old) == p.nodePort && old.Description != p.description
}

func (rm *readingMode) add(ctx context.Context, _ owner, want igd.Mapping) (igd.Mapping, error) {
	return rm.lb.cfg.Client.AddPortMapping(ctx, want)
}

func (rm *readingMode) addFailed(ctx context.Context, req request, k igd.Key, err error) error {
	return rm.lb.addFailed(ctx, req, k, err)
}

func (rm *readingMode) refusalKeeps(error) bool { return false }

func (rm *readingMode) delete(ctx context.Context, _ owner, m igd.Mapping) error {
	return rm.lb.cfg.Client.DeletePortMapping(ctx, m.Protocol, m.ExternalPort)
}
