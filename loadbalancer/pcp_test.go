package loadbalancer

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/pcp"
	"github.com/ccmkit/ccmkit/internal/pcpwire"
)

var pcpSecret = []byte("a cluster's secret of 32 bytes..")

// pcpEnv is newEnv with a pcp.Backend as the client: UPnP reads from node-a,
// PCP writes to a fake PCP server on the same table, THIRD_PARTY allowed.
func pcpEnv(t *testing.T, cfg Config) (*env, *fake.PCPServer) {
	t.Helper()
	return pcpEnvWith(t, cfg, fake.RouterConfig{})
}

// pcpEnvWith is pcpEnv on a router configured by rc.
func pcpEnvWith(t *testing.T, cfg Config, rc fake.RouterConfig) (*env, *fake.PCPServer) {
	t.Helper()
	return envWithPCP(t, cfg, rc, fake.PCPConfig{AllowThirdParty: true}, func(e *env, s *fake.PCPServer) igd.Client { return pcpBackend(t, e.router, s, pcpSecret) })
}

// envWithPCP is newEnv on a router configured by rc, with a fake PCP server
// configured by pc on its table, and the LoadBalancer's client made by
// client.
func envWithPCP(t *testing.T, cfg Config, rc fake.RouterConfig, pc fake.PCPConfig, client func(*env, *fake.PCPServer) igd.Client) (*env, *fake.PCPServer) {
	t.Helper()
	e := newEnv(t, cfg, rc)
	pc.Router = e.router
	s, err := fake.NewPCPServer(pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	cfg.Client, cfg.Clock = client(e, s), e.clock
	if e.lb, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	return e, s
}

// pcpBackend is a pcp.Backend on s, reading r from node-a.
func pcpBackend(t *testing.T, r *fake.Router, s *fake.PCPServer, secret []byte) *pcp.Backend {
	t.Helper()
	return newPCPBackend(t, s, pcp.BackendConfig{UPnP: r.Client(addrA), Secret: secret})
}

// newPCPBackend is a pcp.Backend configured by cfg, with a PCP client of s.
func newPCPBackend(t *testing.T, s *fake.PCPServer, cfg pcp.BackendConfig) *pcp.Backend {
	t.Helper()
	c, err := pcp.NewClient(pcp.Config{Server: s.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	cfg.PCP = c
	b, err := pcp.NewBackend(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// pcpDesc is what the router stores for Service ns/name's mapping at k.
func pcpDesc(ns, name string, k igd.Key) string {
	return fake.PCPDescription(pcpwire.NonceFor(pcpSecret, newOwner(testCluster, ns, name).token, k))
}

func TestServedThroughPCP(t *testing.T) {
	e, s := pcpEnv(t, Config{})
	ctx := context.Background()
	nodes := threeNodes()
	svc := newService("default", "web", withPorts(port("http", v1.ProtocolTCP, 80, 30080), port("dns", v1.ProtocolUDP, 53, 30053)))
	e.mustEnsure(t, svc, nodes)
	tcp, udp := igd.Key{Protocol: igd.TCP, ExternalPort: 80}, igd.Key{Protocol: igd.UDP, ExternalPort: 53}
	tgt := e.router.Mappings()[0].InternalClient
	want := []string{
		row(igd.TCP, 80, tgt, 30080, pcpDesc("default", "web", tcp)),
		row(igd.UDP, 53, tgt, 30053, pcpDesc("default", "web", udp)),
	}
	diffRows(t, "table", e.table(), want)
	maps := 0
	for _, c := range s.Calls() {
		if c.Lifetime > 0 && c.PreferFailure && c.ThirdParty == tgt {
			maps++
		}
	}
	if maps != 2 {
		t.Errorf("%d PCP MAPs with PREFER_FAILURE and THIRD_PARTY %s, want 2: %+v", maps, tgt, s.Calls())
	}
	// A no-op Ensure writes nothing: the nonce reads as the Service's.
	calls := len(s.Calls())
	e.mustEnsure(t, svc, nodes)
	if n := len(s.Calls()) - calls; n != 0 {
		t.Errorf("a no-op Ensure sent %d PCP requests, want 0", n)
	}
	diffRows(t, "table after a no-op Ensure", e.table(), want)

	// Another cluster's controller (another secret) sees another owner's mappings.
	other, err := New(Config{Client: pcpBackend(t, e.router, s, []byte("another cluster's secret of 32 b")), Clock: e.clock})
	if err != nil {
		t.Fatal(err)
	}
	_, err = other.EnsureLoadBalancer(ctx, testCluster, svc, nodes)
	var pe *PortError
	if err = notForwarded(other, svc, err); !errors.As(err, &pe) || !errors.Is(err, ErrPortInUse) {
		t.Errorf("Ensure under another secret: %v, want ErrPortInUse", err)
	}
	diffRows(t, "table after the other cluster's Ensure", e.table(), want)

	// A second process of the cluster (same secret) renews and deletes them.
	second, err := New(Config{Client: pcpBackend(t, e.router, s, pcpSecret), Clock: e.clock})
	if err != nil {
		t.Fatal(err)
	}
	second.seeNodes(nodes)
	if _, exists, err := second.GetLoadBalancer(ctx, testCluster, svc); err != nil || !exists {
		t.Fatalf("GetLoadBalancer from a second process: exists %t, %v", exists, err)
	}
	e.clock.Step(45 * time.Minute) // past half the lease: renew
	calls = len(s.Calls())
	if _, err := second.EnsureLoadBalancer(ctx, testCluster, svc, nodes); err != nil {
		t.Fatalf("Ensure from a second process: %v", err)
	}
	if n := len(s.Calls()) - calls; n != 2 {
		t.Errorf("renewal by a second process sent %d PCP requests, want 2", n)
	}
	diffRows(t, "table after the renewal", e.table(), want)
	if err := second.EnsureLoadBalancerDeleted(ctx, testCluster, svc); err != nil {
		t.Fatalf("EnsureLoadBalancerDeleted from a second process: %v", err)
	}
	diffRows(t, "table after the delete", e.table(), nil)
}

// A delete sent after the mapping it was proved on expired, by a router
// that reported a longer lease than it kept, goes through PCP's guard: the
// LAN host that took the key keeps its mapping. Through UPnP the same
// delete removes it.
func TestPCPDeleteSparesAMappingTakenAfterTheRead(t *testing.T) {
	for _, tc := range []struct {
		name     string
		guarded  bool
		hostKept bool
	}{
		{name: "pcp", guarded: true, hostKept: true},
		{name: "upnp", guarded: false, hostKept: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, s := pcpEnv(t, Config{Lease: 2 * time.Minute})
			ctx := context.Background()
			nodes := threeNodes()
			svc := newService("default", "web", withPorts(port("http", v1.ProtocolTCP, 80, 30080)))
			if !tc.guarded { // the same table, made through UPnP
				e.router.Reboot()
				var err error
				if e.lb, err = New(Config{Client: e.router.Client(addrA), Lease: 2 * time.Minute, Clock: e.clock}); err != nil {
					t.Fatal(err)
				}
			}
			e.mustEnsure(t, svc, nodes)
			// A fresh process (no memory of the lease granted) deletes.
			client := igd.Client(e.router.Client(addrA))
			if tc.guarded {
				client = pcpBackend(t, e.router, s, pcpSecret)
			}
			lb, err := New(Config{Client: client, Clock: e.clock})
			if err != nil {
				t.Fatal(err)
			}
			lb.seeNodes(nodes)
			host := igd.Mapping{Protocol: igd.TCP, ExternalPort: 80, InternalClient: addrStranger, InternalPort: 8080,
				Description: "console", Lease: time.Hour, Enabled: true}
			takeAfterTheRead(t, e, host)
			_ = lb.EnsureLoadBalancerDeleted(ctx, testCluster, svc)
			e.router.ClearHooks()
			want := []string{row(igd.TCP, 80, addrStranger, 8080, "console")}
			if !tc.hostKept {
				want = nil
			}
			diffRows(t, "table after the late delete", e.table(), want)
		})
	}
}

// takeAfterTheRead makes the router's next answer to a read report an hour
// left on every mapping it returns, then (once) lets the lease run out and
// host take its key, as if the answer had come late: the delete that
// follows is sent after the key changed hands. ClearHooks ends it.
func takeAfterTheRead(t *testing.T, e *env, host igd.Mapping) {
	t.Helper()
	var once sync.Once
	late := func(ms []igd.Mapping) {
		for i := range ms {
			ms[i].Lease = time.Hour // the router says an hour is left
		}
		once.Do(func() {
			e.clock.Step(3 * time.Minute) // it had two minutes
			if _, err := e.router.Client(host.InternalClient).AddPortMapping(context.Background(), host); err != nil {
				t.Errorf("the host's add: %v", err)
			}
		})
	}
	e.router.Intercept(fake.RouterHooks{
		GetPortMapping: func(ctx context.Context, _ netip.Addr, k igd.Key, next fake.GetFunc) (igd.Mapping, error) {
			m, err := next(ctx, k)
			ms := []igd.Mapping{m}
			if err == nil {
				late(ms)
			}
			return ms[0], err
		},
		ListPortMappings: func(ctx context.Context, _ netip.Addr, p igd.Protocol, r igd.PortRange, next fake.ListFunc) ([]igd.Mapping, error) {
			ms, err := next(ctx, p, r)
			if err == nil && len(ms) > 0 {
				late(ms)
			}
			return ms, err
		},
	})
}

// guardedEnv is pcpEnvWith (guarded, the PCP server returned) or newEnv
// (through UPnP only, no PCP server) on a router configured by rc.
func guardedEnv(t *testing.T, guarded bool, rc fake.RouterConfig) (*env, *fake.PCPServer) {
	t.Helper()
	if guarded {
		return pcpEnvWith(t, Config{}, rc)
	}
	return newEnv(t, Config{}, rc), nil
}

// A Service whose nodePort changes (the external port stays) is forwarded
// to the new nodePort at once, as through UPnP. Through PCP the router
// refuses a MAP at a key its mapping holds for another internal port
// (PREFER_FAILURE: CANNOT_PROVIDE_EXTERNAL; without it, another port), so
// the old mapping must be deleted first; else the port forwards to the stale
// nodePort until the old mapping's lease ends.
func TestPCPNodePortChangeIsServed(t *testing.T) {
	for _, guarded := range []bool{false, true} {
		name := map[bool]string{false: "upnp", true: "pcp"}[guarded]
		t.Run(name, func(t *testing.T) {
			e, _ := guardedEnv(t, guarded, fake.RouterConfig{})
			nodes := threeNodes()
			svc := newService("default", "web", withPorts(port("http", v1.ProtocolTCP, 80, 30080)))
			e.mustEnsure(t, svc, nodes)
			tgt := e.router.Mappings()[0].InternalClient
			svc.Spec.Ports[0].NodePort = 30081
			_, err := e.ensure(t, svc, nodes)
			if err = notForwarded(e.lb, svc, err); err != nil {
				t.Errorf("Ensure after the nodePort changed: %v", err)
			}
			d := desc("default", "web", "http")
			if guarded {
				d = pcpDesc("default", "web", igd.Key{Protocol: igd.TCP, ExternalPort: 80})
			}
			diffRows(t, "table", e.table(), []string{row(igd.TCP, 80, tgt, 30081, d)})
		})
	}
}

// After a restart on a router that reports internal port 0 (miniupnpd 2.3.6
// with nftables), a port the Service gave up, and the Service's mappings
// when it is deleted, are still withdrawn: the process cannot name the
// mapping by its internal port in a PCP delete, as through UPnP it needs
// not.
func TestPCPWithdrawWithInternalPortZeroAfterRestart(t *testing.T) {
	for _, guarded := range []bool{false, true} {
		name := map[bool]string{false: "upnp", true: "pcp"}[guarded]
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			rc := fake.RouterConfig{ReportInternalPortZero: true}
			e, s := guardedEnv(t, guarded, rc)
			nodes := threeNodes()
			svc := newService("default", "web", withPorts(port("http", v1.ProtocolTCP, 80, 30080), port("alt", v1.ProtocolTCP, 81, 30081)))
			svc.Status.LoadBalancer = *e.mustEnsure(t, svc, nodes)
			restart := func() *LoadBalancer {
				client := igd.Client(e.router.Client(addrA))
				if guarded {
					client = pcpBackend(t, e.router, s, pcpSecret)
				}
				lb, err := New(Config{Client: client, Clock: e.clock})
				if err != nil {
					t.Fatal(err)
				}
				lb.seeNodes(nodes)
				return lb
			}
			lb := restart()
			svc.Spec.Ports = svc.Spec.Ports[:1]
			if _, err := lb.EnsureLoadBalancer(ctx, testCluster, svc, nodes); err != nil {
				t.Errorf("Ensure without port 81 after a restart: %v", err)
			}
			if n := len(e.router.Mappings()); n != 1 {
				t.Errorf("table after port 81 was given up: %q, want port 80 only", e.table())
			}
			lb = restart()
			if err := lb.EnsureLoadBalancerDeleted(ctx, testCluster, svc); err != nil {
				t.Errorf("EnsureLoadBalancerDeleted after a restart: %v", err)
			}
			diffRows(t, "table after the delete", e.table(), nil)
		})
	}
}

// On a router that reports internal port 0 (miniupnpd 2.3.6), a nodePort
// that changed while no process knew the mapping's (after a restart) is
// still served: the router refuses the MAP at the key (its mapping goes to
// the old nodePort), so the mapping is deleted and made again. Through UPnP
// the add replaces it.
func TestPCPNodePortChangeWithInternalPortZeroAfterRestart(t *testing.T) {
	for _, guarded := range []bool{false, true} {
		name := map[bool]string{false: "upnp", true: "pcp"}[guarded]
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			rc := fake.RouterConfig{ReportInternalPortZero: true}
			e, s := guardedEnv(t, guarded, rc)
			nodes := threeNodes()
			svc := newService("default", "web", withPorts(port("http", v1.ProtocolTCP, 80, 30080)))
			svc.Status.LoadBalancer = *e.mustEnsure(t, svc, nodes)
			tgt := e.router.Mappings()[0].InternalClient
			client := igd.Client(e.router.Client(addrA))
			if guarded {
				client = pcpBackend(t, e.router, s, pcpSecret)
			}
			lb, err := New(Config{Client: client, Clock: e.clock})
			if err != nil {
				t.Fatal(err)
			}
			lb.seeNodes(nodes)
			svc.Spec.Ports[0].NodePort = 30081
			_, err = lb.EnsureLoadBalancer(ctx, testCluster, svc, nodes)
			if err = notForwarded(lb, svc, err); err != nil {
				t.Errorf("Ensure after a restart and a nodePort change: %v", err)
			}
			d := desc("default", "web", "http")
			if guarded {
				d = pcpDesc("default", "web", igd.Key{Protocol: igd.TCP, ExternalPort: 80})
			}
			diffRows(t, "table", e.table(), []string{row(igd.TCP, 80, tgt, 30081, d)})
		})
	}
}
