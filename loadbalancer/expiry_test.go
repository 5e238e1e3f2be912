package loadbalancer

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
)

// A delete close to the end of a mapping's lease is not sent: it could
// reach the router after the mapping expired and remove a mapping a LAN
// host made at the key meanwhile. These tests pin how the time left is
// counted when the router misreports the lease.

// A router reports a lease of 0 for a mapping this process was granted a
// finite lease for. 0 is read as "not said", and the margin a delete keeps
// before the mapping's expiry is counted from the granted lease, not skipped
// as for a permanent mapping: with 2 s of it left no delete is sent that
// could land after expiry and remove the LAN host's new mapping at the key.
func TestLeaseReportedAsZeroStillKeepsTheMargin(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{Lease: time.Hour}, fake.RouterConfig{})
	nodes := threeNodes()
	svc := newService("default", "web", withPorts(port("a", v1.ProtocolTCP, 82, 30082)))
	svc.Status.LoadBalancer = *e.mustEnsure(t, svc, nodes)
	e.clock.Step(time.Hour - 2*time.Second) // 2 s of the granted lease left
	zero := func(m igd.Mapping) igd.Mapping { m.Lease = 0; return m }
	console := igd.Mapping{Protocol: igd.TCP, ExternalPort: 82, InternalClient: addrStranger, InternalPort: 82, Description: "game console", Enabled: true}
	consoleDeleted := false
	e.router.Intercept(fake.RouterHooks{
		GetPortMapping: func(ctx context.Context, _ netip.Addr, k igd.Key, next fake.GetFunc) (igd.Mapping, error) {
			m, err := next(ctx, k)
			return zero(m), err
		},
		ListPortMappings: func(ctx context.Context, _ netip.Addr, p igd.Protocol, r igd.PortRange, next fake.ListFunc) ([]igd.Mapping, error) {
			ms, err := next(ctx, p, r)
			for i := range ms {
				ms[i] = zero(ms[i])
			}
			return ms, err
		},
		DeletePortMapping: func(ctx context.Context, _ netip.Addr, k igd.Key, next fake.DeleteFunc) error {
			e.clock.Step(3 * time.Second)
			if _, err := e.router.Client(addrStranger).GetPortMapping(ctx, igd.TCP, 82); errors.Is(err, igd.ErrNoSuchEntry) {
				e.router.Put(console)
				consoleDeleted = k == console.Key()
			}
			return next(ctx, k)
		},
	})
	_ = e.lb.EnsureLoadBalancerDeleted(ctx, testCluster, svc)
	if consoleDeleted {
		t.Errorf("a delete sent with 2 s of the granted lease left (the router reports lease 0) landed after expiry and removed the console's mapping")
	}
}

// For a router that reports the lease as granted, the granted lease is the
// only count, and it starts when the add was sent, not when its reply
// arrived. With a slow reply (4 s), a delete judged when 5.5 s are left by
// the reply's count (1.5 s by the router's) is not sent: taking 2 s to reach
// the router, it would land after expiry and remove the LAN host's new
// mapping at the key.
func TestGrantedLeaseCountedFromTheAddSent(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{Lease: time.Hour}, fake.RouterConfig{})
	nodes := threeNodes()
	asGranted := func(m igd.Mapping) igd.Mapping {
		if m.Lease > 0 {
			m.Lease = time.Hour
		}
		return m
	}
	e.router.Intercept(fake.RouterHooks{
		AddPortMapping: func(ctx context.Context, _ netip.Addr, m igd.Mapping, next fake.AddFunc) (igd.Mapping, error) {
			stored, err := next(ctx, m)
			e.clock.Step(4 * time.Second) // the reply takes 4 s
			return stored, err
		},
		GetPortMapping: func(ctx context.Context, _ netip.Addr, k igd.Key, next fake.GetFunc) (igd.Mapping, error) {
			m, err := next(ctx, k)
			return asGranted(m), err
		},
		ListPortMappings: func(ctx context.Context, _ netip.Addr, p igd.Protocol, r igd.PortRange, next fake.ListFunc) ([]igd.Mapping, error) {
			ms, err := next(ctx, p, r)
			for i := range ms {
				ms[i] = asGranted(ms[i])
			}
			return ms, err
		},
	})
	svc := newService("default", "web", withPorts(port("a", v1.ProtocolTCP, 82, 30082)))
	svc.Status.LoadBalancer = *e.mustEnsure(t, svc, nodes)
	// By this process's count 5.5 s are left; by the router's, 1.5 s.
	e.clock.Step(time.Hour - 5500*time.Millisecond) // now: 1.5 s before the router expires it
	console := igd.Mapping{Protocol: igd.TCP, ExternalPort: 82, InternalClient: addrStranger, InternalPort: 82, Description: "game console", Enabled: true}
	consoleDeleted := false
	e.router.Intercept(fake.RouterHooks{DeletePortMapping: func(ctx context.Context, _ netip.Addr, k igd.Key, next fake.DeleteFunc) error {
		e.clock.Step(2 * time.Second) // the delete takes 2 s to reach the router
		if _, err := e.router.Client(addrStranger).GetPortMapping(ctx, igd.TCP, 82); errors.Is(err, igd.ErrNoSuchEntry) {
			e.router.Put(console)
			consoleDeleted = k == console.Key()
		}
		return next(ctx, k)
	}})
	_ = e.lb.EnsureLoadBalancerDeleted(ctx, testCluster, svc)
	if consoleDeleted {
		t.Errorf("the delete landed after the lease ran out and removed the console's mapping: the granted lease was counted from the add's reply")
	}
}
