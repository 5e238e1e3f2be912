package fake_test

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ccmkit/ccmkit/fake"
)

func service(ns, name string) *v1.Service {
	return &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + ns + "-" + name)}}
}

func nodes(names ...string) []*v1.Node {
	var out []*v1.Node
	for _, n := range names {
		out = append(out, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}})
	}
	return out
}

func TestLoadBalancerLifecycle(t *testing.T) {
	lb := fake.NewLoadBalancer(netip.MustParseAddr("203.0.113.7"))
	web, dns := service("default", "web"), service("kube-system", "dns")
	webKey := types.NamespacedName{Namespace: "default", Name: "web"}

	st, err := lb.EnsureLoadBalancer(t.Context(), "c1", web, nodes("n1", "n2"))
	if err != nil || len(st.Ingress) != 1 || st.Ingress[0].IP != "203.0.113.7" {
		t.Fatalf("EnsureLoadBalancer = %v, %v; want ingress 203.0.113.7", st, err)
	}
	// The returned status is a copy.
	st.Ingress[0].IP = "mutated"
	if got, _ := lb.Status(webKey); got.Ingress[0].IP != "203.0.113.7" {
		t.Error("EnsureLoadBalancer returned memory shared with the fake")
	}
	// One load balancer per Service, not one flag for all.
	if _, exists, err := lb.GetLoadBalancer(t.Context(), "c1", dns); exists || err != nil {
		t.Errorf("GetLoadBalancer(dns) exists=%v err=%v before any Ensure for it", exists, err)
	}
	if _, exists, _ := lb.GetLoadBalancer(t.Context(), "c1", web); !exists {
		t.Error("GetLoadBalancer(web) does not exist after Ensure")
	}
	if err := lb.UpdateLoadBalancer(t.Context(), "c1", web, nodes("n3")); err != nil {
		t.Fatal(err)
	}
	if got := lb.GetLoadBalancerName(t.Context(), "c1", web); got != "auiddefaultweb" {
		t.Errorf("GetLoadBalancerName = %q, want cloudprovider's default %q", got, "auiddefaultweb")
	}
	if err := lb.EnsureLoadBalancerDeleted(t.Context(), "c1", web); err != nil {
		t.Fatal(err)
	}
	if _, exists := lb.Status(webKey); exists {
		t.Error("load balancer still exists after EnsureLoadBalancerDeleted")
	}
	// Deleting again succeeds.
	if err := lb.EnsureLoadBalancerDeleted(t.Context(), "c1", web); err != nil {
		t.Errorf("second EnsureLoadBalancerDeleted: %v", err)
	}

	calls := lb.Calls()
	var got []string
	for _, c := range calls {
		got = append(got, c.Method)
		if c.Service.Name == "web" && c.Service != webKey {
			t.Errorf("call %s recorded service %v", c.Method, c.Service)
		}
	}
	want := []string{"EnsureLoadBalancer", "GetLoadBalancer", "GetLoadBalancer", "UpdateLoadBalancer", "GetLoadBalancerName", "EnsureLoadBalancerDeleted", "EnsureLoadBalancerDeleted"}
	if !slices.Equal(got, want) {
		t.Errorf("methods %v, want %v", got, want)
	}
	if !slices.Equal(calls[0].Nodes, []string{"n1", "n2"}) || !slices.Equal(calls[3].Nodes, []string{"n3"}) || calls[1].Nodes != nil {
		t.Errorf("recorded nodes %v / %v / %v, want [n1 n2] / [n3] / nil", calls[0].Nodes, calls[3].Nodes, calls[1].Nodes)
	}
	if calls[0].ClusterName != "c1" {
		t.Errorf("cluster name %q", calls[0].ClusterName)
	}
	calls[0].Nodes[0] = "mutated"
	if lb.Calls()[0].Nodes[0] != "n1" {
		t.Error("Calls returned memory shared with the fake")
	}
	if lb.CallCount(fake.MethodEnsureLoadBalancerDeleted) != 2 {
		t.Errorf("CallCount(EnsureLoadBalancerDeleted) = %d, want 2", lb.CallCount(fake.MethodEnsureLoadBalancerDeleted))
	}
}

// TestLoadBalancerSetIngressIP checks that the ingress IP follows
// SetExternalIP and that the zero Addr means DefaultExternalIP, as it does in
// NewLoadBalancer, never the string "invalid IP".
func TestLoadBalancerSetIngressIP(t *testing.T) {
	lb := fake.NewLoadBalancer(netip.Addr{})
	web := service("default", "web")
	for _, tc := range []struct{ set, want string }{
		{"", fake.DefaultExternalIP.String()},
		{"100.64.1.2", "100.64.1.2"},
		{"", fake.DefaultExternalIP.String()},
	} {
		if tc.set != "" {
			lb.SetExternalIP(netip.MustParseAddr(tc.set))
		} else {
			lb.SetExternalIP(netip.Addr{})
		}
		st, err := lb.EnsureLoadBalancer(t.Context(), "c1", web, nil)
		if err != nil || len(st.Ingress) != 1 || st.Ingress[0].IP != tc.want {
			t.Errorf("after SetExternalIP(%q): EnsureLoadBalancer = %v, %v; want ingress %s", tc.set, st, err, tc.want)
		}
	}
}

func TestLoadBalancerHooks(t *testing.T) {
	lb := fake.NewLoadBalancer(netip.Addr{})
	web := service("default", "web")
	first, second, always := errors.New("first"), errors.New("second"), errors.New("always")
	// Older hooks run after newer ones: "always" is reached only once the
	// two one-off failures have been used.
	lb.Intercept(fake.LoadBalancerHooks{EnsureLoadBalancer: func(context.Context, string, *v1.Service, []*v1.Node, fake.EnsureLoadBalancerFunc) (*v1.LoadBalancerStatus, error) {
		return nil, always
	}})
	for _, err := range []error{second, first} {
		once := fake.Nth(1)
		lb.Intercept(fake.LoadBalancerHooks{EnsureLoadBalancer: func(ctx context.Context, cluster string, svc *v1.Service, nodes []*v1.Node, next fake.EnsureLoadBalancerFunc) (*v1.LoadBalancerStatus, error) {
			if once() {
				return nil, err
			}
			return next(ctx, cluster, svc, nodes)
		}})
	}
	for _, want := range []error{first, second, always, always} {
		if _, err := lb.EnsureLoadBalancer(t.Context(), "c", web, nil); !errors.Is(err, want) {
			t.Errorf("EnsureLoadBalancer error %v, want %v", err, want)
		}
	}
	if len(lb.Services()) != 0 {
		t.Errorf("a failed Ensure created a load balancer: %v", lb.Services())
	}
	lb.ClearHooks()
	st, err := lb.EnsureLoadBalancer(t.Context(), "c", web, nil)
	if err != nil || st.Ingress[0].IP != fake.DefaultExternalIP.String() {
		t.Errorf("after ClearHooks: %v, %v; want ingress %s", st, err, fake.DefaultExternalIP)
	}
	// Hooks are per method.
	lb.Intercept(fake.LoadBalancerHooks{EnsureLoadBalancerDeleted: func(context.Context, string, *v1.Service, fake.EnsureLoadBalancerDeletedFunc) error {
		return always
	}})
	if err := lb.EnsureLoadBalancerDeleted(t.Context(), "c", web); !errors.Is(err, always) {
		t.Errorf("EnsureLoadBalancerDeleted = %v, want injected", err)
	}
	if len(lb.Services()) != 1 {
		t.Error("a failed delete removed the load balancer")
	}
	if _, _, err := lb.GetLoadBalancer(t.Context(), "c", web); err != nil {
		t.Errorf("GetLoadBalancer got another method's error: %v", err)
	}
	if n := len(lb.Calls()); n != 7 {
		t.Errorf("log holds %d calls, want 7 (failed calls are logged)", n)
	}
	if c := lb.Calls()[0]; !errors.Is(c.Err, first) {
		t.Errorf("first call logged error %v, want %v", c.Err, first)
	}
	lb.ResetCalls()
	if n := len(lb.Calls()); n != 0 {
		t.Errorf("log holds %d calls after ResetCalls, want 0", n)
	}
	if _, _, err := lb.GetLoadBalancer(t.Context(), "c", web); err != nil || len(lb.Calls()) != 1 {
		t.Errorf("after ResetCalls GetLoadBalancer = %v and the log holds %d calls, want 1", err, len(lb.Calls()))
	}
}

func TestLoadBalancerHookMayChangeTheAnswer(t *testing.T) {
	lb := fake.NewLoadBalancer(netip.Addr{})
	web := service("default", "web")
	lb.Intercept(fake.LoadBalancerHooks{EnsureLoadBalancer: func(ctx context.Context, cluster string, svc *v1.Service, nodes []*v1.Node, next fake.EnsureLoadBalancerFunc) (*v1.LoadBalancerStatus, error) {
		st, err := next(ctx, cluster, svc, nodes)
		if err != nil {
			return nil, err
		}
		st.Ingress[0].Hostname = "lb.example"
		return st, nil
	}})
	st, err := lb.EnsureLoadBalancer(t.Context(), "c", web, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := &v1.LoadBalancerStatus{Ingress: []v1.LoadBalancerIngress{{IP: fake.DefaultExternalIP.String(), Hostname: "lb.example"}}}
	if diff := cmp.Diff(want, st); diff != "" {
		t.Errorf("EnsureLoadBalancer through a hook that edits the answer (-want +got):\n%s", diff)
	}
	// The hook changed the answer, not what the fake keeps.
	kept, _ := lb.Status(types.NamespacedName{Namespace: "default", Name: "web"})
	if got := kept.Ingress[0].Hostname; got != "" {
		t.Errorf("stored status: hostname %q, want none", got)
	}
}

func TestLoadBalancerConcurrent(t *testing.T) {
	lb := fake.NewLoadBalancer(netip.Addr{})
	var wg sync.WaitGroup
	for i := range 8 {
		svc := service("ns", string(rune('a'+i)))
		wg.Go(func() {
			for range 20 {
				_, _ = lb.EnsureLoadBalancer(t.Context(), "c", svc, nodes("n1"))
				_, _, _ = lb.GetLoadBalancer(t.Context(), "c", svc)
				_ = lb.Calls()
				_ = lb.Services()
			}
			_ = lb.EnsureLoadBalancerDeleted(t.Context(), "c", svc)
		})
	}
	wg.Wait()
	if n := len(lb.Services()); n != 0 {
		t.Errorf("%d load balancers left after every Service was deleted", n)
	}
	if n := lb.CallCount(fake.MethodEnsureLoadBalancer); n != 160 {
		t.Errorf("CallCount(Ensure) = %d, want 160", n)
	}
}
