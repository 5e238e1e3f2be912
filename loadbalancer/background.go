package loadbalancer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	servicehelper "k8s.io/cloud-provider/service/helpers"
	"k8s.io/klog/v2"

	"github.com/ccmkit/ccmkit/igd"
)

// clientName names the background work's API client and event source.
const clientName = "ccmkit-loadbalancer"

// Reasons of the events Services get.
const (
	// EventReasonExternalIPNotPublic is a Warning's: the router's external IP is not public or not usable.
	EventReasonExternalIPNotPublic = "ExternalIPNotPublic"
	// EventReasonOptInRequired is a Normal event's, once per process, for a Service Config.Services does not select.
	EventReasonOptInRequired = "OptInRequired"
	// EventReasonMappedPort is a Normal event's, once per port each time its
	// mapping is added or moves: which node and nodePort it forwards to.
	EventReasonMappedPort = "MappedPort"
)

// watch is the background work's view of the cluster.
type watch struct {
	client   kubernetes.Interface
	nodes    corelisters.NodeLister
	services corelisters.ServiceLister
	slices   discoverylisters.EndpointSliceLister
	recorder record.EventRecorder
}

// errSharedInformers ends a run on Run's own informers: SetInformers gave some.
var errSharedInformers = errors.New("loadbalancer: shared informers given")

// Run (provider.Runner) runs the background work until ctx is cancelled and
// its goroutines have returned: every Config.RenewInterval, after a node or
// a Local Service's endpoints change, and when a probe finds a mapping lost,
// it serves every Service with the service controller's finalizer again.
// Without a successful Initialize, or run twice, it logs an error and returns.
func (lb *LoadBalancer) Run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	b := &lb.bg
	b.mu.Lock()
	ph, client := b.phase, b.client
	if ph == phaseInitialized {
		b.phase = phaseSyncing
	}
	b.mu.Unlock()
	if ph == phaseNotStarted {
		b.setPhase(phaseStopped, nil) // it will not run: nothing may wait for its caches
	}
	if ph != phaseInitialized {
		why := "twice"
		if ph == phaseNotStarted {
			why = "before Initialize"
		}
		logger.Error(errors.New("loadbalancer: Run called "+why), "Load balancer background work not started")
		return
	}
	// Calls no longer wait for caches that will not sync.
	defer b.setPhase(phaseStopped, nil)
	for {
		b.mu.Lock()
		factory := b.factory
		runCtx, cancel := context.WithCancelCause(ctx)
		if factory == nil {
			b.stopOwn = cancel
		}
		b.mu.Unlock()
		err := lb.run(runCtx, client, factory)
		b.mu.Lock()
		b.stopOwn = nil
		b.mu.Unlock()
		cancel(nil)
		if ctx.Err() == nil && errors.Is(context.Cause(runCtx), errSharedInformers) {
			logger.Info("Load balancer background work moves to the shared informers")
			continue
		}
		if err != nil && ctx.Err() == nil {
			logger.Error(err, "Load balancer background work ended")
		}
		return
	}
}

// run is Run with its client and the shared factory (nil: its own).
func (lb *LoadBalancer) run(ctx context.Context, client kubernetes.Interface, factory informers.SharedInformerFactory) error {
	logger := klog.FromContext(ctx)
	own := factory == nil
	if own {
		factory = informers.NewSharedInformerFactory(client, 0)
		defer factory.Shutdown() // waits for the informers' goroutines
	}
	nodeInf := factory.Core().V1().Nodes()
	svcInf := factory.Core().V1().Services()
	sliceInf := factory.Discovery().V1().EndpointSlices()

	kick := make(chan struct{}, 1)
	trigger := func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	svcLister := svcInf.Lister()
	nodeHandler, sliceHandler, svcHandler := lb.handlers(svcLister, trigger)
	synced := []cache.InformerSynced{svcInf.Informer().HasSynced}
	for _, h := range []struct {
		what string
		inf  cache.SharedIndexInformer
		h    cache.ResourceEventHandler
	}{{"nodes", nodeInf.Informer(), nodeHandler}, {"endpoint slices", sliceInf.Informer(), sliceHandler}, {"services", svcInf.Informer(), svcHandler}} {
		reg, err := h.inf.AddEventHandler(h.h)
		if err != nil {
			return fmt.Errorf("loadbalancer: watch %s: %w", h.what, err)
		}
		defer func() { _ = h.inf.RemoveEventHandler(reg) }() // a shared factory outlives Run
		synced = append(synced, reg.HasSynced)
	}
	if own {
		factory.Start(ctx.Done())
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return fmt.Errorf("loadbalancer: caches of nodes, services and endpoint slices did not sync: %w", ctx.Err())
	}

	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	defer broadcaster.Shutdown()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	w := &watch{client: client, nodes: nodeInf.Lister(), services: svcLister, slices: sliceInf.Lister(),
		recorder: broadcaster.NewRecorder(scheme.Scheme, v1.EventSource{Component: clientName})}
	if nodes, err := w.nodes.List(labels.Everything()); err == nil {
		lb.seeNodes(nodes)
	}
	lb.bg.setPhase(phaseRunning, w)
	defer lb.bg.setPhase(phaseSyncing, nil) // Run ends stopped, or syncs again
	logger.Info("Load balancer background work started", "renewInterval", lb.cfg.RenewInterval, "probeInterval", lb.cfg.ProbeInterval)

	return lb.loop(ctx, w, kick, trigger)
}

// loop is the background work once its caches are synced: a pass every
// Config.RenewInterval, when kicked (a change seen) and when ports not
// forwarded are due again; a probe every Config.ProbeInterval; a repair
// on an announced restart (restartRepairs). It returns when ctx ends.
func (lb *LoadBalancer) loop(ctx context.Context, w *watch, kick <-chan struct{}, trigger func()) error {
	logger := klog.FromContext(ctx)
	ticker := lb.cfg.Clock.NewTicker(lb.cfg.RenewInterval)
	defer ticker.Stop()
	probe := lb.cfg.Clock.NewTicker(lb.cfg.ProbeInterval)
	defer probe.Stop()
	trigger()                  // one pass at start: repair what changed while we were away
	var retry <-chan time.Time // armed while a Service has ports not forwarded
	var restarts <-chan struct{}
	rr := &restartRepairs{lb: lb, quiet: min(lb.cfg.ProbeInterval, maxAnnouncedQuiet)}
	if a := lb.cfg.Announcer; a != nil {
		restarts = a.Restarts()
		listening := make(chan struct{})
		defer func() { <-listening }()
		go func() {
			defer close(listening)
			if err := a.ListenAnnounce(ctx); err != nil {
				logger.Error(err, "Not listening for router restart announcements; probes still find restarts")
			}
		}()
	}
	for {
		if retry == nil && lb.anyFailedPorts() {
			retry = lb.cfg.Clock.After(max(lb.cfg.RetryAfter, portRetryInterval))
		}
		onlyFailed := false
		select {
		case <-ctx.Done():
			logger.Info("Load balancer background work stopped")
			return nil
		case <-probe.C():
			probeCtx, cancel := context.WithTimeout(ctx, lb.cfg.ProbeInterval)
			lost := lb.probe(probeCtx)
			cancel()
			lb.probes.Add(1)
			if !lost {
				continue
			}
		case <-restarts:
			if !rr.announced(ctx) {
				continue
			}
		case <-rr.deferred:
			rr.deferred = nil
			rr.repair(logger, "Router announced a restart during the last repair's quiet time; repairing")
		case <-ticker.C():
		case <-kick:
		case <-retry:
			retry, onlyFailed = nil, true
		case <-lb.bg.wake:
			continue // arm the retry
		}
		// A pass ends before the next is due; igd bounds each router call.
		passCtx, cancel := context.WithTimeout(ctx, lb.cfg.RenewInterval)
		lb.passOver(passCtx, w, onlyFailed)
		cancel()
		lb.passes.Add(1)
	}
}

// restartRepairs decides when an announced router restart is repaired. Any
// LAN host can send an ANNOUNCE from the router's address: at most one
// repair per quiet time comes from them alone. One within it is checked
// against the router (a mapping this process wrote, asked after; at most one
// check per minRestartCheckInterval): a restart it confirms is repaired at
// once; another is not dropped (with protocol "pcp" no probe would find that
// restart before the renewal), it runs when the quiet time ends (deferred).
type restartRepairs struct {
	lb        *LoadBalancer
	quiet     time.Duration
	until     time.Time        // announcements wait until then
	deferred  <-chan time.Time // armed by an announcement within the quiet time
	lastCheck time.Time        // when an announcement was last checked against the router
}

// announced handles an announcement; it reports whether a pass repairs now.
func (r *restartRepairs) announced(ctx context.Context) bool {
	logger := klog.FromContext(ctx)
	now := r.lb.cfg.Clock.Now()
	if !now.Before(r.until) {
		r.repair(logger, "Router announced a restart; repairing")
		return true
	}
	lost := false
	if now.Sub(r.lastCheck) >= minRestartCheckInterval { // a flood costs one call a second
		r.lastCheck = now
		checkCtx, cancel := context.WithTimeout(ctx, maxRestartCheck)
		lost = r.lb.confirmRestart(checkCtx)
		cancel()
	}
	if !lost {
		if r.deferred == nil {
			r.deferred = r.lb.cfg.Clock.After(r.until.Sub(now))
		}
		return false
	}
	r.deferred = nil // the pass now covers it
	r.repair(logger, "Router announced a restart and lost a mapping this process wrote; repairing")
	return true
}

// repair starts a quiet time and has the mode forget what the restart lost;
// the pass that follows repairs it.
func (r *restartRepairs) repair(logger klog.Logger, msg string) {
	logger.Info(msg)
	r.until = r.lb.cfg.Clock.Now().Add(r.quiet)
	repairsTotal.Inc()
	r.lb.mode.routerRestarted()
	r.lb.expirePinholes()
}

// handlers returns the informers' event handlers: node changes are seen
// (addresses) and kick a pass; so do EndpointSlice changes of a Local
// Service handed to this LoadBalancer; a Service not opted in is told how
// at once, also when its caller asks Serves and never calls
// EnsureLoadBalancer for it.
func (lb *LoadBalancer) handlers(svcLister corelisters.ServiceLister, trigger func()) (onNodes, onSlices, onServices cache.ResourceEventHandler) {
	nodeHandler := cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if n, ok := obj.(*v1.Node); ok {
				lb.seeNodes([]*v1.Node{n})
			}
			trigger()
		},
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(*v1.Node)
			if n, ok2 := newObj.(*v1.Node); ok1 && ok2 {
				lb.seeNodes([]*v1.Node{n})
				if nodeChanged(o, n) {
					trigger()
				}
			}
		},
		DeleteFunc: func(obj any) {
			if n, ok := untomb(obj).(*v1.Node); ok {
				lb.forgetNode(n.Name)
			}
			trigger()
		},
	}
	onSlice := func(obj any) {
		if es, ok := untomb(obj).(*discoveryv1.EndpointSlice); ok {
			svc, err := svcLister.Services(es.Namespace).Get(es.Labels[discoveryv1.LabelServiceName])
			if err == nil && lb.handed(svc) && svc.Spec.ExternalTrafficPolicy == v1.ServiceExternalTrafficPolicyLocal {
				trigger()
			}
		}
	}
	sliceHandler := cache.ResourceEventHandlerFuncs{AddFunc: onSlice, UpdateFunc: func(_, n any) { onSlice(n) }, DeleteFunc: onSlice}
	onService := func(obj any) {
		if svc, ok := obj.(*v1.Service); ok && lb.handed(svc) && svc.DeletionTimestamp == nil && !lb.optedIn(svc) {
			lb.hintOptIn(svc)
		}
	}
	svcHandler := cache.ResourceEventHandlerFuncs{AddFunc: onService, UpdateFunc: func(_, n any) { onService(n) }}
	return nodeHandler, sliceHandler, svcHandler
}

// untomb returns the object of a delete notification, unwrapping a tombstone.
func untomb(obj any) any {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return tomb.Obj
	}
	return obj
}

// nodeChanged reports whether a node update can change where mappings point.
func nodeChanged(o, n *v1.Node) bool {
	ot, owhy := nodeTarget(o)
	nt, nwhy := nodeTarget(n)
	return ot != nt || owhy != nwhy || !slices.Equal(nodeAddrs(o), nodeAddrs(n)) || !slices.Equal(globalIPv6(o), globalIPv6(n))
}

// pass refreshes the external IP, serves every Service again as
// EnsureLoadBalancer would and patches the statuses that differ. Errors are logged.
func (lb *LoadBalancer) pass(ctx context.Context, w *watch) { lb.passOver(ctx, w, false) }

// passOver is pass; with onlyFailed, it serves only the Services with ports
// not forwarded, and does not list the table.
func (lb *LoadBalancer) passOver(ctx context.Context, w *watch, onlyFailed bool) {
	logger := klog.FromContext(ctx)
	result := "error" // until every Service was served
	defer func() { passesTotal.WithLabelValues(result).Inc() }()
	cluster := lb.clusterName()
	if cluster == "" {
		result = "skipped"
		logger.V(4).Info("Skipping load balancer pass: cluster name not known yet")
		return
	}
	lb.pruneDeleted()
	nodes, nodesErr := w.nodes.List(labels.Everything())
	svcs, svcsErr := w.services.List(labels.Everything())
	if err := errors.Join(nodesErr, svcsErr); err != nil {
		logger.Error(err, "Load balancer pass failed")
		return
	}
	lb.forgetGone(ctx, svcs)
	// The listing is only a hint of where Services may hold mappings that
	// nothing records: without it every Service is still served (renewed,
	// repaired) at the keys its spec, status and this process know.
	var hints tableHints
	var err error
	if !onlyFailed {
		hints, err = lb.mode.hints(ctx)
	}
	if err != nil {
		logger.Info("Listing the router's table failed; serving every Service at its known keys", "err", err)
	}
	slices.SortFunc(svcs, func(a, b *v1.Service) int { return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name) })
	failed := false
	lb.pruneHinted(svcs)
	for _, svc := range svcs {
		switch {
		case ctx.Err() != nil:
			return
		case !lb.handed(svc) || svc.DeletionTimestamp != nil:
			continue
		case !lb.optedIn(svc):
			lb.hintOptIn(svc) // Ensure may have come before the recorder existed
			continue
		case !lb.finalized(svc):
			continue
		}
		o := newOwner(cluster, svc.Namespace, svc.Name)
		if onlyFailed && len(lb.failedPorts(o)) == 0 && !lb.familyDown(o) {
			continue
		}
		if err := lb.passService(ctx, w, o, svc, nodes, hints.of(lb, o)); err != nil {
			failed = true
			logger.Error(err, "Background reconcile of service failed", "service", klog.KObj(svc))
		}
	}
	if !failed {
		result = "ok"
	}
}

// tableHints is what a listing of the router's table says about where
// Services may hold mappings nothing else records.
type tableHints struct {
	byToken map[string][]igd.Key // our format's mappings to a node, by owner token
	guarded []igd.Mapping        // mappings to a node whose description is a guarded client's token
}

// of returns the keys o may hold by the hints.
func (h tableHints) of(lb *LoadBalancer, o owner) []igd.Key {
	keys := h.byToken[o.token]
	for _, m := range h.guarded {
		if lb.mode.guardedFor(o, m) {
			keys = append(slices.Clip(keys), m.Key())
		}
	}
	return keys
}

// maxAnnouncedQuiet bounds the time after a repair on an announced restart
// within which another announcement waits (the probe interval when
// shorter): a LAN host forging ANNOUNCE messages makes at most one pass per
// quiet time, and a blind client renews every mapping in each.
const maxAnnouncedQuiet = 30 * time.Second

// listHints lists the router's table through l (nil: the client cannot
// list, and there are no hints): where a Service may hold mappings nothing
// else records. With guarded, the mappings to a node whose description is
// not ours are kept too: a guarded client's token may be one.
func (lb *LoadBalancer) listHints(ctx context.Context, l igd.Lister, guarded bool) (tableHints, error) {
	if l == nil {
		return tableHints{}, nil
	}
	h := tableHints{byToken: make(map[string][]igd.Key)}
	for _, proto := range []igd.Protocol{igd.TCP, igd.UDP} {
		ms, err := l.ListPortMappings(ctx, proto, igd.AllPorts)
		switch {
		case errors.Is(err, igd.ErrNotSupported):
			return tableHints{}, nil
		case err != nil:
			return tableHints{}, fmt.Errorf("loadbalancer: list router table: %w", err)
		}
		for _, m := range ms {
			if !lb.isNodeAddr(m.InternalClient) {
				continue
			}
			if p, ok := parseDescription(m.Description); ok {
				h.byToken[p.token] = append(h.byToken[p.token], m.Key())
			} else if guarded {
				h.guarded = append(h.guarded, m)
			}
		}
	}
	return h, nil
}

// passService serves one Service during a pass and patches its status.
func (lb *LoadBalancer) passService(ctx context.Context, w *watch, o owner, svc *v1.Service, nodes []*v1.Node, extra []igd.Key) error {
	t := lb.tryAcquire(o, svc)
	if t == nil {
		return nil // busy with the service controller, or deleted since listed
	}
	defer t.release()
	// The service controller may have acted on a newer Service than the
	// pass's list (a spec change, a delete that found no mapping): serve it
	// as the API server has it now, under its gate, or leave it alone when
	// gone, re-created, being deleted, without the finalizer, or not served.
	live, err := w.client.CoreV1().Services(svc.Namespace).Get(ctx, svc.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("loadbalancer: re-read service %s/%s: %w", svc.Namespace, svc.Name, err)
	case live.UID != svc.UID || live.DeletionTimestamp != nil || !lb.finalized(live) ||
		!lb.handed(live) || !lb.optedIn(live):
		return nil
	}
	svc = live
	st, err := lb.serve(ctx, t, svc, nodes, operation{pass: true, extra: extra})
	if st == nil || servicehelper.LoadBalancerStatusEqual(&svc.Status.LoadBalancer, st) {
		return err // with every port refused, the status says so (below)
	}
	updated := svc.DeepCopy()
	updated.Status.LoadBalancer = *st
	if _, perr := servicehelper.PatchService(w.client.CoreV1(), svc, updated); perr != nil {
		return errors.Join(err, fmt.Errorf("loadbalancer: patch status of service %s: %w", o.key(), perr))
	}
	klog.FromContext(ctx).Info("Patched load balancer status", "service", klog.KObj(svc), "ingress", st.Ingress)
	return err
}

// maxRestartCheck bounds the check of an announced restart: one router
// call, which the client bounds more tightly.
const maxRestartCheck = 10 * time.Second

// minRestartCheckInterval spaces the checks of announced restarts: a flood
// of forged announcements costs the router one call a second; one within it
// waits, as one the router does not confirm.
const minRestartCheckInterval = time.Second

// probe reads one mapping this process wrote, a different one each time, and
// reports whether the router lost or changed it (a reboot, a wiped table).
// With no mapping written, it checks a pinhole instead (probePinhole).
func (lb *LoadBalancer) probe(ctx context.Context) bool {
	want, ok := lb.nextProbe()
	if ok && lb.mode.lost(ctx, want, false) {
		klog.FromContext(ctx).Info("Router lost or changed a port mapping; repairing", "key", want.Key(), "want", want)
		repairsTotal.Inc()
		lb.expirePinholes() // a router that lost its table lost them too
		return true
	}
	return !ok && lb.probePinhole(ctx) // IPv6 only: a pinhole, where the client can check one
}

// epochChecker is an Announcer that can ask the router whether its epoch
// shows a restart (igd/pcp.Client).
type epochChecker interface {
	EpochLost(ctx context.Context) (bool, error)
}

// confirmRestart reports whether the router, which announced a restart, lost
// a mapping this process wrote (read again, or on a client that cannot read,
// asked after through its guard) or, when this process wrote none, whether
// the router's epoch, asked directly, shows a restart: whether the
// announcement was real. One router call either way.
func (lb *LoadBalancer) confirmRestart(ctx context.Context) bool {
	if want, ok := lb.nextProbe(); ok {
		return lb.mode.lost(ctx, want, true)
	}
	c, ok := lb.cfg.Announcer.(epochChecker)
	if !ok {
		return false
	}
	lost, err := c.EpochLost(ctx)
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Asking the router's epoch failed", "err", err)
	}
	return lost
}

// lostOnRead reads want, a mapping this process wrote, and reports whether
// the router lost or changed it (the modes' lost: on a client that cannot
// read, blindMode asks the router instead when asked to). A failed call
// reports nothing lost.
func (lb *LoadBalancer) lostOnRead(ctx context.Context, want igd.Mapping) bool {
	k := want.Key()
	m, err := lb.cfg.Client.GetPortMapping(ctx, k.Protocol, k.ExternalPort)
	switch {
	case errors.Is(err, igd.ErrNoSuchEntry):
		return true
	case err != nil:
		klog.FromContext(ctx).V(2).Info("Probe of a port mapping failed", "key", k, "err", err)
		return false
	}
	return m.InternalClient.Unmap() != want.InternalClient || (m.InternalPort != want.InternalPort && m.InternalPort != 0)
}

// nextProbe returns the next mapping this process wrote, in turn.
func (lb *LoadBalancer) nextProbe() (igd.Mapping, bool) {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	var written []igd.Mapping
	for _, s := range lb.services {
		for _, h := range s.held {
			if h.written.InternalClient.IsValid() && !h.unconfirmed {
				written = append(written, h.written)
			}
		}
	}
	if len(written) == 0 {
		return igd.Mapping{}, false
	}
	slices.SortFunc(written, func(a, b igd.Mapping) int { return compareKeys(a.Key(), b.Key()) })
	lb.probeSeq++
	return written[lb.probeSeq%len(written)], true
}
