package cluster_test

import (
	"context"
	"net/netip"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	servicehelper "k8s.io/cloud-provider/service/helpers"
	"k8s.io/utils/ptr"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/fake/cluster"
	"github.com/ccmkit/ccmkit/loadbalancer"
)

const (
	routerClass = "ccmkit.io/upnp-igd"
	otherClass  = "example.com/other"
)

// classCluster is a fake cluster where ccmkit's load balancer serves
// routerClass over a fake router and a fake load balancer serves
// otherClass; upstream's service controller serves classless Services
// with another fake unless classless is set, in which case the cloud has no
// load balancer and the router class serves them.
type classCluster struct {
	h        *cluster.Harness
	router   *fake.Router
	upstream *fake.LoadBalancer // nil when classless
	other    *fake.LoadBalancer
}

func startClassCluster(t *testing.T, classless bool, objs ...k8sruntime.Object) classCluster {
	t.Helper()
	router := fake.NewRouter(fake.RouterConfig{})
	lb, err := loadbalancer.New(loadbalancer.Config{
		Client:    router.Client(netip.MustParseAddr("192.168.1.2")),
		Services:  loadbalancer.AllServices,
		Class:     routerClass,
		Classless: classless,
	})
	if err != nil {
		t.Fatal(err)
	}
	cc := classCluster{router: router, other: fake.NewLoadBalancer(netip.MustParseAddr("198.51.100.1"))}
	cloud := newCloud(t, nil)
	if !classless {
		cc.upstream = fake.NewLoadBalancer(netip.MustParseAddr("198.51.100.2"))
		cloud = newCloud(t, cc.upstream)
	}
	cc.h = start(t, cluster.Config{
		Cloud: cloud,
		Classes: []cluster.Class{
			{Name: routerClass, LoadBalancer: lb, Classless: classless},
			{Name: otherClass, LoadBalancer: cc.other},
		},
		Objects: append([]k8sruntime.Object{cluster.Node("n1", cluster.InternalIP("192.168.1.10"))}, objs...),
	})
	return cc
}

func withClass(c string) cluster.ServiceOption {
	return func(s *v1.Service) { s.Spec.LoadBalancerClass = ptr.To(c) }
}

// mappedPorts returns the router's external ports, sorted.
func (cc classCluster) mappedPorts() []uint16 {
	var out []uint16
	for _, m := range cc.router.Mappings() {
		out = append(out, m.ExternalPort)
	}
	slices.Sort(out)
	return out
}

func (cc classCluster) waitIngress(t *testing.T, name, ip string) *v1.Service {
	t.Helper()
	s, err := cc.h.WaitForService(t.Context(), "default", name, "ingress "+ip, func(s *v1.Service) bool {
		return len(s.Status.LoadBalancer.Ingress) == 1 && s.Status.LoadBalancer.Ingress[0].IP == ip
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestClassBesideUpstream: a classed Service is served by its class
// controller only, a classless one by upstream only, and a Service moved
// through ClusterIP to another class or to none is cleaned up and handed
// over with nothing left on the router.
func TestClassBesideUpstream(t *testing.T) {
	cc := startClassCluster(t, false,
		cluster.Service("default", "classed", cluster.Port("http", v1.ProtocolTCP, 45080, 30080), withClass(routerClass)),
		cluster.Service("default", "plain", cluster.Port("http", v1.ProtocolTCP, 45081, 30081)),
		cluster.Service("default", "moved", cluster.Port("http", v1.ProtocolTCP, 45082, 30082), withClass(routerClass)),
	)
	ctx := t.Context()
	router := fake.DefaultExternalIP.String()
	for _, name := range []string{"classed", "moved"} {
		s := cc.waitIngress(t, name, router)
		if servicehelper.HasLBFinalizer(s) || !slices.Contains(s.Finalizers, routerClass) {
			t.Errorf("Service %s finalizers %v, want %s only", name, s.Finalizers, routerClass)
		}
	}
	cc.waitIngress(t, "plain", "198.51.100.2")
	if got, want := cc.mappedPorts(), []uint16{45080, 45082}; !slices.Equal(got, want) {
		t.Errorf("router ports %v, want %v", got, want)
	}
	touched := func(lb *fake.LoadBalancer, name string) bool {
		return slices.ContainsFunc(lb.Calls(), func(c fake.LoadBalancerCall) bool { return c.Service.Name == name })
	}
	if touched(cc.upstream, "classed") || touched(cc.upstream, "moved") || touched(cc.other, "classed") || touched(cc.other, "plain") {
		t.Errorf("a load balancer was called for a Service of another class: upstream %v, other %v", cc.upstream.Calls(), cc.other.Calls())
	}

	// Hand-over: ClusterIP (the API server clears the class), then
	// LoadBalancer under the other class.
	services := cc.h.Client.CoreV1().Services("default")
	s, err := services.Get(ctx, "moved", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Spec.Type, s.Spec.LoadBalancerClass = v1.ServiceTypeClusterIP, nil
	if _, err = services.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	s, err = cc.h.WaitForService(ctx, "default", "moved", "no finalizers and no status", func(s *v1.Service) bool {
		return len(s.Finalizers) == 0 && len(s.Status.LoadBalancer.Ingress) == 0
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := cc.mappedPorts(), []uint16{45080}; !slices.Equal(got, want) {
		t.Errorf("router ports after ClusterIP %v, want %v", got, want)
	}
	s.Spec.Type, s.Spec.LoadBalancerClass = v1.ServiceTypeLoadBalancer, ptr.To(otherClass)
	if _, err = services.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	s = cc.waitIngress(t, "moved", "198.51.100.1")
	if !slices.Equal(s.Finalizers, []string{otherClass}) {
		t.Errorf("moved Service's finalizers %v, want the other class's only", s.Finalizers)
	}
	if touched(cc.upstream, "moved") {
		t.Errorf("upstream was called for the moved Service: %v", cc.upstream.Calls())
	}

	for _, name := range []string{"classed", "plain", "moved"} {
		if err := cc.h.DeleteService(ctx, "default", name); err != nil {
			t.Fatal(err)
		}
	}
	if got := cc.mappedPorts(); len(got) != 0 {
		t.Errorf("router ports after the deletes: %v", got)
	}
	if got := cc.other.Services(); len(got) != 0 {
		t.Errorf("other class's load balancers after the deletes: %v", got)
	}
	if got := cc.upstream.Services(); len(got) != 0 {
		t.Errorf("upstream's load balancers after the deletes: %v", got)
	}
	if _, ok := cc.upstream.Status(types.NamespacedName{Namespace: "default", Name: "plain"}); ok {
		t.Error("upstream still holds plain's load balancer")
	}
}

// TestClassServesClassless: with no cloud load balancer, the router class
// serves classless Services too, and the delete leaves nothing.
func TestClassServesClassless(t *testing.T) {
	cc := startClassCluster(t, true,
		cluster.Service("default", "plain", cluster.Port("http", v1.ProtocolTCP, 45081, 30081)),
		cluster.Service("default", "other", cluster.Port("http", v1.ProtocolTCP, 45083, 30083), withClass(otherClass)),
	)
	s := cc.waitIngress(t, "plain", fake.DefaultExternalIP.String())
	if !slices.Equal(s.Finalizers, []string{routerClass}) {
		t.Errorf("finalizers %v, want %s only", s.Finalizers, routerClass)
	}
	cc.waitIngress(t, "other", "198.51.100.1")
	if got, want := cc.mappedPorts(), []uint16{45081}; !slices.Equal(got, want) {
		t.Errorf("router ports %v, want %v", got, want)
	}
	for _, name := range []string{"plain", "other"} {
		if err := cc.h.DeleteService(context.WithoutCancel(t.Context()), "default", name); err != nil {
			t.Fatal(err)
		}
	}
	if got := cc.mappedPorts(); len(got) != 0 {
		t.Errorf("router ports after the delete: %v", got)
	}
}

// TestUpstreamCleansClassedServicesWithItsFinalizer shows why lbclass has a
// finalizer of its own: upstream's service controller takes
// service.kubernetes.io/load-balancer-cleanup off a deleted Service whatever
// its class, so a class controller relying on it could find its Service
// gone before it cleaned up.
func TestUpstreamCleansClassedServicesWithItsFinalizer(t *testing.T) {
	up := fake.NewLoadBalancer(netip.Addr{})
	s := cluster.Service("default", "classed", cluster.Port("http", v1.ProtocolTCP, 45080, 30080), withClass(otherClass))
	s.Finalizers = []string{servicehelper.LoadBalancerCleanupFinalizer}
	h := start(t, cluster.Config{Cloud: newCloud(t, up), Objects: []k8sruntime.Object{cluster.Node("n1"), s}})
	if err := h.DeleteService(t.Context(), "default", "classed"); err != nil {
		t.Fatalf("upstream did not remove its finalizer from a deleted classed Service: %v", err)
	}
	if up.CallCount(fake.MethodGetLoadBalancer) == 0 {
		t.Error("upstream removed the finalizer without asking its cloud")
	}
}
