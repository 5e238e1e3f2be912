package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/informers"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	cloudprovider "k8s.io/cloud-provider"
	nodecontroller "k8s.io/cloud-provider/controllers/node"
	nodelifecyclecontroller "k8s.io/cloud-provider/controllers/nodelifecycle"
	routecontroller "k8s.io/cloud-provider/controllers/route"
	servicecontroller "k8s.io/cloud-provider/controllers/service"
	"k8s.io/component-base/featuregate"
	controllersmetrics "k8s.io/component-base/metrics/prometheus/controllers"
	"k8s.io/klog/v2"
	// The route controller asks the process's feature gate about a
	// controller-manager feature, which must be registered there.
	_ "k8s.io/controller-manager/pkg/features/register"

	"github.com/ccmkit/ccmkit/registry"
)

// Config configures Start.
type Config struct {
	// Cloud is the provider under test. Required. Start calls its
	// Initialize (and SetInformers when it is a
	// cloudprovider.InformerUser); Stop closes the stop channel it gave.
	Cloud cloudprovider.Interface
	// Objects are in the cluster from the start: Nodes, Services,
	// EndpointSlices, ...; nil = none. Services are created last, once the
	// service controller has synced every node (see Start). An object
	// without a UID is stored with a new one, as the API server gives
	// one; the caller's objects are not changed.
	Objects []runtime.Object
	// ClusterName is the name the service controller passes to the cloud;
	// "" = "kubernetes", as the cloud-controller-manager's default.
	ClusterName string
	// Timeout bounds each of Start's waits and each Wait method (a
	// shorter ctx deadline wins); 0 = 30 s.
	Timeout time.Duration
	// NodeMonitorPeriod is how often the cloud node lifecycle controller
	// asks the cloud about every node; 0 = 1 s.
	NodeMonitorPeriod time.Duration
	// NodeStatusUpdateFrequency is how often the cloud node controller
	// refreshes initialized nodes' addresses; 0 = 10 s.
	NodeStatusUpdateFrequency time.Duration
	// ConfigureCloudRoutes starts upstream's route controller when the cloud
	// has Routes, as a cloud-controller-manager does with
	// --allocate-node-cidrs and --configure-cloud-routes; false (the
	// manager's default, allocate-node-cidrs off) leaves routes alone.
	ConfigureCloudRoutes bool
	// ClusterCIDR is the pod network, as the cloud-controller-manager's
	// --cluster-cidr (comma-separated for dual-stack): the route
	// controller manages the cloud's routes into it and leaves others
	// alone; "" = "10.244.0.0/16".
	ClusterCIDR string
	// RouteReconciliationPeriod is how often the route controller matches
	// the cloud's routes with the nodes' pod CIDRs; 0 = 1 s.
	RouteReconciliationPeriod time.Duration
	// AllowUntaggedCloud lets Start run a cloud whose HasClusterID is
	// false, as the cloud-controller-manager's --allow-untagged-cloud does;
	// false (the command's default) makes Start refuse such a cloud, as the
	// command refuses to start.
	AllowUntaggedCloud bool
	// Logger receives what the controllers log through their context and
	// the events they record; the zero value discards it, so tests stay
	// quiet. For a test's own log, shown when it fails or with go test -v,
	// at a verbosity of your choice, use k8s.io/klog/v2/ktesting:
	// ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(4))).
	//
	// Upstream's controllers also log some lines, errors included,
	// through klog's process-wide functions, which no harness can tell
	// apart: in a test binary, Start sends those nowhere unless klog's
	// verbosity (its -v flag) is above 0.
	Logger klog.Logger
	// Classes are load balancer class controllers to run beside upstream's
	// (see Class); nil = none.
	Classes []Class
	// Client, when set, is the cluster's API: another Harness's Client. The
	// controllers of this Harness then run beside that Harness's, on the
	// same objects, as a second cloud-controller-manager process does
	// during a leader hand-over or after a restart; Objects must be nil
	// (create them through Client). Nil = a new cluster holding Objects.
	Client *k8sfake.Clientset
}

const (
	defaultClusterName = "kubernetes"
	defaultTimeout     = 30 * time.Second
	// pollInterval is how often a wait reads the clientset: the controllers
	// react within milliseconds on a fake clientset.
	pollInterval = 20 * time.Millisecond
)

func (c *Config) setDefaults() {
	if c.ClusterName == "" {
		c.ClusterName = defaultClusterName
	}
	if c.Timeout == 0 {
		c.Timeout = defaultTimeout
	}
	if c.NodeMonitorPeriod == 0 {
		c.NodeMonitorPeriod = time.Second
	}
	if c.NodeStatusUpdateFrequency == 0 {
		c.NodeStatusUpdateFrequency = 10 * time.Second
	}
	if c.ClusterCIDR == "" {
		c.ClusterCIDR = "10.244.0.0/16"
	}
	if c.RouteReconciliationPeriod == 0 {
		c.RouteReconciliationPeriod = time.Second
	}
	if c.Logger.GetSink() == nil {
		c.Logger = logr.Discard()
	}
}

// clusterCIDRs parses ClusterCIDR.
func (c *Config) clusterCIDRs() ([]*net.IPNet, error) {
	var out []*net.IPNet
	for cidr := range strings.SplitSeq(c.ClusterCIDR, ",") {
		_, n, err := net.ParseCIDR(strings.TrimSpace(cidr))
		if err != nil {
			return nil, fmt.Errorf("cluster: Config.ClusterCIDR %q: %w", c.ClusterCIDR, err)
		}
		out = append(out, n)
	}
	return out, nil
}

// Harness is a fake cluster with the upstream cloud controllers running
// against a cloud. Its methods are safe for concurrent use.
type Harness struct {
	// Client is the cluster's API: create, change and read objects
	// through it. As the API server does, it gives an object created
	// without a UID a new one. Deleting a Service the service controller
	// has given a finalizer should go through DeleteService.
	Client *k8sfake.Clientset

	cfg       Config
	cancel    context.CancelFunc
	factory   informers.SharedInformerFactory
	stopCloud chan struct{}
	wg        sync.WaitGroup
	stopOnce  sync.Once
	gate      gate // between the controllers and the cloud
	nodeErrs  nodeErrors

	// Which controllers run, fixed by Start.
	nodes, services bool
	// serviceNodeEvents counts the node events passed to the service
	// controller (see serviceNodeInformer).
	serviceNodeEvents atomic.Uint64
}

// Start starts a fake cluster holding cfg.Objects and the controllers cfg.Cloud
// supports: the cloud node and cloud node lifecycle controllers when it has
// Instances or InstancesV2, the route controller when it has Routes and
// cfg.ConfigureCloudRoutes is set (nodes get pod CIDRs from the PodCIDRs
// option), the service controller when it has a LoadBalancer. It waits for
// the nodes of cfg.Objects tainted as uninitialized to be initialized, then
// starts the service controller, and creates the Services of cfg.Objects
// once that controller's caches have synced. The service controller is not
// handed the nodes present when it starts, only later changes: with no
// Service yet, they would only start node syncs with nothing to do, and
// such a sync racing with a Service's first sync is a data race in upstream's
// service controller v0.37.
//
// Start refuses a cloud whose HasClusterID is false unless
// cfg.AllowUntaggedCloud is set, as the cloud-controller-manager does.
// Harnesses share no state (only klog's process-wide output is silenced,
// once; see Config.Logger): they may run in parallel tests. On error, everything started is stopped. The caller must call Stop.
//
// ctx bounds Start's waits only; the controllers run until Stop.
func Start(ctx context.Context, cfg Config) (*Harness, error) {
	if registry.IsNil(cfg.Cloud) {
		return nil, errors.New("cluster: Config.Cloud is nil")
	}
	if !cfg.Cloud.HasClusterID() && !cfg.AllowUntaggedCloud {
		return nil, fmt.Errorf("cluster: cloud provider %q has no cluster ID (HasClusterID is false): the cloud-controller-manager refuses to start it without --allow-untagged-cloud; set Config.AllowUntaggedCloud to run it anyway", cfg.Cloud.ProviderName())
	}
	if cfg.Client != nil && len(cfg.Objects) > 0 {
		return nil, errors.New("cluster: Config.Objects must be nil with Config.Client: create them through the client")
	}
	cfg.setDefaults()
	quietKlog()
	cidrs, err := cfg.clusterCIDRs()
	if err != nil {
		return nil, err
	}
	var objs []runtime.Object
	for _, o := range cfg.Objects {
		if _, ok := o.(*v1.Service); !ok {
			objs = append(objs, o)
		}
	}
	h := &Harness{
		Client:    cfg.Client,
		cfg:       cfg,
		stopCloud: make(chan struct{}),
	}
	if h.Client == nil {
		h.Client = k8sfake.NewClientset(withUIDs(objs)...)
		h.Client.PrependReactor("create", "*", assignUID)
	}
	h.factory = informers.NewSharedInformerFactory(h.Client, 0)
	runCtx, cancel := context.WithCancel(klog.NewContext(context.WithoutCancel(ctx), cfg.Logger))
	h.cancel = cancel
	cfg.Cloud.Initialize(ClientBuilder(h.Client), h.stopCloud)
	if u, ok := cfg.Cloud.(cloudprovider.InformerUser); ok {
		u.SetInformers(h.factory)
	}
	if err := h.start(ctx, runCtx, cidrs); err != nil {
		h.Stop()
		return nil, err
	}
	return h, nil
}

func (h *Harness) start(ctx, runCtx context.Context, clusterCIDRs []*net.IPNet) error {
	metrics := controllersmetrics.NewControllerManagerMetrics("ccmkit-fake-cluster")
	nodes := h.factory.Core().V1().Nodes()
	cloud := gatedCloud{h.cfg.Cloud, &h.gate, &h.nodeErrs}
	_, v1ok := h.cfg.Cloud.InstancesV2()
	_, v0ok := h.cfg.Cloud.Instances()
	if v1ok || v0ok {
		h.nodes = true
		cnc, err := nodecontroller.NewCloudNodeController(nodes, h.Client, cloud, h.cfg.NodeStatusUpdateFrequency, 1, 1)
		if err != nil {
			return fmt.Errorf("cluster: starting the cloud node controller: %w", err)
		}
		lc, err := nodelifecyclecontroller.NewCloudNodeLifecycleController(nodes, h.Client, cloud, h.cfg.NodeMonitorPeriod, 1)
		if err != nil {
			return fmt.Errorf("cluster: starting the cloud node lifecycle controller: %w", err)
		}
		h.wg.Go(func() { cnc.RunWithContext(runCtx, metrics) })
		h.wg.Go(func() { lc.Run(runCtx, metrics) })
	}
	if routes, ok := cloud.Routes(); ok && routes != nil && h.cfg.ConfigureCloudRoutes {
		rc, err := routecontroller.New(routes, h.Client, nodes, h.cfg.ClusterName, clusterCIDRs)
		if err != nil {
			return fmt.Errorf("cluster: starting the route controller: %w", err)
		}
		h.wg.Go(func() { rc.Run(runCtx, h.cfg.RouteReconciliationPeriod, metrics) })
	}
	h.factory.Start(runCtx.Done())
	if err := h.waitForCaches(ctx); err != nil {
		return err
	}

	for _, o := range h.cfg.Objects {
		n, ok := o.(*v1.Node)
		if !ok || !h.nodes || !uninitialized(n) {
			continue
		}
		got, err := h.WaitForNodeInitialized(ctx, n.Name)
		if err != nil {
			return err
		}
		// The service controller is about to get the informer's nodes as
		// its (ignored) initial list: the initialization must be in it, not
		// arrive later as an update that starts a node sync.
		_, err = poll(ctx, h.cfg.Timeout, "the node informer to see node "+n.Name+" initialized", func(context.Context) (struct{}, bool, func() string, error) {
			c, err := nodes.Lister().Get(n.Name)
			if err != nil {
				return struct{}{}, false, nil, err
			}
			return struct{}{}, c.Spec.ProviderID == got.Spec.ProviderID && !uninitialized(c), func() string { return describeNode(c) }, nil
		})
		if err != nil {
			return err
		}
	}

	if err := h.startClasses(ctx, runCtx); err != nil {
		return err
	}
	lb, ok := h.cfg.Cloud.LoadBalancer()
	if !ok || lb == nil {
		return h.createServices(ctx)
	}
	h.services = true
	sc, err := servicecontroller.New(cloud, h.Client, h.factory.Core().V1().Services(), serviceNodeInformer{nodes, &h.serviceNodeEvents}, h.cfg.ClusterName, featuregate.NewFeatureGate())
	if err != nil {
		return fmt.Errorf("cluster: starting the service controller: %w", err)
	}
	h.wg.Go(func() { sc.Run(runCtx, 1, metrics) })
	h.factory.Start(runCtx.Done())
	if err := h.waitForCaches(ctx); err != nil {
		return err
	}
	return h.createServices(ctx)
}

// withUIDs returns objs with a new UID in a copy of each object that has
// none.
func withUIDs(objs []runtime.Object) []runtime.Object {
	out := make([]runtime.Object, len(objs))
	for i, o := range objs {
		if m, err := meta.Accessor(o); err == nil && m.GetUID() == "" {
			o = o.DeepCopyObject()
			m, _ = meta.Accessor(o) // the same type: no error
			m.SetUID(uuid.NewUUID())
		}
		out[i] = o
	}
	return out
}

// assignUID is a reactor that gives an object created without a UID a new
// one, as the API server does, and lets the clientset store it.
func assignUID(action k8stesting.Action) (bool, runtime.Object, error) {
	if c, ok := action.(k8stesting.CreateAction); ok {
		// The action is the clientset's own copy: the caller's object
		// keeps its empty UID, as with a real client.
		if m, err := meta.Accessor(c.GetObject()); err == nil && m.GetUID() == "" {
			m.SetUID(uuid.NewUUID())
		}
	}
	return false, nil, nil
}

// waitForCaches waits for the informers started so far to sync.
func (h *Harness) waitForCaches(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, h.cfg.Timeout)
	defer cancel()
	for typ, ok := range h.factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("cluster: the %v informer did not sync: %w", typ, ctx.Err())
		}
	}
	return nil
}

// createServices creates the Services of cfg.Objects.
func (h *Harness) createServices(ctx context.Context) error {
	for _, o := range h.cfg.Objects {
		s, ok := o.(*v1.Service)
		if !ok {
			continue
		}
		if _, err := h.Client.CoreV1().Services(s.Namespace).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("cluster: creating Service %s/%s: %w", s.Namespace, s.Name, err)
		}
	}
	return nil
}

// Stop stops the controllers, waits for their calls to the cloud in flight
// (LoadBalancer, InstancesV2 and Routes methods; a call that ignores its
// cancelled context holds Stop up), shuts the informers down, closes the
// cloud's stop channel and, when the cloud has a Done() <-chan struct{}
// method (as provider.Cloud does), waits for it. Once Stop has returned,
// the controllers call none of those methods again: the workers upstream
// controllers start themselves, which exit moments later, get an error
// instead. Stop is idempotent.
func (h *Harness) Stop() {
	h.stopOnce.Do(func() {
		h.cancel()
		h.wg.Wait()
		h.gate.close()
		h.factory.Shutdown()
		close(h.stopCloud)
		if d, ok := h.cfg.Cloud.(interface{ Done() <-chan struct{} }); ok {
			<-d.Done()
		}
	})
}

// ClusterName is the cluster name the service controller passes to the
// cloud.
func (h *Harness) ClusterName() string { return h.cfg.ClusterName }

// AddNode creates node and, when the node controllers run and it is tainted
// as uninitialized, waits for it to be initialized; when the service
// controller runs, it then waits until that controller has been handed the
// node's events (its creation and its initialization each cause one) and
// none for a moment, so a Service created next is less likely to meet the
// node sync they cause. It returns the node as last read.
func (h *Harness) AddNode(ctx context.Context, node *v1.Node) (*v1.Node, error) {
	before := h.serviceNodeEvents.Load()
	n, err := h.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("cluster: creating node %s: %w", node.Name, err)
	}
	if h.nodes && uninitialized(node) {
		if n, err = h.WaitForNodeInitialized(ctx, node.Name); err != nil {
			return nil, err
		}
	}
	if !h.services {
		return n, nil
	}
	last, still := before, 0
	_, err = poll(ctx, h.cfg.Timeout, "the service controller to be handed node "+node.Name, func(context.Context) (uint64, bool, func() string, error) {
		c := h.serviceNodeEvents.Load()
		if c == last {
			still++
		} else {
			last, still = c, 0
		}
		return c, c > before && still >= quietPolls, func() string { return fmt.Sprintf("%d node events since the node was created", c-before) }, nil
	})
	return n, err
}

// quietPolls is how many polls without a node event AddNode takes as "the
// service controller is done with the node".
const quietPolls = 5
