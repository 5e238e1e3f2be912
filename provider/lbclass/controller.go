package lbclass

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedv1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/api"
	"k8s.io/klog/v2"
)

// Config configures a Controller. Class, LoadBalancer, Client and Informers
// are required.
type Config struct {
	// Class is the spec.loadBalancerClass served: a domain-prefixed path
	// such as "ccmkit.io/upnp-igd", as the API server requires of a class.
	Class string
	// Classless also serves Services of type LoadBalancer with no class,
	// for clusters with no other load balancer: no cloud-controller-manager
	// serving them must run beside (both would serve them).
	Classless bool
	// LoadBalancer serves the Services. Its methods get ClusterName.
	LoadBalancer cloudprovider.LoadBalancer
	// Client writes finalizers, statuses and events.
	Client kubernetes.Interface
	// Informers is where New registers its Service and Node informers; its
	// owner starts it after New (factory.Start) and shuts it down.
	Informers informers.SharedInformerFactory
	// ClusterName is passed to every LoadBalancer call; "" = "kubernetes",
	// the cloud-controller-manager's default.
	ClusterName string
	// Finalizer marks the Services this controller may hold load balancers
	// for; "" = Class, which is a valid finalizer name for every class of
	// the form "domain/name" (name at most 63 characters). It must differ
	// from service.kubernetes.io/load-balancer-cleanup (see the package doc).
	Finalizer string
	// Component is the source of the events; "" = "lbclass-controller".
	Component string
	// Workers is how many Services are synced at once; 0 = 1.
	Workers int
	// ResyncPeriod, when positive, ensures every Service served again that
	// often, without Normal events, for a load balancer whose resources
	// need renewing and that does not renew them by itself (ccmkit's
	// loadbalancer does, for the Services of loadbalancer.Config.Class);
	// 0 = never, as upstream.
	ResyncPeriod time.Duration
	// MinRetryDelay and MaxRetryDelay bound the per-Service exponential
	// backoff after a failed sync; 0 = 5 s and 300 s, as upstream.
	MinRetryDelay, MaxRetryDelay time.Duration
}

const (
	defaultClusterName = "kubernetes"
	defaultComponent   = "lbclass-controller"
	// upstreamFinalizer is the service controller's own finalizer.
	upstreamFinalizer = "service.kubernetes.io/load-balancer-cleanup"
)

// validate fills defaults into c and checks it.
func (c *Config) validate() error {
	var errs field.ErrorList
	if c.Class == "" {
		errs = append(errs, field.Required(field.NewPath("Class"), "the loadBalancerClass to serve"))
	} else {
		errs = append(errs, validation.IsDomainPrefixedPath(field.NewPath("Class"), c.Class)...)
	}
	if c.LoadBalancer == nil {
		errs = append(errs, field.Required(field.NewPath("LoadBalancer"), ""))
	}
	if c.Client == nil {
		errs = append(errs, field.Required(field.NewPath("Client"), ""))
	}
	if c.Informers == nil {
		errs = append(errs, field.Required(field.NewPath("Informers"), ""))
	}
	if c.Finalizer == "" {
		c.Finalizer = c.Class
	}
	if c.Finalizer == upstreamFinalizer {
		errs = append(errs, field.Invalid(field.NewPath("Finalizer"), c.Finalizer, "is the service controller's, which cleans up every Service carrying it"))
	} else if c.Class != "" {
		errs = append(errs, apivalidation.ValidateFinalizerName(c.Finalizer, field.NewPath("Finalizer"))...)
	}
	if c.ResyncPeriod < 0 {
		errs = append(errs, field.Invalid(field.NewPath("ResyncPeriod"), c.ResyncPeriod, "must not be negative"))
	}
	if c.Workers < 0 {
		errs = append(errs, field.Invalid(field.NewPath("Workers"), c.Workers, "must not be negative"))
	}
	if err := errs.ToAggregate(); err != nil {
		return fmt.Errorf("lbclass: Config: %w", err)
	}
	if c.ClusterName == "" {
		c.ClusterName = defaultClusterName
	}
	if c.Component == "" {
		c.Component = defaultComponent
	}
	if c.Workers == 0 {
		c.Workers = 1
	}
	if c.MinRetryDelay == 0 {
		c.MinRetryDelay = 5 * time.Second
	}
	if c.MaxRetryDelay == 0 {
		c.MaxRetryDelay = 300 * time.Second
	}
	return nil
}

// Selective is implemented by a Config.LoadBalancer that serves only some of
// the Services handed to it (ccmkit's loadbalancer serves a classless
// Service only if it opted in). A Service it does not serve gets no
// finalizer and no EnsureLoadBalancer call, and one that carries the
// finalizer (served before, since opted out) is cleaned up as a Service
// that left the class is.
type Selective interface {
	// Serves reports whether the load balancer serves svc, a Service of
	// type LoadBalancer of the class (or classless, with
	// Config.Classless), not being deleted. It must not block.
	Serves(svc *v1.Service) bool
}

// Controller serves the Services of one load balancer class. Create it with
// New and start it with Run.
type Controller struct {
	cfg       Config
	services  corelisters.ServiceLister
	nodes     corelisters.NodeLister
	synced    []cache.InformerSynced
	queue     workqueue.TypedRateLimitingInterface[string]
	recorder  record.EventRecorder
	broadcast record.EventBroadcaster
	// serves is Config.LoadBalancer's Selective.Serves, or nil: it serves
	// every Service handed to it.
	serves func(*v1.Service) bool

	// mu guards served.
	mu sync.Mutex
	// served holds, by namespace/name key, what this controller last did
	// for each Service it may hold a load balancer for.
	served map[string]*served
}

// served is what the controller did for one Service.
type served struct {
	// svc is the Service as last served or cleaned: what a clean-up after
	// its deletion is given.
	svc *v1.Service
	// nodes is the node set last given to EnsureLoadBalancer or
	// UpdateLoadBalancer.
	nodes []*v1.Node
	// current is true when the load balancer is up to date with svc and
	// nodes; false after a failure, so the next sync ensures again.
	current bool
	// resync is true when current was cleared by the periodic resync: the
	// next ensure is quiet (no Normal events).
	resync bool
}

// New returns a Controller for cfg and registers its event handlers with
// cfg.Informers. It makes no API call.
func New(cfg Config) (*Controller, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	si := cfg.Informers.Core().V1().Services()
	ni := cfg.Informers.Core().V1().Nodes()
	c := &Controller{
		cfg:      cfg,
		services: si.Lister(),
		nodes:    ni.Lister(),
		synced:   []cache.InformerSynced{si.Informer().HasSynced, ni.Informer().HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](cfg.MinRetryDelay, cfg.MaxRetryDelay),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "lbclass"}),
		served: make(map[string]*served),
	}
	if sel, ok := cfg.LoadBalancer.(Selective); ok {
		c.serves = sel.Serves
	}
	c.broadcast = record.NewBroadcaster()
	c.recorder = c.broadcast.NewRecorder(scheme.Scheme, v1.EventSource{Component: cfg.Component})
	if _, err := si.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.serviceChanged,
		UpdateFunc: func(_, cur any) { c.serviceChanged(cur) },
		DeleteFunc: c.serviceChanged,
	}); err != nil {
		return nil, fmt.Errorf("lbclass: add Service handler: %w", err)
	}
	if _, err := ni.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { c.nodesChanged() },
		UpdateFunc: func(old, cur any) {
			o, ok1 := old.(*v1.Node)
			n, ok2 := cur.(*v1.Node)
			if ok1 && ok2 && nodeChanged(o, n) {
				c.nodesChanged()
			}
		},
		DeleteFunc: func(any) { c.nodesChanged() },
	}); err != nil {
		return nil, fmt.Errorf("lbclass: add Node handler: %w", err)
	}
	return c, nil
}

// Run syncs Services with cfg.Workers workers until ctx is cancelled, then
// returns once every goroutine it started has. It waits for the informers'
// caches first (an error if ctx ends before). Run must be called once.
func (c *Controller) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithValues("class", c.cfg.Class)
	ctx = klog.NewContext(ctx, logger)
	defer c.queue.ShutDown()
	c.broadcast.StartStructuredLogging(4)
	c.broadcast.StartRecordingToSink(&typedv1.EventSinkImpl{Interface: c.cfg.Client.CoreV1().Events("")})
	defer c.broadcast.Shutdown()

	logger.Info("Starting load balancer class controller", "classless", c.cfg.Classless)
	defer logger.Info("Stopped load balancer class controller")
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.synced...) {
		return fmt.Errorf("lbclass: waiting for the informers' caches: %w", context.Cause(ctx))
	}
	var wg sync.WaitGroup
	if c.cfg.ResyncPeriod > 0 {
		wg.Go(func() {
			t := time.NewTicker(c.cfg.ResyncPeriod)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					c.resyncAll()
				}
			}
		})
	}
	for range c.cfg.Workers {
		wg.Go(func() {
			for c.next(ctx) {
			}
		})
	}
	<-ctx.Done()
	c.queue.ShutDown()
	wg.Wait()
	return nil
}

// next syncs one Service from the queue; false once the queue is shut down.
func (c *Controller) next(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	err := c.sync(ctx, key)
	var re *api.RetryError
	switch {
	case err == nil:
		c.queue.Forget(key)
	case errors.As(err, &re):
		klog.FromContext(ctx).V(2).Info("Service not served yet, retrying", "service", key, "after", re.RetryAfter(), "reason", err.Error())
		c.queue.Forget(key)
		c.queue.AddAfter(key, re.RetryAfter())
	default:
		klog.FromContext(ctx).Error(err, "Syncing service failed, retrying with backoff", "service", key)
		c.queue.AddRateLimited(key)
	}
	return true
}

// serviceChanged queues a Service handed to this controller, one it did
// serve, or one it holds the finalizer of.
func (c *Controller) serviceChanged(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	if svc, ok := obj.(*v1.Service); ok && (c.handed(svc) || hasFinalizer(svc, c.cfg.Finalizer)) {
		c.queue.Add(key)
		return
	}
	c.mu.Lock()
	_, known := c.served[key]
	c.mu.Unlock()
	if known {
		c.queue.Add(key)
	}
}

// nodesChanged queues every Service served, whose node set may have
// changed: their syncs compare it with the one last given.
func (c *Controller) nodesChanged() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for key := range c.served {
		c.queue.Add(key)
	}
}

// resyncAll makes every Service served ensure again, quietly.
func (c *Controller) resyncAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for key, s := range c.served {
		if s.current {
			s.current, s.resync = false, true
		}
		c.queue.Add(key)
	}
}

// wants reports whether svc is to be served by this controller: handed to
// it, and served by its load balancer (see Selective).
func (c *Controller) wants(svc *v1.Service) bool {
	return c.handed(svc) && (c.serves == nil || c.serves(svc))
}

// handed reports whether svc is of type LoadBalancer, not being deleted,
// and of this controller's class (or classless, with Config.Classless).
func (c *Controller) handed(svc *v1.Service) bool {
	return svc.Spec.Type == v1.ServiceTypeLoadBalancer && svc.DeletionTimestamp == nil && c.ofClass(svc)
}

// ownedElsewhere reports whether svc is of type LoadBalancer, not being
// deleted, and of another class (or classless, without Config.Classless):
// its status is another controller's.
func (c *Controller) ownedElsewhere(svc *v1.Service) bool {
	return svc.Spec.Type == v1.ServiceTypeLoadBalancer && svc.DeletionTimestamp == nil && !c.ofClass(svc)
}

// ofClass reports whether svc's class is Config.Class, or svc has none and
// Config.Classless is set.
func (c *Controller) ofClass(svc *v1.Service) bool {
	if svc.Spec.LoadBalancerClass == nil {
		return c.cfg.Classless
	}
	return *svc.Spec.LoadBalancerClass == c.cfg.Class
}

// hasFinalizer reports whether svc carries finalizer f.
func hasFinalizer(svc *v1.Service, f string) bool {
	for _, x := range svc.Finalizers {
		if x == f {
			return true
		}
	}
	return false
}
