package loadbalancer

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"

	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/igdtest"
	"github.com/ccmkit/ccmkit/igd/pcp"
	"github.com/ccmkit/ccmkit/internal/pcplab"
)

// TestLabPCPRefusedPortIsNotAuthorized: through PCP, reading through UPnP
// (mode pcp) or never reading (pcp-only), a port miniupnpd's permission
// rules refuse (the lab allows external ports 1024-65535 only) is reported
// ccmkit.io/NotAuthorized, as through UPnP (TestLabRouterRefusesLowPort),
// while a port a LAN host holds stays ccmkit.io/PortInUse and a free one is
// served.
func TestLabPCPRefusedPortIsNotAuthorized(t *testing.T) {
	for _, mode := range []struct {
		name  string
		reads bool
	}{{"pcp", true}, {"pcp-only", false}} {
		t.Run(mode.name, func(t *testing.T) {
			lab := igdtest.Start(t, igdtest.Options{Nodes: 3, PCPAllowThirdParty: true})
			ctx := labContext(t)
			// A LAN host (node 2) holds TCP/8081.
			if out, err := lab.Upnpc(ctx, 2, "-a", lab.Nodes[2].Addr.String(), "9000", "8081", "TCP"); err != nil {
				t.Fatalf("upnpc -a: %v\n%s", err, out)
			}
			var upnp igd.Client
			if mode.reads {
				upnp = pcplab.UPnPClient(t, lab, 0)
			}
			b, err := pcp.NewBackend(pcp.BackendConfig{UPnP: upnp, PCP: labPCP(t, lab, 0, nil), Secret: pcpSecret})
			if err != nil {
				t.Fatal(err)
			}
			lb, err := New(Config{Client: b})
			if err != nil {
				t.Fatal(err)
			}
			svc := newService("default", "web", withPorts(
				port("low", v1.ProtocolTCP, 80, 30080), port("held", v1.ProtocolTCP, 8081, 30081), port("high", v1.ProtocolTCP, 8080, 30082)))
			st, err := lb.EnsureLoadBalancer(ctx, testCluster, svc, labNodes(lab)[1:2])
			if err != nil {
				t.Fatalf("Ensure = %v, want TCP/8080 served and the refusals in the status", err)
			}
			want := map[string]string{"TCP/80": PortErrorNotAuthorized, "TCP/8081": PortErrorInUse, "TCP/8080": ""}
			if diff := cmp.Diff(want, portErrors(st)); diff != "" {
				t.Errorf("port errors (-want +got):\n%s", diff)
			}
			t.Logf("not forwarded: %v", notForwarded(lb, svc, nil))
		})
	}
}
