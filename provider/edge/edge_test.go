package edge

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/fake/cluster"
	"github.com/ccmkit/ccmkit/loadbalancer"
	"github.com/ccmkit/ccmkit/registry"
)

// TestFactoryBuildsComposedProvider checks what the factory builds: the
// edge provider with a load balancer and InstancesV2 only, HasClusterID.
func TestFactoryBuildsComposedProvider(t *testing.T) {
	cloud, err := Factory(nil)
	if err != nil {
		t.Fatalf("Factory(nil): %v", err)
	}
	if got := cloud.ProviderName(); got != ProviderName {
		t.Errorf("ProviderName() = %q, want %q", got, ProviderName)
	}
	if !cloud.HasClusterID() {
		t.Error("HasClusterID() = false: the CCM would refuse to start without --allow-untagged-cloud")
	}
	if lb, ok := cloud.LoadBalancer(); !ok || lb == nil {
		t.Error("LoadBalancer() not supported")
	}
	if inst, ok := cloud.InstancesV2(); !ok || inst == nil {
		t.Error("InstancesV2() not supported")
	}
	if _, ok := cloud.Instances(); ok {
		t.Error("Instances() supported; only InstancesV2 should be")
	}
	if _, ok := cloud.Zones(); ok {
		t.Error("Zones() supported")
	}
	if _, ok := cloud.Routes(); ok {
		t.Error("Routes() supported: the route controller would run")
	}
	if _, ok := cloud.Clusters(); ok {
		t.Error("Clusters() supported")
	}
}

// TestFactoryDoesNoNetworkIO builds the provider against a router URL that
// counts requests: building it and asking for its parts must not reach the
// router (upstream asks LoadBalancer() once and turns the service
// controller off for good on false).
func TestFactoryDoesNoNetworkIO(t *testing.T) {
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		http.Error(w, "no", http.StatusInternalServerError)
	}))
	t.Cleanup(srv.Close)

	cloud, err := Factory(strings.NewReader("gateway:\n  url: " + srv.URL + "/rootDesc.xml\n"))
	if err != nil {
		t.Fatalf("Factory: %v", err)
	}
	if _, ok := cloud.LoadBalancer(); !ok {
		t.Fatal("LoadBalancer() not supported")
	}
	cloud.InstancesV2()
	if n := requests.Load(); n != 0 {
		t.Fatalf("building the provider sent %d requests to the router, want 0", n)
	}
}

func TestFactoryUnreachableRouterStillServes(t *testing.T) {
	// A URL nothing listens on: the factory must still succeed.
	cloud, err := Factory(strings.NewReader("gateway:\n  url: http://127.0.0.1:1/rootDesc.xml\n"))
	if err != nil {
		t.Fatalf("Factory with an unreachable router: %v", err)
	}
	if _, ok := cloud.LoadBalancer(); !ok {
		t.Fatal("LoadBalancer() not supported with an unreachable router")
	}
}

func TestFactoryErrors(t *testing.T) {
	tests := []struct {
		name   string
		config string
		field  string
	}{
		{name: "unknown key", config: "gatway: {}\n", field: "gatway"},
		{name: "invalid value", config: "loadBalancer:\n  services: some\n", field: "loadBalancer.services"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			noEnv := func(string) string { return "" }
			cloud, err := factory(noEnv)(strings.NewReader(tt.config))
			if err == nil {
				t.Fatalf("factory = %v, want an error", cloud)
			}
			if fields := fieldsOf(err); !errors.Is(err, ErrInvalidConfig) || len(fields) != 1 || fields[0] != tt.field {
				t.Fatalf("error %v: want a *field.Error for %s matching ErrInvalidConfig", err, tt.field)
			}
			if cloud != nil {
				t.Errorf("factory returned %v with its error", cloud)
			}
		})
	}
}

func TestFactoryNodeName(t *testing.T) {
	tests := []struct {
		name   string
		config string
		env    string
		want   string
	}{
		{name: "from NODE_NAME", config: "", env: "node-a", want: "node-a"},
		{name: "config wins over NODE_NAME", config: "loadBalancer:\n  nodeName: node-b\n", env: "node-a", want: "node-b"},
		{name: "neither", config: "", env: "", want: ""},
		{name: "secure mode with NODE_NAME", config: "loadBalancer:\n  secureMode: true\n", env: "node-a", want: "node-a"},
		// The load balancer then finds its node by its address toward the router.
		{name: "secure mode with neither", config: "loadBalancer:\n  secureMode: true\n", env: "", want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := configFrom(strings.NewReader(tt.config), func(k string) string {
				if k == EnvNodeName {
					return tt.env
				}
				return ""
			})
			if err != nil {
				t.Fatalf("configFrom: %v", err)
			}
			if got := cfg.LoadBalancer.NodeName; got != tt.want {
				t.Errorf("node name = %q, want %q", got, tt.want)
			}
			if _, err := New(cfg, Options{}); err != nil {
				t.Errorf("New: %v", err)
			}
		})
	}
}

// TestFactoryInstances checks that the "instances" section reaches the
// InstancesV2 of the built provider.
func TestFactoryInstances(t *testing.T) {
	cloud, err := Factory(strings.NewReader(`
instances:
  zone: home
  nodes:
    pi-1:
      addresses: [{type: InternalIP, address: 192.168.1.10}]
      instanceType: rpi4
`))
	if err != nil {
		t.Fatal(err)
	}
	inst, _ := cloud.InstancesV2()
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "pi-1"}}
	md, err := inst.InstanceMetadata(context.Background(), node)
	if err != nil {
		t.Fatal(err)
	}
	want := cloudprovider.InstanceMetadata{
		ProviderID:    "edge://pi-1",
		InstanceType:  "rpi4",
		Zone:          "home",
		NodeAddresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "192.168.1.10"}},
	}
	if md.ProviderID != want.ProviderID || md.InstanceType != want.InstanceType || md.Zone != want.Zone || !slices.Equal(md.NodeAddresses, want.NodeAddresses) {
		t.Errorf("InstanceMetadata = %+v, want %+v", *md, want)
	}
}

func TestRegisterFactory(t *testing.T) {
	r := registry.New()
	if err := r.Register(ProviderName, Factory); err != nil {
		t.Fatalf("Register: %v", err)
	}
	if got := r.Names(); !slices.Equal(got, []string{ProviderName}) {
		t.Errorf("Names() = %v, want [%s]", got, ProviderName)
	}
	cloud, err := r.Build(ProviderName, strings.NewReader("loadBalancer:\n  lease: 2h\n"))
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	if cloud.ProviderName() != ProviderName {
		t.Errorf("built %q", cloud.ProviderName())
	}
	if err := r.Register(ProviderName, Factory); !errors.Is(err, registry.ErrDuplicate) {
		t.Errorf("second Register = %v, want ErrDuplicate", err)
	}
	if _, err := r.Build(ProviderName, strings.NewReader("lease: 2h\n")); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), `"edge"`) {
		t.Errorf("Build with a bad config = %v, want ErrInvalidConfig wrapped with the provider name", err)
	}
}

// TestInitializeAndStop runs the built provider's life cycle as the
// cloud-controller-manager does: Initialize with a client builder, then close
// the stop channel. Every goroutine it started (the load balancer's
// background work) must return.
func TestInitializeAndStop(t *testing.T) {
	cloud, err := New(Default(), Options{Client: fake.NewRouter(fake.RouterConfig{}).Client(netip.MustParseAddr("192.168.1.2"))})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	cloud.Initialize(cluster.ClientBuilder(k8sfake.NewClientset()), stop)
	if err := cloud.Err(); err != nil {
		t.Fatalf("Initialize: %v", err)
	}
	select {
	case <-cloud.Done():
		t.Fatal("Done closed before stop")
	default:
	}
	close(stop)
	select {
	case <-cloud.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("background work still running 30s after stop closed")
	}
}

// The default cloud-config exposes only Services that opt in; services: all
// exposes every one.
func TestServicesOptIn(t *testing.T) {
	node := cluster.Node("n1", cluster.Initialized(), cluster.InternalIP("192.168.1.2"))
	plain := cluster.Service("default", "web", cluster.Port("http", v1.ProtocolTCP, 8080, 30080))
	annotated := cluster.Service("default", "annotated", cluster.Port("http", v1.ProtocolTCP, 8081, 30080),
		cluster.Annotation(loadbalancer.AnnotationLoadBalancerType, loadbalancer.AnnotationValue))
	for _, tt := range []struct {
		config    string
		plainWant error
	}{
		{config: "", plainWant: cloudprovider.ImplementedElsewhere},
		{config: "loadBalancer:\n  services: all\n", plainWant: nil},
	} {
		t.Run(fmt.Sprintf("%q", tt.config), func(t *testing.T) {
			cfg, err := ParseConfig(strings.NewReader(tt.config))
			if err != nil {
				t.Fatal(err)
			}
			router := fake.NewRouter(fake.RouterConfig{})
			cloud, err := New(cfg, Options{Client: router.Client(netip.MustParseAddr("192.168.1.2"))})
			if err != nil {
				t.Fatal(err)
			}
			lb, _ := cloud.LoadBalancer()
			if _, err := lb.EnsureLoadBalancer(context.Background(), "kubernetes", annotated, []*v1.Node{node}); err != nil {
				t.Fatalf("annotated Service: %v", err)
			}
			router.ResetCalls()
			if _, err := lb.EnsureLoadBalancer(context.Background(), "kubernetes", plain, []*v1.Node{node}); err != tt.plainWant { //nolint:errorlint // upstream compares with ==
				t.Fatalf("un-annotated Service: %v, want %v", err, tt.plainWant)
			}
			if tt.plainWant != nil && len(router.Calls()) != 0 {
				t.Errorf("router calls for the un-annotated Service: %v", router.Calls())
			}
		})
	}
}
