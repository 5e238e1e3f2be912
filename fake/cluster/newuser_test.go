package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/fake/cluster"
	"github.com/ccmkit/ccmkit/provider"
)

// inventory is an InstancesV2 that knows no node: every call fails, and the
// first failure closes failed.
type inventory struct {
	once   sync.Once
	failed chan struct{}
}

var errNotInInventory = errors.New("not in inventory")

func (i *inventory) fail(node *v1.Node) error {
	i.once.Do(func() { close(i.failed) })
	return fmt.Errorf("node %s: %w", node.Name, errNotInInventory)
}

func (i *inventory) InstanceExists(_ context.Context, n *v1.Node) (bool, error) {
	return false, i.fail(n)
}
func (i *inventory) InstanceShutdown(_ context.Context, n *v1.Node) (bool, error) {
	return false, i.fail(n)
}
func (i *inventory) InstanceMetadata(_ context.Context, n *v1.Node) (*cloudprovider.InstanceMetadata, error) {
	return nil, i.fail(n)
}

// A node the cloud cannot initialize: the wait's error says why, with the
// cloud's own error (upstream records no event for it).
func TestNodeInitTimeoutSaysCloudError(t *testing.T) {
	inv := &inventory{failed: make(chan struct{})}
	cloud, err := provider.New("kit", provider.Config{InstancesV2: inv, ClusterID: true})
	if err != nil {
		t.Fatal(err)
	}
	h := start(t, cluster.Config{Cloud: cloud})
	if _, err := h.Client.CoreV1().Nodes().Create(t.Context(), cluster.Node("n1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-inv.failed:
	case <-t.Context().Done():
		t.Fatal("the cloud was never asked about node n1")
	}
	// The node can never be initialized: the wait fails whatever its bound.
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	_, err = h.WaitForNodeInitialized(ctx, "n1")
	if err == nil {
		t.Fatal("WaitForNodeInitialized succeeded for a node the cloud does not know")
	}
	for _, want := range []string{"node n1 to be initialized", "last seen", errNotInInventory.Error()} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

// As the cloud-controller-manager, Start refuses a cloud without a cluster
// ID unless told to allow it.
func TestUntaggedCloud(t *testing.T) {
	cloud, err := provider.New("kit", provider.Config{LoadBalancer: fake.NewLoadBalancer(fake.DefaultExternalIP)})
	if err != nil {
		t.Fatal(err)
	}
	h, err := cluster.Start(t.Context(), cluster.Config{Cloud: cloud})
	if err == nil {
		h.Stop()
		t.Fatal("Start ran a cloud without a cluster ID")
	}
	for _, want := range []string{`"kit" has no cluster ID`, "--allow-untagged-cloud", "Config.AllowUntaggedCloud"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	start(t, cluster.Config{Cloud: cloud, AllowUntaggedCloud: true})
}

// Harnesses in one process run in parallel: none reads another's state.
func TestParallelHarnesses(t *testing.T) {
	for i := range 4 {
		t.Run(fmt.Sprint("harness-", i), func(t *testing.T) {
			t.Parallel()
			lb := fake.NewLoadBalancer(fake.DefaultExternalIP)
			h := start(t, cluster.Config{
				Cloud: newCloud(t, lb),
				Objects: []k8sruntime.Object{
					cluster.Node("n1", cluster.InternalIP("192.168.1.10")),
					cluster.Service("default", "web", cluster.Port("http", v1.ProtocolTCP, 80, 30080)),
				},
			})
			ctx := t.Context()
			if _, err := h.WaitForIngress(ctx, "default", "web"); err != nil {
				t.Fatal(err)
			}
			if _, err := h.AddNode(ctx, cluster.Node("n2", cluster.InternalIP("192.168.1.11"))); err != nil {
				t.Fatal(err)
			}
			if err := h.DeleteService(ctx, "default", "web"); err != nil {
				t.Fatal(err)
			}
			if s := lb.Services(); len(s) != 0 {
				t.Errorf("load balancers left after DeleteService: %v", s)
			}
		})
	}
}

// Config.Logger gets what the controllers log through their context, such
// as the events they record.
func TestLoggerGetsControllerLogs(t *testing.T) {
	var mu sync.Mutex
	var lines []string
	logger := funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, prefix+" "+args)
	}, funcr.Options{Verbosity: 4})
	h := start(t, cluster.Config{
		Cloud:  newCloud(t, fake.NewLoadBalancer(fake.DefaultExternalIP)),
		Logger: logger,
		Objects: []k8sruntime.Object{
			cluster.Node("n1", cluster.InternalIP("192.168.1.10")),
			cluster.Service("default", "web", cluster.Port("http", v1.ProtocolTCP, 80, 30080)),
		},
	})
	if _, err := h.WaitForIngress(t.Context(), "default", "web"); err != nil {
		t.Fatal(err)
	}
	if err := h.Wait(t.Context(), "the logger to get the EnsuredLoadBalancer event", func(context.Context) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return strings.Contains(strings.Join(lines, "\n"), "EnsuredLoadBalancer"), nil
	}); err != nil {
		mu.Lock()
		defer mu.Unlock()
		t.Errorf("%v; logged:\n%s", err, strings.Join(lines, "\n"))
	}
}
