package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/component-base/cli"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/controller-manager/pkg/clientbuilder"
	"k8s.io/klog/v2"

	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/loadbalancer"
	"github.com/ccmkit/ccmkit/provider"
	"github.com/ccmkit/ccmkit/provider/edge"
	"github.com/ccmkit/ccmkit/provider/lbclass"
)

// The standalone load balancer: `edge-ccm load-balancer` serves the Services
// of one loadBalancerClass (and, with --classless, those with none) with the
// edge load balancer, as a plain Deployment beside whatever the cluster
// runs: no --cloud-provider=external, no ProviderIDs, nodes as kubelet
// registered them (the load balancer maps to their InternalIP).

// The class controller adds its finalizer only to the Services the edge
// load balancer serves (a classless one must opt in).
var _ lbclass.Selective = (*loadbalancer.LoadBalancer)(nil)

// standaloneCommand is the first argument that selects the standalone mode.
const standaloneCommand = "load-balancer"

// DefaultClass is the loadBalancerClass the standalone mode serves by
// default.
const DefaultClass = "ccmkit.io/upnp-igd"

// standaloneOptions are the flags of the standalone mode.
type standaloneOptions struct {
	kubeconfig  string
	cloudConfig string
	clusterName string
	class       string
	classless   bool
	workers     int
	resync      time.Duration
	bindAddress string

	leaderElect    bool
	leaseNamespace string
	leaseName      string
	leaseDuration  time.Duration
	renewDeadline  time.Duration
	retryPeriod    time.Duration
}

// runStandalone runs the standalone mode with args (those after
// "load-balancer") and returns the exit code.
func runStandalone(args []string) int {
	cmd, _ := standaloneCmd()
	cmd.SetArgs(args)
	// SIGTERM (a rollout, a drain) releases the Lease and stops the
	// workers; mappings stay, for the next leader.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cmd.SetContext(ctx)
	return cli.Run(cmd)
}

// standaloneCmd returns the standalone mode's command and the options its
// flags set.
func standaloneCmd() (*cobra.Command, *standaloneOptions) {
	o := &standaloneOptions{
		clusterName: "kubernetes", class: DefaultClass, workers: 1, bindAddress: defaultBindAddress,
		leaderElect: true, leaseNamespace: "kube-system", leaseName: "edge-load-balancer",
		leaseDuration: 15 * time.Second, renewDeadline: 10 * time.Second, retryPeriod: 2 * time.Second,
	}
	cmd := &cobra.Command{
		Use:   "edge-ccm " + standaloneCommand,
		Short: "Serve Services of a loadBalancerClass with UPnP IGD port mappings, without being the cluster's cloud-controller-manager",
		Long: `Serves the Services of type LoadBalancer whose spec.loadBalancerClass is
--load-balancer-class (and, with --classless, those without a class) with
port mappings on the router, as a Deployment beside the cluster's own
controllers. Nodes need no --cloud-provider=external and no ProviderID: the
mappings point at their InternalIP as kubelet registered it.

The cloud-config is edge-ccm's (its instances section is ignored).
Services of the class are served whatever loadBalancer.services says;
classless Services (with --classless) still need the opt-in annotation
unless loadBalancer.services is "all".`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context())
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.kubeconfig, "kubeconfig", o.kubeconfig, "kubeconfig file; \"\" = the in-cluster service account")
	fs.StringVar(&o.cloudConfig, "cloud-config", o.cloudConfig, "edge cloud-config file; \"\" = all defaults")
	fs.StringVar(&o.clusterName, "cluster-name", o.clusterName, "part of the owner of every router mapping: clusters behind one router need different names")
	fs.StringVar(&o.class, "load-balancer-class", o.class, "the spec.loadBalancerClass served")
	fs.BoolVar(&o.classless, "classless", o.classless, "also serve Services with no loadBalancerClass (only when no other load balancer serves them: k3s servicelb off, no cloud-controller-manager)")
	fs.IntVar(&o.workers, "workers", o.workers, "Services synced at once")
	fs.DurationVar(&o.resync, "resync-period", o.resync, "how often every Service served is ensured again, as a periodic resync; 0 = never: the load balancer's own background work renews leases and repairs the router's table for every Service it serves")
	fs.StringVar(&o.bindAddress, "bind-address", o.bindAddress, "host:port serving /healthz and /metrics (Prometheus text, without authentication: the router's and the load balancer's counters; the default, on loopback, lets only the node itself in); \"\" = none")
	fs.BoolVar(&o.leaderElect, "leader-elect", o.leaderElect, "take a Lease before serving, so one replica is active")
	fs.StringVar(&o.leaseNamespace, "leader-elect-resource-namespace", o.leaseNamespace, "namespace of the Lease")
	fs.StringVar(&o.leaseName, "leader-elect-resource-name", o.leaseName, "name of the Lease")
	fs.DurationVar(&o.leaseDuration, "leader-elect-lease-duration", o.leaseDuration, "how long a standby waits after the last renewal before taking over")
	fs.DurationVar(&o.renewDeadline, "leader-elect-renew-deadline", o.renewDeadline, "how long the leader retries renewing before it stops serving")
	fs.DurationVar(&o.retryPeriod, "leader-elect-retry-period", o.retryPeriod, "time between tries to take or renew the Lease")
	return cmd, o
}

// run serves until ctx ends or, with leader election, leadership is lost.
func (o *standaloneOptions) run(ctx context.Context) error {
	restCfg, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return fmt.Errorf("load-balancer: --kubeconfig %q: %w", o.kubeconfig, err)
	}
	cloud, err := buildEdge(o.cloudConfig, edge.Options{Class: o.class, Classless: o.classless})
	if err != nil {
		return err
	}
	return o.runWith(ctx, rest.AddUserAgent(restCfg, "edge-load-balancer"), cloud)
}

// runWith is run with the API server's config and the edge provider built.
func (o *standaloneOptions) runWith(ctx context.Context, restCfg *rest.Config, cloud *provider.Cloud) error {
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return fmt.Errorf("load-balancer: API client: %w", err)
	}
	return o.runOn(ctx, client, clientbuilder.SimpleControllerClientBuilder{ClientConfig: restCfg}, cloud)
}

// runOn is runWith on an API client, with builder giving the load
// balancer's own.
func (o *standaloneOptions) runOn(ctx context.Context, client kubernetes.Interface, builder cloudprovider.ControllerClientBuilder, cloud *provider.Cloud) error {
	// Checked before taking the Lease: a bad flag fails at once.
	if _, err := lbclass.New(o.classConfig(cloud, client, informers.NewSharedInformerFactory(client, 0))); err != nil {
		return fmt.Errorf("load-balancer: %w", err)
	}
	// Standbys answer too: healthy while waiting for the Lease.
	_, stopServing, err := o.serveHTTP(ctx)
	if err != nil {
		return err
	}
	defer stopServing()
	serve := func(ctx context.Context) error { return o.serve(ctx, cloud, client, builder) }
	if !o.leaderElect {
		return serve(ctx)
	}
	host, _ := os.Hostname()
	id := host + "_" + string(uuid.NewUUID())
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, o.leaseNamespace, o.leaseName,
		client.CoreV1(), client.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: id})
	if err != nil {
		return fmt.Errorf("load-balancer: lease lock: %w", err)
	}
	return o.lead(ctx, lock, serve)
}

// lead serves while it holds lock and returns when ctx ends (nil) or
// leadership is lost (an error, so that the process exits and is restarted
// as a standby, as the controller managers do). Either way serve has
// returned before lead does: nothing acts on the router once leadership is
// lost.
func (o *standaloneOptions) lead(ctx context.Context, lock resourcelock.Interface, serve func(context.Context) error) error {
	logger := klog.FromContext(ctx)
	id := lock.Identity()
	// The leader elector runs OnStartedLeading on a goroutine it does not
	// wait for, and cancels the context it gave it when leadership ends: the
	// callback only hands that context over, and this goroutine serves, so
	// that lead returns once serving has stopped.
	leading, elected := make(chan context.Context, 1), make(chan struct{})
	go func() {
		defer close(elected)
		leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
			Lock:            lock,
			LeaseDuration:   o.leaseDuration,
			RenewDeadline:   o.renewDeadline,
			RetryPeriod:     o.retryPeriod,
			ReleaseOnCancel: true,
			Name:            o.leaseName,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(ctx context.Context) { leading <- ctx },
				OnStoppedLeading: func() { logger.Info("Stopped leading", "identity", id) },
			},
		})
	}()
	var serveErr error
	select {
	case lctx := <-leading:
		logger.Info("Became leader, serving", "lease", o.leaseNamespace+"/"+o.leaseName, "identity", id)
		serveErr = serve(lctx) // until the leadership ends
	case <-elected: // never leader, or leader for no time at all
	}
	<-elected
	if serveErr != nil {
		return serveErr
	}
	if ctx.Err() == nil {
		// Another replica may be serving now: exit, to be restarted as
		// a standby, as the controller managers do.
		return errors.New("load-balancer: leader election lost")
	}
	return nil
}

// serve runs the edge load balancer's background work and the class
// controller on one informer factory until ctx ends.
func (o *standaloneOptions) serve(ctx context.Context, cloud *provider.Cloud, client kubernetes.Interface, builder cloudprovider.ControllerClientBuilder) error {
	factory := informers.NewSharedInformerFactory(client, 0)
	cloud.SetInformers(factory)
	cloud.Initialize(builder, ctx.Done())
	c, err := lbclass.New(o.classConfig(cloud, client, factory))
	if err != nil {
		return fmt.Errorf("load-balancer: %w", err)
	}
	factory.Start(ctx.Done())
	err = c.Run(ctx)
	factory.Shutdown()
	<-cloud.Done()
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("load-balancer: %w", err)
	}
	return nil
}

func (o *standaloneOptions) classConfig(cloud *provider.Cloud, client kubernetes.Interface, factory informers.SharedInformerFactory) lbclass.Config {
	lb, _ := cloud.LoadBalancer() // the edge provider always has one
	return lbclass.Config{
		Class:        o.class,
		Classless:    o.classless,
		LoadBalancer: lb,
		Client:       client,
		Informers:    factory,
		ClusterName:  o.clusterName,
		Component:    "edge-load-balancer",
		Workers:      o.workers,
		ResyncPeriod: o.resync,
	}
}

// buildEdge builds the edge provider from the cloud-config at path ("" =
// defaults) with opts; NODE_NAME fills loadBalancer.nodeName as in the CCM.
func buildEdge(path string, opts edge.Options) (*provider.Cloud, error) {
	cfg, err := readCloudConfig(path)
	if err != nil {
		return nil, fmt.Errorf("load-balancer: %w", err)
	}
	if cfg.LoadBalancer.NodeName == "" {
		cfg.LoadBalancer.NodeName = os.Getenv(edge.EnvNodeName)
	}
	cloud, err := edge.New(cfg, opts)
	if err != nil {
		return nil, fmt.Errorf("load-balancer: %w", err)
	}
	return cloud, nil
}

// defaultBindAddress is where the standalone mode serves /healthz and
// /metrics: a port of its own beside the controller managers' (10257,
// 10258, 10259), on loopback: /metrics has no authentication, and on the
// host network any address but loopback is the LAN's (and a pod could map
// it to the internet through the router).
const defaultBindAddress = "127.0.0.1:10263"

// serveHTTP serves /healthz (200 while the process runs, leader or not)
// and /metrics (the legacy registry, where igd and loadbalancer register)
// on --bind-address until stop is called, and returns the address it
// listens on (nil with no --bind-address).
func (o *standaloneOptions) serveHTTP(ctx context.Context) (addr net.Addr, stop func(), err error) {
	if o.bindAddress == "" {
		return nil, func() {}, nil
	}
	igd.RegisterMetrics()
	loadbalancer.RegisterMetrics()
	ln, err := net.Listen("tcp", o.bindAddress)
	if err != nil {
		return nil, nil, fmt.Errorf("load-balancer: --bind-address: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	mux.Handle("GET /metrics", legacyregistry.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.FromContext(ctx).Error(err, "Serving /healthz and /metrics stopped", "address", o.bindAddress)
		}
	}()
	return ln.Addr(), func() {
		_ = srv.Close()
		<-done
	}, nil
}
