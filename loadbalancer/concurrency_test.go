package loadbalancer

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
)

// Many workers Ensure Services at once, all wanting external port TCP/80 and
// each one port of its own: exactly one Service gets TCP/80, every other one
// fails for TCP/80 only (naming the winner or its mapping), and every mapping
// in the table belongs to the Service whose description it carries.
func TestConcurrentServicesRaceForOnePort(t *testing.T) {
	for round := range 5 {
		t.Run(fmt.Sprint("round ", round), func(t *testing.T) {
			e := newEnv(t, Config{}, fake.RouterConfig{})
			// Widen the window between the table read and the add.
			e.router.Intercept(fake.RouterHooks{AddPortMapping: func(ctx context.Context, _ netip.Addr, m igd.Mapping, next fake.AddFunc) (igd.Mapping, error) {
				if err := fake.Sleep(ctx, 200*time.Microsecond); err != nil {
					return igd.Mapping{}, err
				}
				return next(ctx, m)
			}})
			nodes := threeNodes()
			const workers = 24
			errs := make([]error, workers)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range workers {
				wg.Go(func() {
					<-start
					svc := newService("team", fmt.Sprintf("svc-%02d", i), withPorts(
						port("shared", v1.ProtocolTCP, 80, int32(30000+i)),
						port("own", v1.ProtocolTCP, int32(9000+i), int32(31000+i)),
					))
					_, err := e.lb.EnsureLoadBalancer(context.Background(), testCluster, svc, nodes)
					errs[i] = notForwarded(e.lb, svc, err)
				})
			}
			close(start)
			wg.Wait()

			winners := 0
			for i, err := range errs {
				if err == nil {
					winners++
					continue
				}
				var pe *PortError
				if !errors.As(err, &pe) || !errors.Is(err, ErrPortInUse) || pe.Key.ExternalPort != 80 {
					t.Errorf("svc-%02d: error %v, want only a PortError for TCP/80", i, err)
				}
			}
			if winners != 1 {
				t.Fatalf("%d Services got TCP/80, want exactly 1", winners)
			}
			ms := e.router.Mappings()
			if len(ms) != workers+1 {
				t.Fatalf("table has %d mappings, want %d: %v", len(ms), workers+1, e.table())
			}
			for _, m := range ms {
				p, ok := parseDescription(m.Description)
				if !ok {
					t.Fatalf("unparsable description %q", m.Description)
				}
				var i int
				if _, err := fmt.Sscanf(p.token, testCluster+"/team/svc-%02d", &i); err != nil {
					t.Fatalf("description %q: %v", m.Description, err)
				}
				wantNodePort := uint16(31000 + i)
				if m.ExternalPort == 80 {
					wantNodePort = uint16(30000 + i)
					if errs[i] != nil {
						t.Errorf("TCP/80 is held by svc-%02d, whose Ensure failed", i)
					}
				} else if m.ExternalPort != uint16(9000+i) {
					t.Errorf("svc-%02d holds %s", i, m.Key())
				}
				if m.InternalPort != wantNodePort {
					t.Errorf("%s -> nodePort %d, want %d (another Service's target)", m.Key(), m.InternalPort, wantNodePort)
				}
			}
			// Every loser is told about the winner when it tries again.
			for i, err := range errs {
				if err == nil {
					continue
				}
				svc := newService("team", fmt.Sprintf("svc-%02d", i), withPorts(port("shared", v1.ProtocolTCP, 80, int32(30000+i))))
				_, err := e.lb.EnsureLoadBalancer(context.Background(), testCluster, svc, nodes)
				var pe *PortError
				if !errors.As(err, &pe) || pe.Holder == nil {
					t.Errorf("svc-%02d retry: %v, want a PortError naming the holder", i, err)
				}
			}
		})
	}
}

// Ensure, Update, Delete and Get of overlapping Services from many goroutines
// (the service controller's workers plus background work) leave a table in
// which every mapping is owned by a Service that still wants it.
func TestConcurrentMixedOperations(t *testing.T) {
	e := newEnv(t, Config{}, fake.RouterConfig{})
	nodes := threeNodes()
	ctx := context.Background()
	svc := func(i int) *v1.Service {
		return newService("mix", fmt.Sprintf("s%d", i), withPorts(
			port("a", v1.ProtocolTCP, int32(7000+i%4), int32(30000+i)),
			port("b", v1.ProtocolUDP, int32(8000+i), int32(31000+i)),
		))
	}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for j := range 30 {
				i := (w + j) % 12
				switch j % 4 {
				case 0, 1:
					_, _ = e.lb.EnsureLoadBalancer(ctx, testCluster, svc(i), nodes)
				case 2:
					_, _, _ = e.lb.GetLoadBalancer(ctx, testCluster, svc(i))
				case 3:
					_ = e.lb.EnsureLoadBalancerDeleted(ctx, testCluster, svc(i))
				}
			}
		})
	}
	wg.Wait()
	// Whatever is left converges: delete everything, the table empties.
	for i := range 12 {
		if err := e.lb.EnsureLoadBalancerDeleted(ctx, testCluster, svc(i)); err != nil {
			t.Fatalf("Delete s%d: %v", i, err)
		}
	}
	if ms := e.router.Mappings(); len(ms) != 0 {
		t.Fatalf("left behind: %v", e.table())
	}
	if held := e.lb.heldKeys(); len(held) != 0 {
		t.Errorf("reservations left behind: %v", held)
	}
	// And the shared ports are free again for anyone.
	e.mustEnsure(t, newService("mix", "late", withPorts(port("a", v1.ProtocolTCP, 7000, 32000))), nodes)
	if ms := e.router.Mappings(); len(ms) != 1 || ms[0].Key() != (igd.Key{Protocol: igd.TCP, ExternalPort: 7000}) {
		t.Fatalf("table = %v", e.table())
	}
}

// Background passes (with router reboots in between) running at the same
// time as the service controller's calls: under -race, and afterwards the
// table holds exactly the Services' mappings plus the untouched foreign one.
func TestConcurrentPassesAndControllerCalls(t *testing.T) {
	e := newEnv(t, Config{}, fake.RouterConfig{})
	nodes := threeNodes()
	ctx := context.Background()
	foreign := igd.Mapping{Protocol: igd.TCP, ExternalPort: 6000, InternalClient: addrA, InternalPort: 6000, Description: "not ours"}
	e.router.Put(foreign)
	var svcs []*v1.Service
	for i := range 8 {
		svcs = append(svcs, lbService("bg", fmt.Sprintf("s%d", i), withPorts(
			port("a", v1.ProtocolTCP, int32(6000+i), int32(30000+i)), // s0 collides with the foreign mapping
			port("b", v1.ProtocolUDP, int32(7000+i), int32(31000+i)),
		)))
	}
	for _, s := range svcs {
		_, _ = e.lb.EnsureLoadBalancer(ctx, testCluster, s, nodes)
	}
	w := staticWatch(t, nodes, svcs)
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for range 20 {
				e.lb.pass(ctx, w)
			}
		})
	}
	wg.Go(func() {
		for range 5 {
			e.router.Reboot()
			e.router.Put(foreign)
			time.Sleep(time.Millisecond)
		}
	})
	for g := range 4 {
		wg.Go(func() {
			for j := range 20 {
				s := svcs[(g+j)%len(svcs)]
				switch j % 3 {
				case 0:
					_, _ = e.lb.EnsureLoadBalancer(ctx, testCluster, s, nodes)
				case 1:
					_ = e.lb.UpdateLoadBalancer(ctx, testCluster, s, nodes)
				case 2:
					_, _, _ = e.lb.GetLoadBalancer(ctx, testCluster, s)
				}
			}
		})
	}
	wg.Wait()
	e.lb.pass(ctx, w)
	want := []string{row(foreign.Protocol, foreign.ExternalPort, foreign.InternalClient, foreign.InternalPort, foreign.Description)}
	byKey := map[igd.Key]igd.Mapping{}
	for _, m := range e.router.Mappings() {
		byKey[m.Key()] = m
	}
	for i, s := range svcs {
		for _, p := range s.Spec.Ports {
			proto := igd.TCP
			if p.Protocol == v1.ProtocolUDP {
				proto = igd.UDP
			}
			if i == 0 && proto == igd.TCP {
				continue // held by the foreign mapping
			}
			m := byKey[igd.Key{Protocol: proto, ExternalPort: uint16(p.Port)}]
			want = append(want, row(proto, uint16(p.Port), m.InternalClient, uint16(p.NodePort), desc("bg", s.Name, p.Name)))
			if m.InternalClient != addrA && m.InternalClient != addrB && m.InternalClient != addrC {
				t.Errorf("%s/%d targets %s", proto, p.Port, m.InternalClient)
			}
		}
	}
	diffRows(t, "table", e.table(), want)
}
