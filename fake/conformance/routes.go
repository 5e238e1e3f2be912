package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"
)

// RoutesSetup is a fresh route table for one check.
type RoutesSetup struct {
	// Routes is the implementation under test, holding no route of
	// ClusterName nor of the other cluster the checks use
	// (ClusterName+"-other"). Required.
	Routes cloudprovider.Routes
	// ClusterName is passed to every call; "" = "kubernetes".
	ClusterName string
	// Nodes are the nodes routes go to, as the route controller names
	// them (TargetNode, TargetNodeAddresses); nil = DefaultNodes().
	Nodes []*v1.Node
}

// The promises of a cloudprovider.Routes, as upstream's route controller
// relies on them: it lists the cluster's routes, creates the missing ones
// and deletes those to no node, each in its own goroutine.
const (
	promiseRouteListed        = "ListRoutes after CreateRoute lists the route with its TargetNode and DestinationCIDR"
	promiseRouteDeleted       = "ListRoutes after DeleteRoute of a listed route no longer lists it"
	promiseRouteCreateTwice   = "CreateRoute of a route that exists returns nil and leaves one route"
	promiseRouteDeleteMissing = "DeleteRoute of a route already deleted returns nil"
	promiseRouteCluster       = "ListRoutes lists only the routes of its cluster"
	promiseRouteConcurrent    = "Route calls may run concurrently"
)

// RoutesChecks returns the checks of the cloudprovider.Routes contract,
// one per promise.
func RoutesChecks() []Check[RoutesSetup] {
	return []Check[RoutesSetup]{
		{promiseRouteListed, checkRouteListed},
		{promiseRouteDeleted, checkRouteDeleted},
		{promiseRouteCreateTwice, checkRouteCreateTwice},
		{promiseRouteDeleteMissing, checkRouteDeleteMissing},
		{promiseRouteCluster, checkRouteCluster},
		{promiseRouteConcurrent, checkRouteConcurrent},
	}
}

// RunRoutes runs RoutesChecks as subtests of t, each on a fresh setup from
// newSetup.
func RunRoutes(t *testing.T, newSetup func(testing.TB) RoutesSetup) {
	t.Helper()
	run(t, RoutesChecks(), newSetup)
}

// routesRun is a RoutesSetup with its defaults filled in.
type routesRun struct{ RoutesSetup }

func (s RoutesSetup) withDefaults() routesRun {
	r := routesRun{s}
	if r.ClusterName == "" {
		r.ClusterName = "kubernetes"
	}
	if r.Nodes == nil {
		r.Nodes = DefaultNodes()
	}
	return r
}

// route returns the i-th route the checks use, as the route controller
// builds it: to node i (modulo the nodes), for the pod CIDR 10.244.i.0/24,
// with the node's UID as the name hint.
func (r routesRun) route(i int) (nameHint string, rt *cloudprovider.Route) {
	n := r.Nodes[i%len(r.Nodes)]
	return string(n.UID), &cloudprovider.Route{
		TargetNode:          types.NodeName(n.Name),
		TargetNodeAddresses: n.Status.Addresses,
		DestinationCIDR:     fmt.Sprintf("10.244.%d.0/24", i),
	}
}

func describeRoute(rt *cloudprovider.Route) string {
	return fmt.Sprintf("%s -> node %s", rt.DestinationCIDR, rt.TargetNode)
}

func (r routesRun) create(ctx context.Context, cluster string, i int) (*cloudprovider.Route, error) {
	hint, rt := r.route(i)
	_, err := retry(ctx, "CreateRoute "+describeRoute(rt), func() (struct{}, error) {
		return struct{}{}, r.Routes.CreateRoute(ctx, cluster, hint, rt)
	})
	return rt, err
}

func (r routesRun) list(ctx context.Context, cluster string) ([]*cloudprovider.Route, error) {
	return retry(ctx, "ListRoutes "+cluster, func() ([]*cloudprovider.Route, error) {
		return r.Routes.ListRoutes(ctx, cluster)
	})
}

func (r routesRun) delete(ctx context.Context, cluster string, rt *cloudprovider.Route) error {
	_, err := retry(ctx, "DeleteRoute "+describeRoute(rt), func() (struct{}, error) {
		return struct{}{}, r.Routes.DeleteRoute(ctx, cluster, rt)
	})
	return err
}

// matching returns the listed routes with want's TargetNode and
// DestinationCIDR.
func matching(listed []*cloudprovider.Route, want *cloudprovider.Route) []*cloudprovider.Route {
	var out []*cloudprovider.Route
	for _, rt := range listed {
		if rt != nil && rt.TargetNode == want.TargetNode && rt.DestinationCIDR == want.DestinationCIDR {
			out = append(out, rt)
		}
	}
	return out
}

func describeRoutes(routes []*cloudprovider.Route) []string {
	out := make([]string, 0, len(routes))
	for _, rt := range routes {
		if rt == nil {
			out = append(out, "<nil>")
			continue
		}
		out = append(out, describeRoute(rt))
	}
	slices.Sort(out)
	return out
}

func checkRouteListed(ctx context.Context, s RoutesSetup) error {
	r := s.withDefaults()
	var created []*cloudprovider.Route
	for i := range 2 {
		rt, err := r.create(ctx, r.ClusterName, i)
		if err != nil {
			return err
		}
		created = append(created, rt)
	}
	listed, err := r.list(ctx, r.ClusterName)
	if err != nil {
		return broken(promiseRouteListed, "%v", err)
	}
	for _, rt := range created {
		if len(matching(listed, rt)) == 0 {
			return broken(promiseRouteListed, "after CreateRoute of %s, ListRoutes lists %q: the route controller would create it again on every pass", describeRoute(rt), describeRoutes(listed))
		}
	}
	return nil
}

func checkRouteDeleted(ctx context.Context, s RoutesSetup) error {
	r := s.withDefaults()
	kept, err := r.create(ctx, r.ClusterName, 0)
	if err != nil {
		return err
	}
	gone, err := r.create(ctx, r.ClusterName, 1)
	if err != nil {
		return err
	}
	listed, err := r.list(ctx, r.ClusterName)
	if err != nil {
		return err
	}
	// The route controller deletes the route as ListRoutes gave it.
	for _, rt := range matching(listed, gone) {
		if err := r.delete(ctx, r.ClusterName, rt); err != nil {
			return broken(promiseRouteDeleted, "DeleteRoute of listed route %s: %v", describeRoute(rt), err)
		}
	}
	listed, err = r.list(ctx, r.ClusterName)
	if err != nil {
		return err
	}
	if m := matching(listed, gone); len(m) > 0 {
		return broken(promiseRouteDeleted, "after DeleteRoute of %s, ListRoutes still lists %q", describeRoute(gone), describeRoutes(listed))
	}
	if len(matching(listed, kept)) == 0 {
		return broken(promiseRouteDeleted, "after DeleteRoute of %s, ListRoutes no longer lists %s, which was not deleted: %q", describeRoute(gone), describeRoute(kept), describeRoutes(listed))
	}
	return nil
}

func checkRouteCreateTwice(ctx context.Context, s RoutesSetup) error {
	r := s.withDefaults()
	rt, err := r.create(ctx, r.ClusterName, 0)
	if err != nil {
		return err
	}
	if _, err := r.create(ctx, r.ClusterName, 0); err != nil {
		return broken(promiseRouteCreateTwice, "the second CreateRoute of %s: %v", describeRoute(rt), err)
	}
	listed, err := r.list(ctx, r.ClusterName)
	if err != nil {
		return err
	}
	if n := len(matching(listed, rt)); n != 1 {
		return broken(promiseRouteCreateTwice, "after two CreateRoute of %s, ListRoutes lists it %d times: %q", describeRoute(rt), n, describeRoutes(listed))
	}
	return nil
}

func checkRouteDeleteMissing(ctx context.Context, s RoutesSetup) error {
	r := s.withDefaults()
	if _, err := r.create(ctx, r.ClusterName, 0); err != nil {
		return err
	}
	listed, err := r.list(ctx, r.ClusterName)
	if err != nil {
		return err
	}
	if len(listed) == 0 {
		return broken(promiseRouteListed, "after CreateRoute, ListRoutes lists nothing")
	}
	rt := listed[0]
	if err := r.delete(ctx, r.ClusterName, rt); err != nil {
		return err
	}
	if err := r.delete(ctx, r.ClusterName, rt); err != nil {
		return broken(promiseRouteDeleteMissing, "the second DeleteRoute of %s: %v", describeRoute(rt), err)
	}
	return nil
}

func checkRouteCluster(ctx context.Context, s RoutesSetup) error {
	r := s.withDefaults()
	other := r.ClusterName + "-other"
	mine, err := r.create(ctx, r.ClusterName, 0)
	if err != nil {
		return err
	}
	theirs, err := r.create(ctx, other, 1)
	if err != nil {
		return err
	}
	listed, err := r.list(ctx, r.ClusterName)
	if err != nil {
		return err
	}
	if len(matching(listed, theirs)) > 0 {
		return broken(promiseRouteCluster, "ListRoutes of cluster %q lists %s, created for cluster %q: its route controller would delete it, as a route to no node of its own", r.ClusterName, describeRoute(theirs), other)
	}
	if len(matching(listed, mine)) == 0 {
		return broken(promiseRouteListed, "after CreateRoute of %s, ListRoutes lists %q", describeRoute(mine), describeRoutes(listed))
	}
	return nil
}

// routeConcurrency is how many routes checkRouteConcurrent creates, then
// deletes, at once.
const routeConcurrency = 8

func checkRouteConcurrent(ctx context.Context, s RoutesSetup) error {
	r := s.withDefaults()
	errs := make([]error, routeConcurrency)
	want := make([]*cloudprovider.Route, routeConcurrency)
	var wg sync.WaitGroup
	for i := range routeConcurrency {
		wg.Go(func() { want[i], errs[i] = r.create(ctx, r.ClusterName, i) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	listed, err := r.list(ctx, r.ClusterName)
	if err != nil {
		return err
	}
	for _, rt := range want {
		if n := len(matching(listed, rt)); n != 1 {
			return broken(promiseRouteConcurrent, "after %d concurrent CreateRoute calls, ListRoutes lists %s %d times: %q", routeConcurrency, describeRoute(rt), n, describeRoutes(listed))
		}
	}
	errs = make([]error, len(listed))
	for i, rt := range listed {
		wg.Go(func() { errs[i] = r.delete(ctx, r.ClusterName, rt) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	listed, err = r.list(ctx, r.ClusterName)
	if err != nil {
		return err
	}
	if len(listed) != 0 {
		return broken(promiseRouteConcurrent, "after %d concurrent DeleteRoute calls, ListRoutes lists %q", routeConcurrency, describeRoutes(listed))
	}
	return nil
}
