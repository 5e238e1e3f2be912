package cluster

import (
	"sync/atomic"
	"time"

	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// serviceNodeInformer is the node informer as the service controller sees
// it. It leaves out the nodes the informer replays to the controller's
// handler when it registers (the initial list) and counts the node events
// it passes on.
//
// Leaving the initial list out keeps the harness's waits to itself: each
// such node only asks the controller for a node sync, which with no
// Service cached (Start creates Services afterwards) has nothing to do, yet
// would read the controller's Service cache at a moment nobody can observe
// (upstream's service controller v0.37 writes a cached Service outside the
// lock its node sync reads it under, a data race). Start waited for those
// syncs through a process-wide metric, which made harnesses in one process
// unable to run in parallel.
type serviceNodeInformer struct {
	coreinformers.NodeInformer
	events *atomic.Uint64
}

func (i serviceNodeInformer) Informer() cache.SharedIndexInformer {
	return serviceNodeSharedInformer{i.NodeInformer.Informer(), i.events}
}

type serviceNodeSharedInformer struct {
	cache.SharedIndexInformer
	events *atomic.Uint64
}

func (i serviceNodeSharedInformer) AddEventHandler(h cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	return i.SharedIndexInformer.AddEventHandler(countedHandler{h, i.events})
}

func (i serviceNodeSharedInformer) AddEventHandlerWithResyncPeriod(h cache.ResourceEventHandler, resync time.Duration) (cache.ResourceEventHandlerRegistration, error) {
	return i.SharedIndexInformer.AddEventHandlerWithResyncPeriod(countedHandler{h, i.events}, resync)
}

// countedHandler passes node events on to h, but for the initial list, and
// counts them.
type countedHandler struct {
	h      cache.ResourceEventHandler
	events *atomic.Uint64
}

func (c countedHandler) OnAdd(obj any, isInInitialList bool) {
	if isInInitialList {
		return
	}
	c.h.OnAdd(obj, false)
	c.events.Add(1)
}

func (c countedHandler) OnUpdate(oldObj, newObj any) {
	c.h.OnUpdate(oldObj, newObj)
	c.events.Add(1)
}

func (c countedHandler) OnDelete(obj any) {
	c.h.OnDelete(obj)
	c.events.Add(1)
}
