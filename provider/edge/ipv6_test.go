package edge

import (
	"context"
	"encoding/base64"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/fake/cluster"
	"github.com/ccmkit/ccmkit/internal/hostinfo"
	"github.com/ccmkit/ccmkit/loadbalancer"
)

// nodeGUA is the global IPv6 address of the test node, n1.
var nodeGUA = netip.MustParseAddr("2001:db8:1::10")

// TestIPv6ServesDualStackServices builds the provider from a cloud-config
// naming a fake router and checks a dual-stack Service's status and the
// router's pinholes: with gateway.ipv6 enabled, through UPnP (to this
// node's own address, the request sent from it) and through PCP (from ::1,
// naming the node in THIRD_PARTY), the status has the IPv6 ingress after
// the IPv4 one, as spec.ipFamilies orders them, and the router holds one
// pinhole per port; with it off, the Service is served on IPv4 only, as
// before, and the router holds no pinhole. With no loadBalancer.nodeName,
// UPnP pinholes go to this host's node, the one reporting the IPv4 address
// on the interface that holds this host's global IPv6 address, even when
// the IPv4 router's client gives no address a node reports (the fake
// router on 127.0.0.1) or none at all (no IPv4 router found, as behind a
// carrier's NAT); and the one reporting this host's global IPv6 address
// when it reports no IPv4 address (in secure mode too).
func TestIPv6ServesDualStackServices(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte(base64.StdEncoding.EncodeToString([]byte(randomBytes(32)))), 0o600); err != nil {
		t.Fatal(err)
	}
	node := cluster.Node("n1", cluster.Initialized(), cluster.InternalIP("192.168.1.2"), cluster.InternalIP(nodeGUA.String()))
	svc := cluster.Service("default", "web", cluster.Port("https", v1.ProtocolTCP, 8443, 30443),
		cluster.Annotation(loadbalancer.AnnotationLoadBalancerType, loadbalancer.AnnotationValue))
	policy := v1.IPFamilyPolicyPreferDualStack
	svc.Spec.IPFamilyPolicy = &policy
	svc.Spec.IPFamilies = []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}
	dual := []v1.LoadBalancerIngress{ingress(fake.DefaultExternalIP.String(), 8443), ingress(nodeGUA.String(), 8443)}
	host := []hostinfo.Interface{ // this host's interfaces: n1's
		{Name: "lo", Index: 1, Addrs: addrs("127.0.0.1", "::1")},
		{Name: "eth0", Index: 2, Addrs: addrs("192.168.1.2", "fe80::10", "fd00:1::10", nodeGUA.String())},
		{Name: "cni0", Index: 3, Addrs: addrs("10.42.0.1", "fe80::20")},
	}
	for _, tt := range []struct {
		name  string
		ipv6  string // the gateway.ipv6 section; %URL% is replaced by the router's IPv6 description URL
		pcp   bool   // PCP on 127.0.0.1:5351 and [::1]:5351, and gateway.protocol pcp
		cgnat bool   // the router's WAN address is a carrier's (100.64.0.1)
		// noNodeName leaves loadBalancer.nodeName out (else n1); noIPv4
		// makes gateway.url name a port nothing listens on.
		noNodeName, noIPv4 bool
		// secure sets loadBalancer.secureMode.
		secure bool
		// ipv6Only makes n1 report only its global IPv6 address (kubelet's
		// --node-ip the IPv6 one).
		ipv6Only bool
		want     []v1.LoadBalancerIngress
		// wantPinholes are the router's open pinholes ("TCP [addr]:port").
		wantPinholes []string
	}{
		{name: "off", ipv6: "", want: dual[:1]},
		{name: "upnp", ipv6: "    enabled: true\n    url: %URL%\n", want: dual, wantPinholes: []string{"TCP [2001:db8:1::10]:8443"}},
		{name: "pcp", ipv6: "    enabled: true\n    url: http://[::1]:5000/\n", pcp: true, want: dual, wantPinholes: []string{"TCP [2001:db8:1::10]:8443"}},
		// Behind a carrier's NAT the IPv4 family is not served (its
		// address is not public): the Service is served on IPv6 alone.
		{name: "upnp behind CGNAT", ipv6: "    enabled: true\n    url: %URL%\n", cgnat: true, want: dual[1:], wantPinholes: []string{"TCP [2001:db8:1::10]:8443"}},
		{name: "upnp without nodeName", ipv6: "    enabled: true\n    url: %URL%\n", noNodeName: true, want: dual, wantPinholes: []string{"TCP [2001:db8:1::10]:8443"}},
		{name: "upnp without nodeName or IPv4 router", ipv6: "    enabled: true\n    url: %URL%\n", noNodeName: true, noIPv4: true, want: dual[1:], wantPinholes: []string{"TCP [2001:db8:1::10]:8443"}},
		{name: "upnp without nodeName, the node reporting only its IPv6 address", ipv6: "    enabled: true\n    url: %URL%\n", noNodeName: true, ipv6Only: true, want: dual[1:], wantPinholes: []string{"TCP [2001:db8:1::10]:8443"}},
		{name: "upnp in secure mode without nodeName, the node reporting only its IPv6 address", ipv6: "    enabled: true\n    url: %URL%\n", noNodeName: true, ipv6Only: true, secure: true, want: dual[1:], wantPinholes: []string{"TCP [2001:db8:1::10]:8443"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var wan netip.Addr // the default, public
			if tt.cgnat {
				wan = netip.MustParseAddr("100.64.0.1")
			}
			router := fake.NewRouter(fake.RouterConfig{ExternalIP: wan})
			srv := fake.NewServer(router, fake.ServerOptions{})
			t.Cleanup(srv.Close)
			url4 := srv.RootDescURL
			if tt.noIPv4 {
				url4 = deadURL(t, "127.0.0.1")
			}
			config := "gateway:\n  url: " + url4 + "\n"
			if tt.pcp {
				for _, addr := range []string{"127.0.0.1:5351", "[::1]:5351"} {
					conn, err := net.ListenPacket("udp", addr)
					if err != nil && strings.HasPrefix(addr, "[") {
						t.Skipf("no IPv6 loopback: %v", err)
					} else if err != nil {
						t.Fatalf("the fake router's PCP port: %v", err)
					}
					s, err := fake.NewPCPServer(fake.PCPConfig{Router: router, Conn: conn, AllowThirdParty: true})
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { s.Close() })
				}
				config += "  protocol: pcp\n  pcpSecretFile: " + secret + "\n"
			}
			if tt.ipv6 != "" {
				// The router's UPnP on the IPv6 loopback, seeing every
				// caller as the node's GUA.
				s6, err := fake.NewServer6(router, fake.ServerOptions{ClientAddr: func(*http.Request) netip.Addr { return nodeGUA }})
				if err != nil {
					t.Skip(err)
				}
				t.Cleanup(s6.Close)
				config += "  ipv6:\n" + strings.ReplaceAll(tt.ipv6, "%URL%", s6.RootDescURL)
			}
			config += "loadBalancer:\n"
			if !tt.noNodeName {
				config += "  nodeName: n1\n"
			}
			if tt.secure {
				config += "  secureMode: true\n"
			}
			cfg, err := ParseConfig(strings.NewReader(config))
			if err != nil {
				t.Fatal(err)
			}
			cloud, err := New(cfg, Options{pinholeDial: fake.DialAs(nodeGUA), interfaces: func() ([]hostinfo.Interface, error) { return host, nil }})
			if err != nil {
				t.Fatal(err)
			}
			lb, _ := cloud.LoadBalancer()
			n := node
			if tt.ipv6Only {
				n = cluster.Node("n1", cluster.Initialized(), cluster.InternalIP(nodeGUA.String()))
			}
			st, err := lb.EnsureLoadBalancer(context.Background(), "kubernetes", svc, []*v1.Node{n})
			if err != nil {
				t.Fatalf("EnsureLoadBalancer: %v", err)
			}
			if diff := cmp.Diff(tt.want, st.Ingress); diff != "" {
				t.Errorf("status ingress (-want +got):\n%s", diff)
			}
			var open []string
			for _, p := range router.Pinholes() {
				open = append(open, string(p.Pinhole.Protocol)+" "+netip.AddrPortFrom(p.Pinhole.InternalClient, p.Pinhole.InternalPort).String())
			}
			if diff := cmp.Diff(tt.wantPinholes, open); diff != "" {
				t.Errorf("the router's pinholes (-want +got):\n%s", diff)
			}
		})
	}
}

// ingress is an ingress entry at ip with one TCP port.
func ingress(ip string, port int32) v1.LoadBalancerIngress {
	mode := v1.LoadBalancerIPModeVIP
	return v1.LoadBalancerIngress{IP: ip, IPMode: &mode, Ports: []v1.PortStatus{{Port: port, Protocol: v1.ProtocolTCP}}}
}
