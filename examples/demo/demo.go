package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	restclient "k8s.io/client-go/rest"
	cloudprovider "k8s.io/cloud-provider"
	cloudproviderapi "k8s.io/cloud-provider/api"
	nodecontroller "k8s.io/cloud-provider/controllers/node"
	servicecontroller "k8s.io/cloud-provider/controllers/service"
	servicehelper "k8s.io/cloud-provider/service/helpers"
	"k8s.io/component-base/featuregate"
	"k8s.io/component-base/metrics/legacyregistry"
	controllersmetrics "k8s.io/component-base/metrics/prometheus/controllers"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/loadbalancer"
	"github.com/ccmkit/ccmkit/provider/edge"
	"github.com/ccmkit/ccmkit/registry"
)

const (
	clusterName = "demo"
	nodeName    = "demo-node"
	nodePort    = 30080
	// pollInterval is how often the demo looks at the cluster and the router
	// while it waits for the controllers.
	pollInterval = 50 * time.Millisecond
)

// quietOnce silences klog, through which the upstream controllers log: the
// demo tells its own story. Once per process, because the cloud node
// controller leaves goroutines running (and logging) for a moment after it
// returns, and klog's logger must not change under them.
var quietOnce sync.Once

// fakeNodeIP is the demo node's address when the router is the fake one.
var fakeNodeIP = netip.MustParseAddr("192.168.1.10")

// printer writes the demo's progress, one tagged line per step.
type printer struct{ out io.Writer }

func (p printer) step(who, format string, args ...any) {
	fmt.Fprintf(p.out, "%-9s %s\n", "["+who+"]", fmt.Sprintf(format, args...))
}

func (p printer) detail(text string) {
	for line := range strings.SplitSeq(strings.TrimRight(text, "\n"), "\n") {
		fmt.Fprintf(p.out, "%-9s   %s\n", "", line)
	}
}

func demo(ctx context.Context, opts options, out io.Writer) (err error) {
	p := printer{out}
	if !opts.verbose {
		quietOnce.Do(func() { klog.SetLogger(logr.Discard()) })
	}

	if opts.routerURL == "" {
		fmt.Fprintln(out, "ccmkit demo: the edge cloud provider on a fake cluster with a fake router")
	} else {
		fmt.Fprintf(out, "ccmkit demo: the edge cloud provider on a fake cluster with a REAL router at %s (one real port mapping, removed at the end)\n", opts.routerURL)
	}
	// The router: the fake one, or the real one the user named.
	routerURL, nodeIP, secureMode := opts.routerURL, fakeNodeIP, false
	if routerURL == "" {
		router := fake.NewRouter(fake.RouterConfig{})
		srv := fake.NewServer(router, fake.ServerOptions{})
		defer srv.Close()
		routerURL = srv.RootDescURL
		p.step("router", "fake UPnP IGD router (answers like miniupnpd) at %s", routerURL)
	} else {
		p.step("router", "real router at %s", routerURL)
	}
	// view is how the demo looks at the router's table, as `upnpc -l` would:
	// a client of its own, separate from the provider's.
	view, err := igd.NewClient(igd.Config{RootDescURL: routerURL})
	if err != nil {
		return fmt.Errorf("router client: %w", err)
	}
	external, err := view.ExternalIP(ctx)
	if err != nil {
		return fmt.Errorf("asking the router for its external IP: %w", err)
	}
	p.step("router", "external IP %s", external)
	if opts.routerURL != "" {
		// A real router may be in secure mode (it only maps ports to the
		// host that asks): the demo node is this host.
		if nodeIP, err = view.LocalAddr(ctx); err != nil {
			return fmt.Errorf("finding this host's address toward the router: %w", err)
		}
		secureMode = true
		p.step("router", "this host is %s on the router's LAN; the demo node gets that address", nodeIP)
	}

	// The provider, built by name from a cloud-config, as edge-ccm does.
	cloudConfig := fmt.Sprintf("gateway:\n  url: %s\nloadBalancer:\n  lease: 10m\n  secureMode: %t\n  nodeName: %s\n", routerURL, secureMode, nodeName)
	reg := registry.New()
	if err := edge.Register(reg); err != nil {
		return err
	}
	cloud, err := reg.Build(edge.ProviderName, strings.NewReader(cloudConfig))
	if err != nil {
		return err
	}
	p.step("ccm", "provider %q built from this cloud-config:", cloud.ProviderName())
	p.detail(cloudConfig)

	// The cluster: a fake API server holding one node, as kubelet
	// --cloud-provider=external registers it.
	client := k8sfake.NewClientset(newNode(nodeIP))
	p.step("cluster", "node %s registered by kubelet, tainted %s", nodeName, cloudproviderapi.TaintExternalCloudProvider)

	ccm := newCCM(ctx, cloud, client)
	defer ccm.stop()
	if err := ccm.startNodeController(); err != nil {
		return err
	}

	// 1. The cloud node controller initializes the node.
	node, err := waitFor(ctx, "the node to be initialized", func() (*v1.Node, bool, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return nil, false, err
		}
		return n, n.Spec.ProviderID != "" && !hasTaint(n, cloudproviderapi.TaintExternalCloudProvider), nil
	})
	if err != nil {
		return err
	}
	p.step("ccm", "node %s initialized: providerID %s, addresses [%s], taint removed", node.Name, node.Spec.ProviderID, formatAddresses(node.Status.Addresses))

	// 2. A Service of type LoadBalancer gets a mapping and an external IP.
	if err := ccm.startServiceController(ctx); err != nil {
		return err
	}
	services := client.CoreV1().Services("default")
	svc, err := services.Create(ctx, newService(opts.port), metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating the Service: %w", err)
	}
	// If a later step fails, the Service's mapping must not outlive the demo
	// on a real router: stop the controllers, then have the provider delete
	// what it made for the Service (it leaves every other mapping alone).
	created := svc // later steps reassign svc, to nil when they fail
	defer func() {
		if err != nil {
			err = errors.Join(err, ccm.removeLoadBalancer(created))
		}
	}()
	p.step("cluster", "Service %s/%s created: type LoadBalancer, port %d -> nodePort %d", svc.Namespace, svc.Name, opts.port, nodePort)
	key := igd.Key{Protocol: igd.TCP, ExternalPort: uint16(opts.port)}
	mapping, err := waitFor(ctx, "the port mapping on the router", func() (igd.Mapping, bool, error) {
		m, ok, err := findMapping(ctx, view, key, nodeIP)
		return m, ok, err
	})
	if err != nil {
		return err
	}
	p.step("router", "mapping %s -> %s:%d, description %q", key, mapping.InternalClient, mapping.InternalPort, mapping.Description)
	svc, err = waitFor(ctx, "the Service's external IP", func() (*v1.Service, bool, error) {
		s, err := services.Get(ctx, svc.Name, metav1.GetOptions{})
		if err != nil {
			return nil, false, err
		}
		if len(s.Status.LoadBalancer.Ingress) > 0 && s.Status.LoadBalancer.Ingress[0].IP != "" {
			return s, true, nil
		}
		// The load balancer reports no address it cannot stand behind (not
		// public, or 0.0.0.0 while the router's WAN is down), and says why.
		return nil, false, unusableExternalIP(ctx, client, s)
	})
	if err != nil {
		return err
	}
	ip := svc.Status.LoadBalancer.Ingress[0].IP
	if ip != external.String() {
		return fmt.Errorf("the Service's external IP is %s, the router's is %s", ip, external)
	}
	p.step("ccm", "Service %s/%s has external IP %s: %s:%d reaches %s port %d", svc.Namespace, svc.Name, ip, ip, opts.port, nodeName, nodePort)

	// 3. Clean up: deleting the Service removes the mapping. A real API
	// server keeps a Service with finalizers, marked for deletion, until the
	// service controller has removed its load balancer and its finalizer;
	// the fake clientset does not, so the demo plays that part.
	svc.DeletionTimestamp = ptr.To(metav1.Now())
	if _, err := services.Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("deleting the Service: %w", err)
	}
	p.step("cluster", "Service %s/%s marked for deletion, waiting for its finalizer %s", svc.Namespace, svc.Name, servicehelper.LoadBalancerCleanupFinalizer)
	if _, err := waitFor(ctx, "the service controller to release the Service", func() (*v1.Service, bool, error) {
		s, err := services.Get(ctx, svc.Name, metav1.GetOptions{})
		if err != nil {
			return nil, false, err
		}
		return s, !servicehelper.HasLBFinalizer(s), nil
	}); err != nil {
		return err
	}
	if err := services.Delete(ctx, svc.Name, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("deleting the Service: %w", err)
	}
	p.step("cluster", "Service %s/%s deleted (the controller removed its load balancer and finalizer)", svc.Namespace, svc.Name)
	table, err := waitFor(ctx, "the mapping to be removed", func() ([]igd.Mapping, bool, error) {
		_, found, err := findMapping(ctx, view, key, nodeIP)
		if err != nil || found {
			return nil, false, err
		}
		all, err := igd.ReadTable(ctx, view)
		return all, err == nil, err
	})
	if err != nil {
		return err
	}
	if len(table) == 0 {
		p.step("router", "mapping %s removed; the router's table is empty", key)
	} else {
		p.step("router", "mapping %s removed; other mappings left untouched: %d", key, len(table))
	}
	return nil
}

// ccm runs what a cloud-controller-manager runs for the edge provider: the
// provider's own background work, the cloud node controller and the service
// controller, on shared informers.
type ccm struct {
	ctx       context.Context
	cancel    context.CancelFunc
	cloud     cloudprovider.Interface
	client    kubernetes.Interface
	factory   informers.SharedInformerFactory
	metrics   *controllersmetrics.ControllerManagerMetrics
	stopCloud chan struct{}
	wg        sync.WaitGroup
}

// newCCM initializes cloud, as the cloud-controller-manager does before it
// starts its controllers.
func newCCM(ctx context.Context, cloud cloudprovider.Interface, client kubernetes.Interface) *ccm {
	c := &ccm{
		cloud:     cloud,
		client:    client,
		factory:   informers.NewSharedInformerFactory(client, 0),
		metrics:   controllersmetrics.NewControllerManagerMetrics("demo"),
		stopCloud: make(chan struct{}),
	}
	c.ctx, c.cancel = context.WithCancel(ctx)
	cloud.Initialize(clientBuilder{client}, c.stopCloud)
	if u, ok := cloud.(cloudprovider.InformerUser); ok {
		u.SetInformers(c.factory)
	}
	return c
}

func (c *ccm) startNodeController() error {
	nodes, err := nodecontroller.NewCloudNodeController(c.factory.Core().V1().Nodes(), c.client, c.cloud, time.Minute, 1, 1)
	if err != nil {
		return fmt.Errorf("starting the cloud node controller: %w", err)
	}
	c.wg.Go(func() { nodes.RunWithContext(c.ctx, c.metrics) })
	c.factory.Start(c.ctx.Done())
	return nil
}

// startServiceController starts the service controller and waits for its
// first pass over the nodes. The upstream controller (v0.37) writes its
// Service cache without the lock its node pass reads it under, so a Service
// synced during a node pass is a data race; the demo lets the node pass
// finish first. A real cloud-controller-manager runs both controllers at
// once and lives with the race.
func (c *ccm) startServiceController(ctx context.Context) error {
	before, err := nodeSyncs()
	if err != nil {
		return err
	}
	lbs, err := servicecontroller.New(c.cloud, c.client, c.factory.Core().V1().Services(), c.factory.Core().V1().Nodes(), clusterName, featuregate.NewFeatureGate())
	if err != nil {
		return fmt.Errorf("starting the service controller: %w", err)
	}
	c.wg.Go(func() { lbs.Run(c.ctx, 1, c.metrics) })
	c.factory.Start(c.ctx.Done())
	_, err = waitFor(ctx, "the service controller's first pass over the nodes", func() (uint64, bool, error) {
		n, err := nodeSyncs()
		return n, n > before, err
	})
	return err
}

// cleanupTimeout bounds removeLoadBalancer, which runs after the demo's own
// deadline may have passed: a router call is bounded by the provider's call
// timeout (2 s by default), and removing one mapping takes a few calls.
const cleanupTimeout = 15 * time.Second

// removeLoadBalancer stops the controllers and deletes svc's load balancer
// through the provider, as the service controller would have.
func (c *ccm) removeLoadBalancer(svc *v1.Service) error {
	c.cancel()
	c.wg.Wait()
	lb, ok := c.cloud.LoadBalancer()
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.ctx), cleanupTimeout)
	defer cancel()
	if err := lb.EnsureLoadBalancerDeleted(ctx, clusterName, svc); err != nil {
		return fmt.Errorf("cleaning up the load balancer of Service %s/%s: %w", svc.Namespace, svc.Name, err)
	}
	return nil
}

// stop stops the controllers and the provider's background work and waits
// until every goroutine they started has returned.
func (c *ccm) stop() {
	c.cancel()
	c.wg.Wait()
	c.factory.Shutdown()
	close(c.stopCloud)
	if d, ok := c.cloud.(interface{ Done() <-chan struct{} }); ok {
		<-d.Done()
	}
}

// nodeSyncs is how many passes over the nodes the service controller has
// finished in this process: the count of its nodesync_latency_seconds
// histogram.
func nodeSyncs() (uint64, error) {
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		return 0, fmt.Errorf("reading metrics: %w", err)
	}
	var n uint64
	for _, f := range families {
		if f.GetName() == "service_controller_nodesync_latency_seconds" {
			for _, m := range f.GetMetric() {
				n += m.GetHistogram().GetSampleCount()
			}
		}
	}
	return n, nil
}

// clientBuilder hands the fake clientset to the provider, as the
// cloud-controller-manager hands it a builder for the real API server.
type clientBuilder struct{ client kubernetes.Interface }

func (b clientBuilder) Config(string) (*restclient.Config, error)   { return &restclient.Config{}, nil }
func (b clientBuilder) ConfigOrDie(string) *restclient.Config       { return &restclient.Config{} }
func (b clientBuilder) Client(string) (kubernetes.Interface, error) { return b.client, nil }
func (b clientBuilder) ClientOrDie(string) kubernetes.Interface     { return b.client }

// waitFor polls check until it reports done, and returns its last value.
// It fails when ctx ends, saying what it was waiting for and the last error.
func waitFor[T any](ctx context.Context, what string, check func() (T, bool, error)) (T, error) {
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	var lastErr error
	for {
		v, done, err := check()
		if err == nil && done {
			return v, nil
		}
		if err != nil {
			lastErr = err
		}
		select {
		case <-ctx.Done():
			var zero T
			if lastErr != nil {
				return zero, fmt.Errorf("waiting for %s: %w (last error: %w)", what, ctx.Err(), lastErr)
			}
			return zero, fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-ticker.C:
		}
	}
}

// unusableExternalIP returns the message of the Warning event the load
// balancer records on svc when the router's external IP cannot be reported,
// as an error; nil when there is none.
func unusableExternalIP(ctx context.Context, client kubernetes.Interface, svc *v1.Service) error {
	evs, err := client.CoreV1().Events(svc.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, ev := range evs.Items {
		if ev.InvolvedObject.UID == svc.UID && ev.Type == v1.EventTypeWarning && ev.Reason == loadbalancer.EventReasonExternalIPNotPublic {
			return errors.New(ev.Message)
		}
	}
	return nil
}

// findMapping looks for the mapping at key that points at target.
func findMapping(ctx context.Context, c igd.Client, key igd.Key, target netip.Addr) (igd.Mapping, bool, error) {
	m, err := c.GetPortMapping(ctx, key.Protocol, key.ExternalPort)
	if errors.Is(err, igd.ErrNoSuchEntry) {
		return igd.Mapping{}, false, nil
	}
	if err != nil {
		return igd.Mapping{}, false, err
	}
	return m, m.InternalClient == target, nil
}

func newNode(ip netip.Addr) *v1.Node {
	return &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: nodeName, CreationTimestamp: metav1.Now()},
		Spec: v1.NodeSpec{Taints: []v1.Taint{{
			Key: cloudproviderapi.TaintExternalCloudProvider, Value: "true", Effect: v1.TaintEffectNoSchedule,
		}}},
		Status: v1.NodeStatus{
			Addresses: []v1.NodeAddress{
				{Type: v1.NodeInternalIP, Address: ip.String()},
				{Type: v1.NodeHostName, Address: nodeName},
			},
			Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}},
		},
	}
}

func newService(port int) *v1.Service {
	return &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "hello", UID: "6f2b8a9e-demo",
			// Only Services that opt in get a port on the router.
			Annotations: map[string]string{loadbalancer.AnnotationLoadBalancerType: loadbalancer.AnnotationValue}},
		Spec: v1.ServiceSpec{
			Type:       v1.ServiceTypeLoadBalancer,
			Selector:   map[string]string{"app": "hello"},
			ClusterIP:  "10.96.0.10",
			ClusterIPs: []string{"10.96.0.10"},
			IPFamilies: []v1.IPFamily{v1.IPv4Protocol},
			Ports: []v1.ServicePort{{
				Name: "http", Protocol: v1.ProtocolTCP, Port: int32(port),
				TargetPort: intstr.FromInt32(80), NodePort: nodePort,
			}},
			ExternalTrafficPolicy: v1.ServiceExternalTrafficPolicyCluster,
		},
	}
}

func hasTaint(n *v1.Node, key string) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == key {
			return true
		}
	}
	return false
}

func formatAddresses(addrs []v1.NodeAddress) string {
	parts := make([]string, len(addrs))
	for i, a := range addrs {
		parts[i] = string(a.Type) + " " + a.Address
	}
	return strings.Join(parts, ", ")
}
