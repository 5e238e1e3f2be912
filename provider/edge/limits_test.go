package edge

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/fake/cluster"
	"github.com/ccmkit/ccmkit/loadbalancer"
)

// The operator's limits of the cloud-config: a Service of a namespace not
// allowed, an external port not allowed, the ports of a Service past its
// cap and a mapping past the cluster's cap are each refused, with
// ccmkit.io/NotAdmitted in the port's status and an error naming the key.
func TestLimits(t *testing.T) {
	const config = `loadBalancer:
  services: all
  allowedNamespaces: [web]
  allowedExternalPorts: ["443", "8000-8099"]
  maxMappingsPerService: 2
  maxMappings: 3
`
	node := cluster.Node("n1", cluster.Initialized(), cluster.InternalIP("192.168.1.2"))
	svc := func(ns, name string, ports ...int32) *v1.Service {
		var opts []cluster.ServiceOption
		for i, p := range ports {
			opts = append(opts, cluster.Port(string(rune('a'+i)), v1.ProtocolTCP, p, 30000+p%1000))
		}
		return cluster.Service(ns, name, opts...)
	}
	cfg, err := ParseConfig(strings.NewReader(config))
	if err != nil {
		t.Fatal(err)
	}
	router := fake.NewRouter(fake.RouterConfig{})
	cloud, err := New(cfg, Options{Client: router.Client(netip.MustParseAddr("192.168.1.2"))})
	if err != nil {
		t.Fatal(err)
	}
	lb, _ := cloud.LoadBalancer()
	ensure := func(s *v1.Service) (map[string]string, error) {
		st, err := lb.EnsureLoadBalancer(context.Background(), "kubernetes", s, []*v1.Node{node})
		out := map[string]string{}
		if st != nil {
			for _, p := range st.Ingress[0].Ports {
				key := fmt.Sprintf("%s/%d", p.Protocol, p.Port)
				out[key] = ""
				if p.Error != nil {
					out[key] = *p.Error
				}
			}
		}
		return out, err
	}

	for _, tt := range []struct {
		name     string
		svc      *v1.Service
		want     map[string]string // the ports' errors, when served
		contains string            // in the error, when refused as a whole
	}{
		{name: "namespace not allowed", svc: svc("games", "mc", 443), contains: "namespace games is not in loadBalancer.allowedNamespaces"},
		{name: "port not allowed", svc: svc("web", "site", 443, 22), want: map[string]string{"TCP/22": loadbalancer.PortErrorNotAdmitted, "TCP/443": ""}},
		{name: "only port not allowed", svc: svc("web", "ssh", 22), contains: "external port 22 is not in loadBalancer.allowedExternalPorts (443, 8000-8099)"},
		{name: "past the Service's cap", svc: svc("web", "many", 8001, 8002, 8003), want: map[string]string{"TCP/8001": "", "TCP/8002": "", "TCP/8003": loadbalancer.PortErrorNotAdmitted}},
		{name: "past the cluster's cap", svc: svc("web", "late", 8010), contains: "cap on mappings, 3"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ensure(tt.svc)
			if tt.contains != "" {
				if !errors.Is(err, loadbalancer.ErrNotAdmitted) || !strings.Contains(err.Error(), tt.contains) {
					t.Errorf("Ensure = %v, want ErrNotAdmitted saying %q", err, tt.contains)
				}
				return
			}
			if err != nil {
				t.Fatalf("Ensure: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("port errors (-want +got):\n%s", diff)
			}
		})
	}
	if n := len(router.Mappings()); n != 3 {
		t.Errorf("%d mappings, want 3 (the cluster's cap)", n)
	}
}

// Under the real service controller, each refusal reaches the Service's
// events naming the key: a Warning PortNotForwarded for a port refused
// beside others served, SyncLoadBalancerFailed for a Service refused whole.
func TestLimitsRefusalsAreEvents(t *testing.T) {
	cfg, err := ParseConfig(strings.NewReader("loadBalancer:\n  services: all\n  allowedNamespaces: [web]\n  allowedExternalPorts: [\"443\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	router := fake.NewRouter(fake.RouterConfig{})
	cloud, err := New(cfg, Options{Client: router.Client(netip.MustParseAddr("192.168.1.2")), Announcer: quietAnnouncer{}})
	if err != nil {
		t.Fatal(err)
	}
	site := cluster.Service("web", "site", cluster.Port("https", v1.ProtocolTCP, 443, 30443), cluster.Port("ssh", v1.ProtocolTCP, 22, 30022))
	games := cluster.Service("games", "mc", cluster.Port("mc", v1.ProtocolTCP, 443, 30565))
	h, err := cluster.Start(t.Context(), cluster.Config{Cloud: cloud, Objects: []k8sruntime.Object{
		cluster.Node("n1", cluster.Initialized(), cluster.InternalIP("192.168.1.2")), site, games,
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Stop()
	if _, err := h.WaitForIngress(t.Context(), "web", "site"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		svc  *v1.Service
		want string
	}{
		{site, "PortNotForwarded: Port TCP/22 is not forwarded (ccmkit.io/NotAdmitted)"},
		{games, "SyncLoadBalancerFailed: Error syncing load balancer: failed to ensure load balancer: loadbalancer: service games/mc port TCP/443: loadbalancer: port not admitted: namespace games is not in loadBalancer.allowedNamespaces"},
	} {
		// A bound on a failure to converge, not a speed check.
		err := h.Wait(t.Context(), "a Warning on "+tc.svc.Name, func(ctx context.Context) (bool, error) {
			got, err := h.Warnings(ctx, tc.svc.Namespace, tc.svc.UID)
			return slices.ContainsFunc(got, func(w string) bool { return strings.HasPrefix(w, tc.want) }), err
		})
		if err != nil {
			got, _ := h.Warnings(t.Context(), tc.svc.Namespace, tc.svc.UID)
			t.Errorf("%v; warnings %q, want one starting %q", err, got, tc.want)
		}
	}
}

// quietAnnouncer announces no restart.
type quietAnnouncer struct{}

func (quietAnnouncer) ListenAnnounce(ctx context.Context) error { <-ctx.Done(); return nil }
func (quietAnnouncer) Restarts() <-chan struct{}                { return nil }
