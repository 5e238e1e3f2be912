package conformance_test

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"testing"

	cloudprovider "k8s.io/cloud-provider"

	"github.com/ccmkit/ccmkit/fake/conformance"
)

// memRoutes is a route table per cluster that keeps its promises unless
// told to break one.
type memRoutes struct {
	breaks string
	mu     sync.Mutex
	tables map[string]map[string]cloudprovider.Route // by cluster, then name
	// For breaking the concurrency promise: the first two CreateRoute
	// calls meet before writing.
	arrived int
	met     chan struct{}
}

const (
	routeListed        = "ListRoutes after CreateRoute lists the route with its TargetNode and DestinationCIDR"
	routeDeleted       = "ListRoutes after DeleteRoute of a listed route no longer lists it"
	routeCreateTwice   = "CreateRoute of a route that exists returns nil and leaves one route"
	routeDeleteMissing = "DeleteRoute of a route already deleted returns nil"
	routeCluster       = "ListRoutes lists only the routes of its cluster"
	routeConcurrent    = "Route calls may run concurrently"
)

func newMemRoutes(breaks string) *memRoutes {
	return &memRoutes{breaks: breaks, tables: map[string]map[string]cloudprovider.Route{}, met: make(chan struct{})}
}

func (m *memRoutes) ListRoutes(_ context.Context, cluster string) ([]*cloudprovider.Route, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*cloudprovider.Route
	for c, table := range m.tables {
		if c != cluster && m.breaks != routeCluster {
			continue
		}
		for _, rt := range table {
			if m.breaks == routeListed {
				rt.TargetNode = "" // loses the node
			}
			out = append(out, &rt)
		}
	}
	return out, nil
}

func (m *memRoutes) CreateRoute(ctx context.Context, cluster, nameHint string, route *cloudprovider.Route) error {
	rt := *route
	rt.Name = nameHint + "-" + route.DestinationCIDR
	m.mu.Lock()
	if m.breaks == routeConcurrent {
		// Read, wait for another caller, write back: one write is lost.
		table := maps.Clone(m.tables[cluster])
		if m.arrived++; m.arrived == 2 {
			close(m.met)
		}
		m.mu.Unlock()
		select {
		case <-m.met:
		case <-ctx.Done():
			return ctx.Err()
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		if table == nil {
			table = map[string]cloudprovider.Route{}
		}
		table[rt.Name] = rt
		m.tables[cluster] = table
		return nil
	}
	defer m.mu.Unlock()
	table := m.tables[cluster]
	if table == nil {
		table = map[string]cloudprovider.Route{}
		m.tables[cluster] = table
	}
	if _, ok := table[rt.Name]; ok && m.breaks == routeCreateTwice {
		return fmt.Errorf("memroutes: route %s already exists", rt.Name)
	}
	table[rt.Name] = rt
	return nil
}

func (m *memRoutes) DeleteRoute(_ context.Context, cluster string, route *cloudprovider.Route) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.breaks == routeDeleted {
		return nil
	}
	if _, ok := m.tables[cluster][route.Name]; !ok && m.breaks == routeDeleteMissing {
		return fmt.Errorf("memroutes: no route %s", route.Name)
	}
	delete(m.tables[cluster], route.Name)
	return nil
}

func TestRoutesSuitePassesOnACorrectTable(t *testing.T) {
	conformance.RunRoutes(t, func(testing.TB) conformance.RoutesSetup {
		return conformance.RoutesSetup{Routes: newMemRoutes("")}
	})
}

func TestRoutesChecksFailOnBrokenPromises(t *testing.T) {
	checks := conformance.RoutesChecks()
	for _, promise := range []string{routeListed, routeDeleted, routeCreateTwice, routeDeleteMissing, routeCluster, routeConcurrent} {
		t.Run(promise, func(t *testing.T) {
			found := false
			for _, c := range checks {
				if c.Promise == promise {
					found = true
					wantBroken(t, c.Run(t.Context(), conformance.RoutesSetup{Routes: newMemRoutes(promise)}), promise)
				}
			}
			if !found {
				t.Fatalf("the suite has no check named %q", promise)
			}
		})
	}
}
