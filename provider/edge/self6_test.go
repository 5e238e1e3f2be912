package edge

import (
	"context"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/fake/cluster"
	"github.com/ccmkit/ccmkit/loadbalancer"
)

// TestUPnPPinholesWithoutNodeNameGoToTheNodeWithThisHostsAddress: with no
// loadBalancer.nodeName, UPnP pinholes (which the router opens only to the
// caller) go to the node that reports this host's global IPv6 address, even
// when the IPv4 router's client gives no address a node reports (here the
// fake router on 127.0.0.1; behind a carrier's NAT, a router whose IPv4
// side is not found): the dual-stack Service gets both ingress entries and
// the router one pinhole.
func TestUPnPPinholesWithoutNodeNameGoToTheNodeWithThisHostsAddress(t *testing.T) {
	node := cluster.Node("n1", cluster.Initialized(), cluster.InternalIP("192.168.1.2"), cluster.InternalIP(nodeGUA.String()))
	svc := cluster.Service("default", "web", cluster.Port("https", v1.ProtocolTCP, 8443, 30443),
		cluster.Annotation(loadbalancer.AnnotationLoadBalancerType, loadbalancer.AnnotationValue))
	policy := v1.IPFamilyPolicyPreferDualStack
	svc.Spec.IPFamilyPolicy = &policy
	svc.Spec.IPFamilies = []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}

	router := fake.NewRouter(fake.RouterConfig{})
	srv := fake.NewServer(router, fake.ServerOptions{})
	t.Cleanup(srv.Close)
	s6, err := fake.NewServer6(router, fake.ServerOptions{ClientAddr: func(*http.Request) netip.Addr { return nodeGUA }})
	if err != nil {
		t.Skip(err)
	}
	t.Cleanup(s6.Close)
	cfg, err := ParseConfig(strings.NewReader("gateway:\n  url: " + srv.RootDescURL + "\n  ipv6:\n    enabled: true\n    url: " + s6.RootDescURL + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	host := []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1"), netip.MustParseAddr("fe80::10"),
		netip.MustParseAddr("fd00:1::10"), nodeGUA}
	cloud, err := New(cfg, Options{pinholeDial: fake.DialAs(nodeGUA), hostAddrs: func(string) ([]netip.Addr, error) { return host, nil }})
	if err != nil {
		t.Fatal(err)
	}
	lb, _ := cloud.LoadBalancer()
	st, err := lb.EnsureLoadBalancer(context.Background(), "kubernetes", svc, []*v1.Node{node})
	if err != nil {
		t.Fatalf("EnsureLoadBalancer: %v", err)
	}
	want := []v1.LoadBalancerIngress{ingress(fake.DefaultExternalIP.String(), 8443), ingress(nodeGUA.String(), 8443)}
	if diff := cmp.Diff(want, st.Ingress); diff != "" {
		t.Errorf("status ingress (-want +got):\n%s", diff)
	}
	var open []string
	for _, p := range router.Pinholes() {
		open = append(open, string(p.Pinhole.Protocol)+" "+netip.AddrPortFrom(p.Pinhole.InternalClient, p.Pinhole.InternalPort).String())
	}
	if diff := cmp.Diff([]string{"TCP [2001:db8:1::10]:8443"}, open); diff != "" {
		t.Errorf("the router's pinholes (-want +got):\n%s", diff)
	}
}
