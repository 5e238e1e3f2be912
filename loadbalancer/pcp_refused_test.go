package loadbalancer

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
)

// labRules are the lab's miniupnpd permission lines: external ports
// 1024-65535 to LAN hosts' ports 1024-65535, nothing else.
var labRules = []fake.Permission{
	{Allow: true, External: igd.PortRange{First: 1024, Last: 65535}, Client: netip.MustParsePrefix("192.0.2.0/24"), Internal: igd.PortRange{First: 1024, Last: 65535}},
	{External: igd.AllPorts, Client: netip.MustParsePrefix("0.0.0.0/0"), Internal: igd.AllPorts},
}

// Through PCP, reading through UPnP (mode pcp) or never reading (pcp-only),
// a port the router's permission rules refuse is ccmkit.io/NotAuthorized,
// as through UPnP, and a port a LAN host holds ccmkit.io/PortInUse (the
// fakes' counterpart of TestLabPCPRefusedPortIsNotAuthorized).
func TestPCPRefusedPortIsNotAuthorized(t *testing.T) {
	for _, mode := range []struct {
		name   string
		client func(t *testing.T) func(*env, *fake.PCPServer) igd.Client
	}{
		{"pcp", func(t *testing.T) func(*env, *fake.PCPServer) igd.Client {
			return func(e *env, s *fake.PCPServer) igd.Client { return pcpBackend(t, e.router, s, pcpSecret) }
		}},
		{"pcp-only", func(t *testing.T) func(*env, *fake.PCPServer) igd.Client {
			return func(_ *env, s *fake.PCPServer) igd.Client { return blindBackend(t, s) }
		}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			e, _ := envWithPCP(t, Config{}, fake.RouterConfig{Permissions: labRules}, fake.PCPConfig{AllowThirdParty: true}, mode.client(t))
			lan := netip.MustParseAddr("192.0.2.99")
			if _, err := e.router.Client(lan).AddPortMapping(context.Background(), igd.Mapping{Protocol: igd.TCP, ExternalPort: 8081, InternalClient: lan, InternalPort: 9000, Description: "theirs", Lease: time.Hour, Enabled: true}); err != nil {
				t.Fatal(err)
			}
			svc := newService("default", "web", withPorts(
				port("low", v1.ProtocolTCP, 80, 30080), port("held", v1.ProtocolTCP, 8081, 30081), port("high", v1.ProtocolTCP, 8080, 30082)))
			st, err := e.ensure(t, svc, threeNodes()[1:2])
			if err != nil {
				t.Fatalf("Ensure = %v, want TCP/8080 served and the refusals in the status", err)
			}
			want := map[string]string{"TCP/80": PortErrorNotAuthorized, "TCP/8081": PortErrorInUse, "TCP/8080": ""}
			if diff := cmp.Diff(want, portErrors(st)); diff != "" {
				t.Errorf("port errors (-want +got):\n%s\nnot forwarded: %v", diff, notForwarded(e.lb, svc, nil))
			}
		})
	}
}
