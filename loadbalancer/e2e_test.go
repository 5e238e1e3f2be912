package loadbalancer

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	servicehelper "k8s.io/cloud-provider/service/helpers"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/fake/cluster"
	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/igdtest"
	"github.com/ccmkit/ccmkit/internal/pcplab"
	"github.com/ccmkit/ccmkit/provider"
)

// scenario is the router side of an end-to-end run.
type scenario struct {
	client   igd.Client
	table    func(t *testing.T) []igd.Mapping
	external netip.Addr
	nodes    []*v1.Node
}

// runServiceController runs the real upstream service controller against
// our LoadBalancer (see startServiceController) through a Service's life:
// create, change ports, change nodes, delete.
func runServiceController(t *testing.T, sc scenario) {
	h := startServiceController(t, sc.client, sc.nodes)
	ctx := t.Context()
	services := h.Client.CoreV1().Services("default")
	get := func() *v1.Service {
		t.Helper()
		s, err := services.Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	// ours returns the table's mappings of default/web, by key.
	ours := func() map[igd.Key]igd.Mapping {
		out := map[igd.Key]igd.Mapping{}
		for _, m := range sc.table(t) {
			if p, ok := parseDescription(m.Description); ok && p.token == newOwner(testCluster, "default", "web").token {
				out[m.Key()] = m
			}
		}
		return out
	}
	keysOf := func(m map[igd.Key]igd.Mapping) []string {
		var ks []string
		for k, v := range m {
			ks = append(ks, fmt.Sprintf("%s->%d", k, v.InternalPort))
		}
		slices.Sort(ks)
		return ks
	}
	statusPorts := func(s *v1.Service) []string {
		var ps []string
		for _, ing := range s.Status.LoadBalancer.Ingress {
			if ing.IP != sc.external.String() {
				return nil
			}
			for _, p := range ing.Ports {
				ps = append(ps, fmt.Sprintf("%s/%d", p.Protocol, p.Port))
			}
		}
		slices.Sort(ps)
		return ps
	}

	// Create, as a client does: without a UID (the cluster gives one).
	svc := newService("default", "web", withPorts(port("http", v1.ProtocolTCP, 45080, 30080), port("dns", v1.ProtocolUDP, 45053, 30053)))
	svc.UID = ""
	if _, err := services.Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "mappings, status and finalizer after create", func() bool {
		s := get()
		return slices.Equal(keysOf(ours()), []string{"TCP/45080->30080", "UDP/45053->30053"}) &&
			slices.Equal(statusPorts(s), []string{"TCP/45080", "UDP/45053"}) &&
			servicehelper.HasLBFinalizer(s)
	})

	// Change ports.
	s := get()
	s.Spec.Ports = []v1.ServicePort{port("http", v1.ProtocolTCP, 45080, 30081), port("admin", v1.ProtocolTCP, 45090, 30090)}
	if _, err := services.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "mappings and status after the port change", func() bool {
		return slices.Equal(keysOf(ours()), []string{"TCP/45080->30081", "TCP/45090->30090"}) &&
			slices.Equal(statusPorts(get()), []string{"TCP/45080", "TCP/45090"})
	})

	// Change nodes: the node the Service is on is excluded from load
	// balancers (the controller calls UpdateLoadBalancer). The node sync
	// meets no Service sync (upstream v0.37 races there, see
	// cluster.Start): each Service sync ends in the status or finalizer
	// patch waited for above.
	var on netip.Addr
	for _, m := range ours() {
		on = m.InternalClient
	}
	var onNode *v1.Node
	for _, n := range sc.nodes {
		if n.Status.Addresses[1].Address == on.String() {
			onNode = n.DeepCopy()
		}
	}
	if onNode == nil {
		t.Fatalf("mappings point at %s, not a node", on)
	}
	onNode.Labels = map[string]string{v1.LabelNodeExcludeBalancers: "true"}
	if _, err := h.Client.CoreV1().Nodes().Update(ctx, onNode, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "mappings to leave the excluded node", func() bool {
		m := ours()
		if len(m) != 2 {
			return false
		}
		for _, v := range m {
			if v.InternalClient == on {
				return false
			}
		}
		return true
	})

	// Delete: the API server sets the deletion timestamp and waits for the
	// finalizer, which the controller removes once the mappings are gone.
	if err := h.DeleteService(ctx, "default", "web"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "mappings gone after delete", func() bool { return len(ours()) == 0 })
}

// startServiceController starts a fake cluster (fake/cluster) holding
// nodes, with the real upstream service controller running against a
// LoadBalancer over c inside provider.Cloud (background work included), and
// returns it once the controller has synced those nodes. Cleanup stops the
// controller, then the cloud, and waits for both.
func startServiceController(t *testing.T, c igd.Client, nodes []*v1.Node) *cluster.Harness {
	t.Helper()
	// The LoadBalancer's clock stands still: the background work runs on
	// events only (its tickers never fire; no step here waits for them).
	lb, err := New(Config{Client: c, Clock: clocktesting.NewFakeClock(time.Now())})
	if err != nil {
		t.Fatal(err)
	}
	cloud, err := provider.New("edge", provider.Config{LoadBalancer: lb, ClusterID: true})
	if err != nil {
		t.Fatal(err)
	}
	var objs []k8sruntime.Object
	for _, n := range nodes {
		objs = append(objs, n)
	}
	h, err := cluster.Start(t.Context(), cluster.Config{Cloud: cloud, ClusterName: testCluster, Objects: objs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Stop)
	return h
}

func TestServiceControllerEndToEndFakeRouter(t *testing.T) {
	r := fake.NewRouter(fake.RouterConfig{})
	runServiceController(t, scenario{
		client:   r.Client(addrA),
		table:    func(*testing.T) []igd.Mapping { return r.Mappings() },
		external: fake.DefaultExternalIP,
		nodes:    threeNodes(),
	})
}

func TestServiceControllerEndToEndMiniupnpd(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{Nodes: 2})
	client := pcplab.UPnPClient(t, lab, 0)
	runServiceController(t, scenario{
		client: client,
		table: func(t *testing.T) []igd.Mapping {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			ms, err := igd.ReadTable(ctx, client)
			if err != nil {
				t.Fatal(err)
			}
			return ms
		},
		external: lab.ExternalIP,
		nodes:    labNodes(lab),
	})
}

// TestDeleteWhileExternalIPUnusable: a router behind carrier-grade NAT
// reports a non-public external IP, so the Service is never given an
// ingress, but its mappings are written (ready for when the address is
// usable) and the service controller has put its finalizer on it. Deleting
// the Service must remove both: upstream's controller asks GetLoadBalancer
// before it cleans up, and an error there keeps the finalizer and the
// mappings forever.
func TestDeleteWhileExternalIPUnusable(t *testing.T) {
	r := fake.NewRouter(fake.RouterConfig{ExternalIP: netip.MustParseAddr("100.64.0.7")})
	h := startServiceController(t, r.Client(addrA), threeNodes())
	ctx := t.Context()
	svc := newService("default", "web", withPorts(port("http", v1.ProtocolTCP, 45080, 30080)))
	svc.UID = ""
	if _, err := h.Client.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.WaitForService(ctx, "default", "web", "the finalizer", servicehelper.HasLBFinalizer); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the Service's mapping on the router", func() bool { return len(r.Mappings()) == 1 })
	if err := h.DeleteService(ctx, "default", "web"); err != nil {
		t.Fatal(err)
	}
	if ms := r.Mappings(); len(ms) != 0 {
		t.Errorf("mappings left after the Service was deleted: %v", ms)
	}
}
