package loadbalancer

import (
	"context"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/internal/upnp"
)

// Adds whose outcome the router does not report faithfully: a reply lost
// after the router stored the add, a fault answered for an add it stored,
// a fault for one it did not store, a conflict whose read-back fails.
// What was sent is never taken for what the router holds, nor a fault for
// proof that nothing was stored: the key stays held until a read proves
// what is there.

// On a router that reports internal port 0 (miniupnpd 2.3.6), the internal
// port is known only from what this process wrote. The nodePort changes; the
// add that moves the mapping to the new nodePort is lost (timeout) or
// answered with a fault, and not stored. What was sent is not taken for what
// the router holds: the retry does not confirm the old mapping as up to
// date, and once it succeeds the router forwards to the new nodePort, not to
// the old one for good.
func TestUnstoredAddIsNotTakenAsWhatTheRouterHolds(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"reply lost", context.DeadlineExceeded},
		{"fault", &igd.UPnPError{Action: "AddPortMapping", Code: upnp.CodeActionFailed, Description: "ActionFailed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, Config{}, fake.RouterConfig{ReportInternalPortZero: true})
			nodes := threeNodes()
			svc := newService("default", "web", withPorts(port("http", v1.ProtocolTCP, 80, 30080)))
			e.mustEnsure(t, svc, nodes)
			failed := fake.Nth(1)
			e.router.Intercept(fake.RouterHooks{AddPortMapping: func(ctx context.Context, _ netip.Addr, m igd.Mapping, next fake.AddFunc) (igd.Mapping, error) {
				if m.InternalPort == 30090 && failed() {
					return igd.Mapping{}, tc.err // not stored
				}
				return next(ctx, m)
			}})
			svc.Spec.Ports[0].NodePort = 30090
			if _, err := e.ensure(t, svc, nodes); err == nil {
				t.Fatal("Ensure succeeded although its add failed")
			}
			e.mustEnsure(t, svc, nodes) // the service controller retries
			var got []uint16
			for _, m := range e.router.Mappings() {
				got = append(got, m.InternalPort)
			}
			if len(got) != 1 || got[0] != 30090 {
				t.Errorf("router forwards TCP/80 to internal ports %v after a successful Ensure, want [30090]", got)
			}
		})
	}
}

// A router stores the add of TCP/81 and answers 501 (as in
// TestFaultAnsweredAddThatWasStoredLeavesNothingBehind); it lists
// faithfully, but its GetSpecificPortMappingEntry answers 714 for a mapping
// it holds. The failed add's key is read back by the same read as the
// Service's other keys (a listing), not by a lone
// GetSpecificPortMappingEntry taken as proof: once the user removes port 81
// and deletes the Service, nothing is left on the router.
func TestFaultAnsweredAddIsReadBackByTheSameReadAsTheOtherKeys(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{}, fake.RouterConfig{})
	nodes := threeNodes()
	lied := fake.Nth(1)
	e.router.Intercept(fake.RouterHooks{
		AddPortMapping: func(ctx context.Context, _ netip.Addr, m igd.Mapping, next fake.AddFunc) (igd.Mapping, error) {
			stored, err := next(ctx, m)
			if err == nil && m.ExternalPort == 81 && lied() {
				return igd.Mapping{}, &igd.UPnPError{Action: "AddPortMapping", Code: upnp.CodeActionFailed, Description: "ActionFailed"}
			}
			return stored, err
		},
		GetPortMapping: func(ctx context.Context, _ netip.Addr, k igd.Key, next fake.GetFunc) (igd.Mapping, error) {
			return igd.Mapping{}, igd.ErrNoSuchEntry
		},
	})
	svc := newService("default", "web", withPorts(port("a", v1.ProtocolTCP, 80, 30080), port("b", v1.ProtocolTCP, 81, 30081)))
	_, _ = e.ensure(t, svc, nodes) // whatever it reports of port 81, the mapping is there
	svc.Spec.Ports = svc.Spec.Ports[:1]
	if _, err := e.ensure(t, svc, nodes); err != nil {
		t.Fatalf("Ensure without port 81: %v", err)
	}
	if err := e.lb.EnsureLoadBalancerDeleted(ctx, testCluster, svc); err != nil {
		t.Fatalf("EnsureLoadBalancerDeleted: %v", err)
	}
	diffRows(t, "table after the delete", e.table(), nil)
}

// A LAN host takes TCP/80 between the Service's read and its add (718), and
// the read-back of the key times out (a listing, as the Service's reads are
// on a router that lists, or a GetSpecificPortMappingEntry). The error does
// not say "the port is free" (nor blame secure mode): nothing proved it.
func TestConflictWithAFailedReadBackDoesNotClaimThePortFree(t *testing.T) {
	e := newEnv(t, Config{}, fake.RouterConfig{})
	host := igd.Mapping{Protocol: igd.TCP, ExternalPort: 80, InternalClient: addrStranger, InternalPort: 80, Description: "nas", Enabled: true}
	var added atomic.Bool
	e.router.Intercept(fake.RouterHooks{
		AddPortMapping: func(ctx context.Context, _ netip.Addr, m igd.Mapping, next fake.AddFunc) (igd.Mapping, error) {
			e.router.Put(host) // the LAN host wins the race
			added.Store(true)
			return next(ctx, m)
		},
		ListPortMappings: func(ctx context.Context, _ netip.Addr, p igd.Protocol, r igd.PortRange, next fake.ListFunc) ([]igd.Mapping, error) {
			if added.Load() { // the read before the add succeeds; the read-back times out
				return nil, context.DeadlineExceeded
			}
			return next(ctx, p, r)
		},
		GetPortMapping: func(ctx context.Context, _ netip.Addr, k igd.Key, next fake.GetFunc) (igd.Mapping, error) {
			return igd.Mapping{}, context.DeadlineExceeded
		},
	})
	_, err := e.ensure(t, newService("default", "web", withPorts(port("http", v1.ProtocolTCP, 80, 30080))), threeNodes())
	if err == nil || strings.Contains(err.Error(), "the port is free") {
		t.Errorf("Ensure after a 718 and a read-back that timed out: %v", err)
	}
}

// The reply to the add of TCP/81 is lost (the router stored it), and the
// node the Service's mappings point at is deleted before the next read. The
// mapping is still recognised as the Service's, by what this process sent,
// as a successful add to that node would be: once the user removes port 81
// and deletes the Service, nothing is left on the router.
func TestLostAddReplyFoundAfterItsNodeIsGoneLeavesNothingBehind(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{}, fake.RouterConfig{})
	nodes := threeNodes()
	lost := fake.Nth(1)
	e.router.Intercept(fake.RouterHooks{AddPortMapping: func(ctx context.Context, _ netip.Addr, m igd.Mapping, next fake.AddFunc) (igd.Mapping, error) {
		stored, err := next(ctx, m)
		if err == nil && m.ExternalPort == 81 && lost() {
			return igd.Mapping{}, context.DeadlineExceeded
		}
		return stored, err
	}})
	svc := newService("default", "web", withPorts(port("a", v1.ProtocolTCP, 80, 30080), port("b", v1.ProtocolTCP, 81, 30081)))
	if _, err := e.ensure(t, svc, nodes); err == nil {
		t.Fatal("Ensure succeeded although the reply to one add was lost")
	}
	// The node the mappings point at is deleted (the informer's delete).
	var gone string
	for _, m := range e.router.Mappings() {
		for _, n := range nodes {
			if n.Status.Addresses[1].Address == m.InternalClient.String() {
				gone = n.Name
			}
		}
	}
	e.lb.forgetNode(gone)
	var rest []*v1.Node
	for _, n := range nodes {
		if n.Name != gone {
			rest = append(rest, n)
		}
	}
	svc.Spec.Ports = svc.Spec.Ports[:1] // the user removes port 81
	if _, err := e.ensure(t, svc, rest); err != nil {
		t.Fatalf("Ensure without port 81: %v", err)
	}
	if err := e.lb.EnsureLoadBalancerDeleted(ctx, testCluster, svc); err != nil {
		t.Fatalf("EnsureLoadBalancerDeleted: %v", err)
	}
	diffRows(t, "table after the delete", e.table(), nil)
}

// A router that lies stores the add of TCP/81 and answers it with a fault
// (501). A UPnP fault is no proof that nothing was stored: the key stays
// held until a read proves what is there (one more key read by the Service's
// next operation), so once the user removes the port and deletes the
// Service, nothing is left on the router.
func TestFaultAnsweredAddThatWasStoredLeavesNothingBehind(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{}, fake.RouterConfig{})
	nodes := threeNodes()
	lied := fake.Nth(1)
	e.router.Intercept(fake.RouterHooks{AddPortMapping: func(ctx context.Context, _ netip.Addr, m igd.Mapping, next fake.AddFunc) (igd.Mapping, error) {
		stored, err := next(ctx, m)
		if err == nil && m.ExternalPort == 81 && lied() {
			return igd.Mapping{}, &igd.UPnPError{Action: "AddPortMapping", Code: upnp.CodeActionFailed, Description: "ActionFailed"}
		}
		return stored, err
	}})
	svc := newService("default", "web", withPorts(port("a", v1.ProtocolTCP, 80, 30080), port("b", v1.ProtocolTCP, 81, 30081)))
	_, _ = e.ensure(t, svc, nodes) // whatever it reports of port 81, the mapping is there
	svc.Spec.Ports = svc.Spec.Ports[:1]
	if _, err := e.ensure(t, svc, nodes); err != nil {
		t.Fatalf("Ensure without port 81: %v", err)
	}
	if err := e.lb.EnsureLoadBalancerDeleted(ctx, testCluster, svc); err != nil {
		t.Fatalf("EnsureLoadBalancerDeleted: %v", err)
	}
	diffRows(t, "table after the delete", e.table(), nil)
}
