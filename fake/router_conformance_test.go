package fake_test

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/igdconformance"
)

// The lab's two node addresses, so that every backend uses the same hosts.
var (
	hostA = netip.MustParseAddr("192.0.2.10")
	hostB = netip.MustParseAddr("192.0.2.11")
)

// epoch is where fake clocks start.
var epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// newRouter returns a fake router on a fake clock, configured like the
// conformance case asks.
func newRouter(cfg igdconformance.Config) (*fake.Router, *clocktesting.FakeClock) {
	clk := clocktesting.NewFakeClock(epoch)
	r := fake.NewRouter(fake.RouterConfig{
		ExternalIP:          cfg.ExternalIP,
		SecureMode:          cfg.SecureMode,
		OnlyPermanentLeases: cfg.OnlyPermanentLeases,
		Capacity:            cfg.Capacity,
		Clock:               clk,
	})
	return r, clk
}

// suiteRouter is fake router r, on clock clk, as the suite sees it: a acts
// from hostA and b from hostB.
func suiteRouter(r *fake.Router, clk *clocktesting.FakeClock, a, b igd.Client) igdconformance.Router {
	return igdconformance.Router{
		A: a, B: b,
		AddrA: hostA, AddrB: hostB,
		ExternalIP: r.ExternalIP(),
		Reboot:     func(testing.TB) { r.Reboot() },
		Step:       clk.Step,
	}
}

// TestRouterConformanceInMemory runs the router behaviour suite against the
// in-memory fake (backend 1).
func TestRouterConformanceInMemory(t *testing.T) {
	igdconformance.Run(t, igdconformance.Backend{
		Start: func(t *testing.T, cfg igdconformance.Config) igdconformance.Router {
			r, clk := newRouter(cfg)
			return suiteRouter(r, clk, r.Client(hostA), r.Client(hostB))
		},
		SupportsSecureMode: true,
		CanReboot:          true,
		FakeOnly:           true,
	})
}

func igdconformanceConfig(secure bool) igdconformance.Config {
	return igdconformance.Config{SecureMode: secure}
}

// staticHost is the igd.HostInfo of a client whose host is addr.
type staticHost struct{ addr netip.Addr }

func (h staticHost) DefaultGateway(context.Context) (netip.Addr, error) {
	return netip.MustParseAddr("127.0.0.1"), nil
}

func (h staticHost) LocalAddr(context.Context, netip.Addr) (netip.Addr, error) { return h.addr, nil }

// serverClient returns the real client acting as host, talking to r through
// a fake Server that sees every request as coming from host.
func serverClient(t *testing.T, r *fake.Router, svc fake.UPnPService, host netip.Addr) igd.Client {
	t.Helper()
	srv := newServer(t, r, fake.ServerOptions{Service: svc, ClientAddr: fixed(host)})
	c, err := igd.NewClient(igd.Config{RootDescURL: srv.RootDescURL, Host: staticHost{host}})
	if err != nil {
		t.Fatalf("igd.NewClient: %v", err)
	}
	return c
}

// TestRouterConformanceServer runs the router behaviour suite against the real
// goupnp-based client talking SOAP over HTTP to the fake Server (backend 2),
// for each connection service the Server offers.
func TestRouterConformanceServer(t *testing.T) {
	for _, svc := range []fake.UPnPService{fake.WANIPConnection2, fake.WANIPConnection1, fake.WANPPPConnection1} {
		t.Run(string(svc[strings.LastIndex(string(svc), ":service:")+len(":service:"):]), func(t *testing.T) {
			igdconformance.Run(t, igdconformance.Backend{
				Start: func(t *testing.T, cfg igdconformance.Config) igdconformance.Router {
					r, clk := newRouter(cfg)
					return suiteRouter(r, clk, serverClient(t, r, svc, hostA), serverClient(t, r, svc, hostB))
				},
				SupportsSecureMode: true,
				CanReboot:          true,
				FakeOnly:           true,
				ListServiceType:    string(svc),
			})
		})
	}
}

// tctx returns a context whose logger writes to t (shown for failed tests
// only), so that the real client's logs do not clutter the output.
func tctx(t *testing.T) context.Context {
	logger, _ := ktesting.NewTestContext(t)
	return klog.NewContext(t.Context(), logger)
}
