package loadbalancer

import (
	"errors"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/igdtest"
	"github.com/ccmkit/ccmkit/igd/pcp"
)

// TestLabBlindReview checks two findings of the blind-mode review on
// miniupnpd 2.3.1: a changed nodePort is re-pointed at once (the router
// refuses a MAP toward the key's node on another port), and on a router
// that refuses THIRD_PARTY a fresh process deletes a Service (the sweep's
// deletes naming other nodes are refused with UNSUPP_OPTION).
func TestLabBlindReview(t *testing.T) {
	for _, thirdParty := range []bool{true, false} {
		name := "thirdparty"
		if !thirdParty {
			name = "selfonly"
		}
		t.Run(name, func(t *testing.T) {
			lab := igdtest.Start(t, igdtest.Options{Nodes: 3, PCPAllowThirdParty: thirdParty})
			ctx := labContext(t)
			blind := func() *LoadBalancer {
				b, err := pcp.NewBackend(pcp.BackendConfig{PCP: labPCP(t, lab, 0, nil), Secret: pcpSecret})
				if err != nil {
					t.Fatal(err)
				}
				lb, err := New(Config{Client: b})
				if err != nil {
					t.Fatal(err)
				}
				return lb
			}
			all := labNodes(lab)
			peer := labClient(t, lab, 2)
			svc := newService("default", "web", withPorts(port("http", v1.ProtocolTCP, 8080, 30080)))
			first := blind()
			st, err := first.EnsureLoadBalancer(ctx, testCluster, svc, all)
			if err != nil {
				t.Fatal(err)
			}
			svc.Status.LoadBalancer = *st
			svc.Spec.Ports[0].NodePort = 30099
			if _, err := first.EnsureLoadBalancer(ctx, testCluster, svc, all); err != nil {
				t.Errorf("Ensure after the nodePort changed: %v", err)
			}
			if m, err := peer.GetPortMapping(ctx, igd.TCP, 8080); err != nil || m.InternalPort != 30099 || !strings.HasPrefix(m.Description, "PCP MAP ") {
				t.Errorf("mapping = %v, %v; want a PCP mapping to nodePort 30099", m, err)
			}
			fresh := blind()
			fresh.seeNodes(all)
			if err := fresh.EnsureLoadBalancerDeleted(ctx, testCluster, svc); err != nil {
				t.Errorf("EnsureLoadBalancerDeleted from a fresh process: %v", err)
			}
			if _, err := peer.GetPortMapping(ctx, igd.TCP, 8080); !errors.Is(err, igd.ErrNoSuchEntry) {
				t.Errorf("after the delete: %v, want no mapping", err)
			}
		})
	}
}
