package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"

	v1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"
)

// errStopped is what a controller's call to the cloud gets after Stop.
var errStopped = errors.New("cluster: the harness is stopped")

// gate lets the controllers' calls through to the cloud until Stop, which
// waits for those in flight; later calls fail without reaching the cloud.
// Upstream's controllers run workers that nobody can wait for (they end
// moments after their Run returns); the gate is what keeps them from
// calling a test's cloud once Stop has returned.
type gate struct {
	mu       sync.Mutex
	stopped  bool
	inflight sync.WaitGroup
}

// enter admits one call; the caller must call the returned func when it
// ends.
func (g *gate) enter() (func(), error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped {
		return nil, errStopped
	}
	g.inflight.Add(1)
	return g.inflight.Done, nil
}

// close refuses every later call and waits for those in flight.
func (g *gate) close() {
	g.mu.Lock()
	g.stopped = true
	g.mu.Unlock()
	g.inflight.Wait()
}

// through runs call through g, or fails with errStopped.
func through[T any](g *gate, call func() (T, error)) (T, error) {
	leave, err := g.enter()
	if err != nil {
		var zero T
		return zero, err
	}
	defer leave()
	return call()
}

// nodeErrors keeps the last error the cloud's InstancesV2 returned for
// each node, by node name: upstream's cloud node controller records no
// event when it cannot initialize a node, so a wait that times out says
// why from here.
type nodeErrors struct {
	mu   sync.Mutex
	last map[string]error
}

// record keeps err (when not nil) as node's last error.
func (e *nodeErrors) record(node *v1.Node, op string, err error) {
	if err == nil || node == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.last == nil {
		e.last = map[string]error{}
	}
	e.last[node.Name] = fmt.Errorf("%s: %w", op, err)
}

// get returns node's last error, or nil.
func (e *nodeErrors) get(name string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.last[name]
}

// gatedCloud is the cloud as the controllers see it: its LoadBalancer,
// InstancesV2 and Routes calls go through the gate, and InstancesV2's
// errors are kept in errs. The deprecated Instances and Zones are passed as
// they are.
type gatedCloud struct {
	cloudprovider.Interface
	g    *gate
	errs *nodeErrors
}

func (c gatedCloud) LoadBalancer() (cloudprovider.LoadBalancer, bool) {
	lb, ok := c.Interface.LoadBalancer()
	if !ok || lb == nil {
		return lb, ok
	}
	return gatedLoadBalancer{lb, c.g}, true
}

func (c gatedCloud) InstancesV2() (cloudprovider.InstancesV2, bool) {
	i, ok := c.Interface.InstancesV2()
	if !ok || i == nil {
		return i, ok
	}
	return gatedInstancesV2{i, c.g, c.errs}, true
}

func (c gatedCloud) Routes() (cloudprovider.Routes, bool) {
	r, ok := c.Interface.Routes()
	if !ok || r == nil {
		return r, ok
	}
	return gatedRoutes{r, c.g}, true
}

type gatedLoadBalancer struct {
	lb cloudprovider.LoadBalancer
	g  *gate
}

type none struct{}

func (l gatedLoadBalancer) GetLoadBalancer(ctx context.Context, clusterName string, service *v1.Service) (*v1.LoadBalancerStatus, bool, error) {
	var exists bool
	st, err := through(l.g, func() (st *v1.LoadBalancerStatus, err error) {
		st, exists, err = l.lb.GetLoadBalancer(ctx, clusterName, service)
		return st, err
	})
	return st, exists, err
}

func (l gatedLoadBalancer) GetLoadBalancerName(ctx context.Context, clusterName string, service *v1.Service) string {
	return l.lb.GetLoadBalancerName(ctx, clusterName, service)
}

func (l gatedLoadBalancer) EnsureLoadBalancer(ctx context.Context, clusterName string, service *v1.Service, nodes []*v1.Node) (*v1.LoadBalancerStatus, error) {
	return through(l.g, func() (*v1.LoadBalancerStatus, error) {
		return l.lb.EnsureLoadBalancer(ctx, clusterName, service, nodes)
	})
}

func (l gatedLoadBalancer) UpdateLoadBalancer(ctx context.Context, clusterName string, service *v1.Service, nodes []*v1.Node) error {
	_, err := through(l.g, func() (none, error) {
		return none{}, l.lb.UpdateLoadBalancer(ctx, clusterName, service, nodes)
	})
	return err
}

func (l gatedLoadBalancer) EnsureLoadBalancerDeleted(ctx context.Context, clusterName string, service *v1.Service) error {
	_, err := through(l.g, func() (none, error) {
		return none{}, l.lb.EnsureLoadBalancerDeleted(ctx, clusterName, service)
	})
	return err
}

type gatedInstancesV2 struct {
	i    cloudprovider.InstancesV2
	g    *gate
	errs *nodeErrors
}

func (i gatedInstancesV2) InstanceExists(ctx context.Context, node *v1.Node) (bool, error) {
	return through(i.g, func() (bool, error) {
		ok, err := i.i.InstanceExists(ctx, node)
		i.errs.record(node, "InstanceExists", err)
		return ok, err
	})
}

func (i gatedInstancesV2) InstanceShutdown(ctx context.Context, node *v1.Node) (bool, error) {
	return through(i.g, func() (bool, error) {
		ok, err := i.i.InstanceShutdown(ctx, node)
		i.errs.record(node, "InstanceShutdown", err)
		return ok, err
	})
}

func (i gatedInstancesV2) InstanceMetadata(ctx context.Context, node *v1.Node) (*cloudprovider.InstanceMetadata, error) {
	return through(i.g, func() (*cloudprovider.InstanceMetadata, error) {
		md, err := i.i.InstanceMetadata(ctx, node)
		i.errs.record(node, "InstanceMetadata", err)
		return md, err
	})
}

type gatedRoutes struct {
	r cloudprovider.Routes
	g *gate
}

func (r gatedRoutes) ListRoutes(ctx context.Context, clusterName string) ([]*cloudprovider.Route, error) {
	return through(r.g, func() ([]*cloudprovider.Route, error) { return r.r.ListRoutes(ctx, clusterName) })
}

func (r gatedRoutes) CreateRoute(ctx context.Context, clusterName string, nameHint string, route *cloudprovider.Route) error {
	_, err := through(r.g, func() (none, error) { return none{}, r.r.CreateRoute(ctx, clusterName, nameHint, route) })
	return err
}

func (r gatedRoutes) DeleteRoute(ctx context.Context, clusterName string, route *cloudprovider.Route) error {
	_, err := through(r.g, func() (none, error) { return none{}, r.r.DeleteRoute(ctx, clusterName, route) })
	return err
}
