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
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	cloudprovider "k8s.io/cloud-provider"
	cloudproviderapi "k8s.io/cloud-provider/api"
	servicehelper "k8s.io/cloud-provider/service/helpers"
	"k8s.io/klog/v2"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/fake/cluster"
	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/loadbalancer"
	"github.com/ccmkit/ccmkit/provider/edge"
	"github.com/ccmkit/ccmkit/registry"
)

const (
	clusterName = "demo"
	nodeName    = "demo-node"
	nodePort    = 30080
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

// demo runs the story, printing each step to out: the router, the provider
// built from a cloud-config, and the upstream controllers on a fake cluster
// (ccmkit's fake/cluster) initializing a node and giving a Service a port
// mapping and an external IP, removed when the Service is deleted.
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
	if err := reg.Register(edge.ProviderName, edge.Factory); err != nil {
		return err
	}
	cloud, err := reg.Build(edge.ProviderName, strings.NewReader(cloudConfig))
	if err != nil {
		return err
	}
	p.step("ccm", "provider %q built from this cloud-config:", cloud.ProviderName())
	p.detail(cloudConfig)

	// The cluster: a fake API server holding one node, as kubelet
	// --cloud-provider=external registers it, and the upstream controllers
	// a cloud-controller-manager runs for the provider (cloud node, cloud
	// node lifecycle, service), started by ccmkit's test kit.
	p.step("cluster", "node %s registered by kubelet, tainted %s", nodeName, cloudproviderapi.TaintExternalCloudProvider)
	h, err := cluster.Start(ctx, cluster.Config{
		Cloud:       cloud,
		ClusterName: clusterName,
		Timeout:     opts.timeout,
		Objects:     []k8sruntime.Object{cluster.Node(nodeName, cluster.InternalIP(nodeIP.String()))},
	})
	if err != nil {
		return err
	}
	defer h.Stop()

	// 1. The cloud node controller initializes the node.
	node, err := h.WaitForNodeInitialized(ctx, nodeName)
	if err != nil {
		return err
	}
	p.step("ccm", "node %s initialized: providerID %s, addresses [%s], taint removed", node.Name, node.Spec.ProviderID, formatAddresses(node.Status.Addresses))

	// 2. A Service of type LoadBalancer gets a mapping and an external IP.
	svc := cluster.Service("default", "hello",
		cluster.Port("http", v1.ProtocolTCP, int32(opts.port), nodePort),
		// Only Services that opt in get a port on the router.
		cluster.Annotation(loadbalancer.AnnotationLoadBalancerType, loadbalancer.AnnotationValue))
	created, err := h.Client.CoreV1().Services(svc.Namespace).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating the Service: %w", err)
	}
	// If a later step fails, the Service's mapping must not outlive the demo
	// on a real router: stop the controllers, then have the provider delete
	// what it made for the Service (it leaves every other mapping alone).
	defer func() {
		if err != nil {
			err = errors.Join(err, removeLoadBalancer(ctx, h, cloud, created))
		}
	}()
	p.step("cluster", "Service %s/%s created: type LoadBalancer, port %d -> nodePort %d", svc.Namespace, svc.Name, opts.port, nodePort)
	key := igd.Key{Protocol: igd.TCP, ExternalPort: uint16(opts.port)}
	var mapping igd.Mapping
	if err := h.Wait(ctx, "the port mapping on the router", func(ctx context.Context) (bool, error) {
		m, found, err := findMapping(ctx, view, key, nodeIP)
		mapping = m
		return found, err
	}); err != nil {
		return err
	}
	p.step("router", "mapping %s -> %s:%d, description %q", key, mapping.InternalClient, mapping.InternalPort, mapping.Description)
	// The load balancer reports no address it cannot stand behind (not
	// public, or 0.0.0.0 while the router's WAN is down); the error then
	// shows the Warning event that says why.
	got, err := h.WaitForIngress(ctx, svc.Namespace, svc.Name)
	if err != nil {
		return err
	}
	ip := got.Status.LoadBalancer.Ingress[0].IP
	if ip != external.String() {
		return fmt.Errorf("the Service's external IP is %s, the router's is %s", ip, external)
	}
	p.step("ccm", "Service %s/%s has external IP %s: %s:%d reaches %s port %d", svc.Namespace, svc.Name, ip, ip, opts.port, nodeName, nodePort)

	// 3. Clean up: deleting the Service removes the mapping. A real API
	// server keeps a Service with finalizers, marked for deletion, until the
	// service controller has removed its load balancer and its finalizer;
	// the fake clientset does not, so DeleteService plays that part.
	p.step("cluster", "Service %s/%s marked for deletion, waiting for its finalizer %s", svc.Namespace, svc.Name, servicehelper.LoadBalancerCleanupFinalizer)
	if err := h.DeleteService(ctx, svc.Namespace, svc.Name); err != nil {
		return err
	}
	p.step("cluster", "Service %s/%s deleted (the controller removed its load balancer and finalizer)", svc.Namespace, svc.Name)
	var table []igd.Mapping
	if err := h.Wait(ctx, "the mapping to be removed", func(ctx context.Context) (bool, error) {
		_, found, err := findMapping(ctx, view, key, nodeIP)
		if err != nil || found {
			return false, err
		}
		table, err = igd.ReadTable(ctx, view)
		return err == nil, err
	}); err != nil {
		return err
	}
	if len(table) == 0 {
		p.step("router", "mapping %s removed; the router's table is empty", key)
	} else {
		p.step("router", "mapping %s removed; other mappings left untouched: %d", key, len(table))
	}
	return nil
}

// cleanupTimeout bounds removeLoadBalancer, which runs after the demo's own
// deadline may have passed: a router call is bounded by the provider's call
// timeout (2 s by default), and removing one mapping takes a few calls.
const cleanupTimeout = 15 * time.Second

// removeLoadBalancer stops the cluster's controllers and deletes svc's load
// balancer through the provider, as the service controller would have.
func removeLoadBalancer(ctx context.Context, h *cluster.Harness, cloud cloudprovider.Interface, svc *v1.Service) error {
	h.Stop()
	lb, ok := cloud.LoadBalancer()
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if err := lb.EnsureLoadBalancerDeleted(ctx, h.ClusterName(), svc); err != nil {
		return fmt.Errorf("cleaning up the load balancer of Service %s/%s: %w", svc.Namespace, svc.Name, err)
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

func formatAddresses(addrs []v1.NodeAddress) string {
	parts := make([]string, len(addrs))
	for i, a := range addrs {
		parts[i] = string(a.Type) + " " + a.Address
	}
	return strings.Join(parts, ", ")
}
