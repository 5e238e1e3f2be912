package loadbalancer

import (
	"context"
	"fmt"
	"maps"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/api"
)

// phase is where the background work is in its life. The foreground asks it
// by name; it never infers it from which fields are set.
type phase int

const (
	// phaseNotStarted: no Initialize. No API client, no caches: the foreground
	// works alone (nodes from its calls, no arbitration by the API server,
	// no externalTrafficPolicy Local).
	phaseNotStarted phase = iota
	// phaseInitialized: Initialize built the API client; Run has not started.
	phaseInitialized
	// phaseSyncing: Run waits for its caches (at start, or moving onto shared informers).
	phaseSyncing
	// phaseRunning: Run's caches are synced and current.
	phaseRunning
	// phaseStopped: Run returned. Its caches are no longer current; the API
	// client and the node addresses seen stay.
	phaseStopped
)

// String names the phase, as logs and errors show it.
func (p phase) String() string {
	return [...]string{"not started", "initialized", "syncing", "running", "stopped"}[p]
}

// background is the background work's lifecycle and what the foreground
// uses of it: the API client, the caches and the event recorder.
type background struct {
	// mu guards the fields below; never held across an API call.
	mu      sync.Mutex
	phase   phase
	client  kubernetes.Interface            // set by Initialize
	factory informers.SharedInformerFactory // set by SetInformers
	stopOwn context.CancelCauseFunc         // ends a run on Run's own informers
	watch   *watch                          // set while running
	hinted  map[types.UID]bool              // Services told how to opt in
	// wake asks a running Run to look again at what it waits for (a port
	// not forwarded to retry); buffered, never closed.
	wake chan struct{}
}

// poke wakes a running Run without blocking.
func (b *background) poke() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// now returns the phase and, while running, the caches.
func (b *background) now() (phase, *watch) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.phase, b.watch
}

// apiClient returns Initialize's client (nil before it), also once Run returned.
func (b *background) apiClient() kubernetes.Interface {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.client
}

// setPhase moves to p with w as the caches (nil unless running).
func (b *background) setPhase(p phase, w *watch) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.phase, b.watch = p, w
}

var _ cloudprovider.InformerUser = (*LoadBalancer)(nil)

// SetInformers (cloudprovider.InformerUser) registers the node, Service and
// EndpointSlice informers with the CCM's factory, whose owner starts (call it
// before factory.Start) and stops them; Run adds handlers and waits for the
// caches. Without it, Run has its own; a Run on its own informers moves onto
// the first factory given. Later calls are used by the next Run.
func (lb *LoadBalancer) SetInformers(factory informers.SharedInformerFactory) {
	factory.Core().V1().Nodes().Informer()
	factory.Core().V1().Services().Informer()
	factory.Discovery().V1().EndpointSlices().Informer()
	b := &lb.bg
	b.mu.Lock()
	defer b.mu.Unlock()
	b.factory = factory
	if b.stopOwn != nil { // Run started already: move it onto factory
		b.stopOwn(errSharedInformers)
		b.stopOwn = nil
	}
}

// Initialize builds the background work's API client (provider.Initializer).
// It makes no network call; a second call does nothing.
func (lb *LoadBalancer) Initialize(ctx context.Context, clientBuilder cloudprovider.ControllerClientBuilder) error {
	if lb.bg.apiClient() != nil {
		return nil
	}
	client, err := clientBuilder.Client(clientName)
	if err != nil {
		return fmt.Errorf("loadbalancer: build Kubernetes client %q: %w", clientName, err)
	}
	b := &lb.bg
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.client == nil {
		b.client = client
		if b.phase == phaseNotStarted {
			b.phase = phaseInitialized
		}
	}
	return nil
}

// waitNodes returns an api.RetryError while this process cannot recognise
// o's mappings, not knowing the cluster's nodes: "no mappings" would let the
// service controller drop its finalizer over a previous process's mappings.
// GetLoadBalancer and EnsureLoadBalancerDeleted wait so; Ensure learns nodes
// from its arguments.
func (lb *LoadBalancer) waitNodes(o owner) error {
	ph, _ := lb.bg.now()
	lb.mu.Lock()
	seen := len(lb.nodeAddrs) > 0
	lb.mu.Unlock()
	switch {
	case ph == phaseInitialized || ph == phaseSyncing:
		return api.NewRetryError(fmt.Sprintf("loadbalancer: service %s: waiting for the node cache to sync, to recognise the service's mappings", o.key()), lb.cfg.RetryAfter)
	case !seen:
		return api.NewRetryError(fmt.Sprintf("loadbalancer: service %s: no node seen yet, so the service's mappings cannot be recognised; without background work (Initialize and Run), nodes are learnt from EnsureLoadBalancer and UpdateLoadBalancer", o.key()), lb.cfg.RetryAfter)
	}
	return nil
}

// pruneHinted forgets the Services told how to opt in that are gone from svcs.
func (lb *LoadBalancer) pruneHinted(svcs []*v1.Service) {
	live := make(map[types.UID]bool, len(svcs))
	for _, s := range svcs {
		live[s.UID] = true
	}
	b := &lb.bg
	b.mu.Lock()
	defer b.mu.Unlock()
	maps.DeleteFunc(b.hinted, func(uid types.UID, _ bool) bool { return !live[uid] })
}
