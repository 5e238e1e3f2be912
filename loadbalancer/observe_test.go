package loadbalancer

import (
	"context"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
)

// TestDeleteAfterGetLoadBalancer covers the service controller's way of
// deleting (GetLoadBalancer, then EnsureLoadBalancerDeleted): the delete
// uses the Get's table read only while that read still shows everything it
// must, and reads the table itself otherwise.
func TestDeleteAfterGetLoadBalancer(t *testing.T) {
	ctx := context.Background()
	foreignHost := netip.MustParseAddr("192.0.2.50")
	web := func() *v1.Service {
		return newService("default", "web", withPorts(port("a", v1.ProtocolTCP, 80, 30080), port("b", v1.ProtocolUDP, 80, 30081)))
	}
	// getWithLeaseNearlyOut redoes the Get 55 seconds into web's one-minute
	// leases, when less than leaseMargin is left.
	getWithLeaseNearlyOut := func(t *testing.T, e *env) {
		t.Helper()
		e.clock.Step(MinLease - leaseMargin/2)
		if _, _, err := e.lb.GetLoadBalancer(ctx, testCluster, web()); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		name string
		cfg  Config
		// between runs after the Get and before the Delete.
		between func(t *testing.T, e *env)
		// wantReads is the number of table reads the Delete makes.
		wantReads int
		// wantTable is the router's table after the Delete (nil: empty).
		wantTable []string
	}{
		{name: "right after the Get", wantReads: 0},
		{
			name:      "after ObservationTTL",
			between:   func(_ *testing.T, e *env) { e.clock.Step(ObservationTTL + time.Millisecond) },
			wantReads: 1,
		},
		{
			name: "after a write for the Service",
			between: func(t *testing.T, e *env) {
				// A new port, added after the Get read the table: the
				// Delete must remove it too.
				svc := web()
				svc.Spec.Ports = append(svc.Spec.Ports, port("c", v1.ProtocolTCP, 8080, 30082))
				e.mustEnsure(t, svc, threeNodes())
			},
			wantReads: 1,
		},
		{
			name: "after a write for another Service",
			between: func(t *testing.T, e *env) {
				e.mustEnsure(t, newService("default", "api", withPorts(port("a", v1.ProtocolTCP, 81, 30090))), threeNodes())
			},
			wantReads: 0,
			wantTable: []string{row(igd.TCP, 81, addrC, 30090, desc("default", "api", "a"))},
		},
		{
			name: "leases about to run out, mappings of an earlier process",
			cfg:  Config{Lease: MinLease},
			between: func(t *testing.T, e *env) {
				// A restarted process (no record of the leases it granted)
				// redoes the Get on a table whose leases have less than
				// leaseMargin left: by the time of the deletes another host
				// could hold the ports.
				lb, err := New(Config{Client: e.router.Client(addrA), Clock: e.clock, Lease: MinLease})
				if err != nil {
					t.Fatal(err)
				}
				lb.seeNodes(threeNodes())
				e.lb = lb
				getWithLeaseNearlyOut(t, e)
			},
			wantReads: 1,
		},
		{
			name: "after an Ensure that only removed a port",
			between: func(t *testing.T, e *env) {
				// No add, one delete: the freed port goes to a stranger.
				// The Get's read still shows it as ours.
				e.mustEnsure(t, newService("default", "web", withPorts(port("a", v1.ProtocolTCP, 80, 30080))), threeNodes())
				if _, err := e.router.Client(addrStranger).AddPortMapping(ctx, igd.Mapping{Protocol: igd.UDP, ExternalPort: 80,
					InternalClient: addrStranger, InternalPort: 9, Description: "game", Enabled: true}); err != nil {
					t.Fatal(err)
				}
			},
			wantReads: 1,
			wantTable: []string{row(igd.UDP, 80, addrStranger, 9, "game")},
		},
		{
			name: "router reporting leases as granted, ours about to run out",
			cfg:  Config{Lease: MinLease},
			between: func(t *testing.T, e *env) {
				// The router says a full minute is left; this process
				// knows it granted the minute 55 seconds ago.
				e.router.PrependHook(fake.MethodListPortMappings, func(_ context.Context, c *fake.Call) (bool, error) {
					c.Mappings = e.router.Mappings()
					for i := range c.Mappings {
						c.Mappings[i].Lease = MinLease
					}
					return true, nil
				})
				getWithLeaseNearlyOut(t, e)
			},
			wantReads: 1,
		},
		{
			name: "foreign mapping after a reboot, read again",
			between: func(t *testing.T, e *env) {
				e.router.Reboot()
				if _, err := e.router.Client(foreignHost).AddPortMapping(ctx, igd.Mapping{Protocol: igd.TCP, ExternalPort: 80,
					InternalClient: foreignHost, InternalPort: 8080, Description: desc("default", "web", "a"), Enabled: true}); err != nil {
					t.Fatal(err)
				}
				e.clock.Step(ObservationTTL + time.Millisecond)
			},
			wantReads: 1,
			wantTable: []string{row(igd.TCP, 80, foreignHost, 8080, desc("default", "web", "a"))},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, tt.cfg, fake.RouterConfig{})
			e.mustEnsure(t, web(), threeNodes())
			if _, exists, err := e.lb.GetLoadBalancer(ctx, testCluster, web()); err != nil || !exists {
				t.Fatalf("GetLoadBalancer = %v, %v; want it to exist", exists, err)
			}
			e.calls()
			if tt.between != nil {
				tt.between(t, e)
				e.calls()
			}
			before := len(e.table())
			if err := e.lb.EnsureLoadBalancerDeleted(ctx, testCluster, web()); err != nil {
				t.Fatalf("EnsureLoadBalancerDeleted: %v", err)
			}
			c := e.calls()
			if c[fake.MethodListPortMappings] != tt.wantReads {
				t.Errorf("Delete made %d table reads, want %d (calls %v)", c[fake.MethodListPortMappings], tt.wantReads, c)
			}
			if got, want := c[fake.MethodDeletePortMapping], before-len(tt.wantTable); got != want {
				t.Errorf("Delete made %d deletes, want %d (calls %v)", got, want, c)
			}
			diffRows(t, "table after Delete", e.table(), tt.wantTable)
		})
	}
}

// TestObservationIsUsedOnce: a second Delete reads the table, even with
// nothing written in between (the Service has no mapping to delete).
func TestObservationIsUsedOnce(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{}, fake.RouterConfig{})
	e.lb.seeNodes(threeNodes()) // as an Ensure of another Service would
	svc := newService("default", "web", withPorts(port("a", v1.ProtocolTCP, 80, 30080)))
	if _, exists, err := e.lb.GetLoadBalancer(ctx, testCluster, svc); err != nil || exists {
		t.Fatalf("GetLoadBalancer = %v, %v; want no mappings", exists, err)
	}
	for i, wantReads := range []int{0, 1} {
		e.calls()
		if err := e.lb.EnsureLoadBalancerDeleted(ctx, testCluster, svc); err != nil {
			t.Fatal(err)
		}
		if got := e.calls()[fake.MethodListPortMappings]; got != wantReads {
			t.Errorf("Delete %d made %d reads, want %d", i+1, got, wantReads)
		}
	}
}

// TestGetWaitsForOperationInFlight: a GetLoadBalancer made while an Ensure
// of the same Service is adding a port reads the table after that add, so
// the Delete that uses its read removes the new port too.
func TestGetWaitsForOperationInFlight(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{}, fake.RouterConfig{})
	web := newService("default", "web", withPorts(port("a", v1.ProtocolTCP, 80, 30080)))
	e.mustEnsure(t, web, threeNodes())
	entered, unblock := make(chan struct{}), make(chan struct{})
	e.router.PrependHook(fake.MethodAddPortMapping, fake.NthHook(1, func(context.Context, *fake.Call) (bool, error) {
		close(entered)
		<-unblock
		return false, nil
	}))
	ensured := make(chan error)
	go func() {
		svc := web.DeepCopy()
		svc.Spec.Ports = append(svc.Spec.Ports, port("c", v1.ProtocolTCP, 8080, 30082))
		_, err := e.lb.EnsureLoadBalancer(ctx, testCluster, svc, threeNodes())
		ensured <- err
	}()
	<-entered
	var blockedReads atomic.Int32 // table reads while the add is held (the Ensure read before it)
	e.router.PrependHook(fake.MethodListPortMappings, func(context.Context, *fake.Call) (bool, error) {
		select {
		case <-unblock:
		default:
			blockedReads.Add(1)
		}
		return false, nil
	})
	got := make(chan error)
	go func() {
		_, _, err := e.lb.GetLoadBalancer(ctx, testCluster, web)
		got <- err
	}()
	// Give a Get that did not wait the time to read; one that waits reads
	// after the add whatever the timing.
	time.Sleep(50 * time.Millisecond)
	close(unblock)
	if err := <-ensured; err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if n := blockedReads.Load(); n != 0 {
		t.Errorf("%d table reads while the Ensure's add was in flight, want 0", n)
	}
	if err := e.lb.EnsureLoadBalancerDeleted(ctx, testCluster, web); err != nil {
		t.Fatal(err)
	}
	diffRows(t, "table after Delete", e.table(), nil)
}
