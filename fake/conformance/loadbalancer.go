package conformance

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/diff"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/api"

	"github.com/ccmkit/ccmkit/fake/cluster"
)

// Backend is how the suite sees what a load balancer made outside the
// cluster.
type Backend interface {
	// Exists reports whether the backend holds a load balancer for svc.
	Exists(ctx context.Context, svc *v1.Service) (bool, error)
}

// LoadBalancerSetup is a fresh load balancer for one check, and how to
// drive it.
type LoadBalancerSetup struct {
	// LoadBalancer is the implementation under test, holding no load
	// balancer. Required.
	LoadBalancer cloudprovider.LoadBalancer
	// Backend inspects what LoadBalancer made; nil = checks rely on
	// GetLoadBalancer only. Backend, Forwards and Leftovers are yours:
	// they get no cluster name, so a backend keyed by cluster uses the
	// ClusterName set here (or "kubernetes").
	Backend Backend
	// ClusterName is passed to every call; "" = "kubernetes".
	ClusterName string
	// Nodes are passed to EnsureLoadBalancer and UpdateLoadBalancer; nil =
	// DefaultNodes().
	Nodes []*v1.Node
	// Service returns the i-th Service (i from 0) a check uses, in
	// namespace and named name; Services with different i must not
	// conflict (for example, different ports). Nil = DefaultService.
	Service func(namespace, name string, i int) *v1.Service
	// Elsewhere is a Service LoadBalancer leaves to another controller
	// (it returns cloudprovider.ImplementedElsewhere for it); nil = none
	// to check PromiseElsewhere with (see Skip; the other checks still
	// report a wrapped ImplementedElsewhere).
	Elsewhere *v1.Service
	// ProvokeRetry, when set, brings the implementation into a state in
	// which it asks for a retry, and returns a call (of any method, for
	// svc) that should then return an *api.RetryError, and succeed when
	// called again after its RetryAfter. Nil = no way to check
	// PromiseRetry (see Skip).
	ProvokeRetry func(ctx context.Context, svc *v1.Service) (call func() error)
	// Forwards, when set, returns what the backend forwards for svc, one
	// Forward per Service port it serves (none when it holds nothing for
	// svc). Nil = no way to check PromisePortChange and PromiseNodeChange
	// (see Skip).
	Forwards func(ctx context.Context, svc *v1.Service) ([]Forward, error)
	// Leftovers, when set, describes everything the backend holds for any
	// Service, each thing in a line of your choice (a router mapping, a
	// cloud resource's ID). Nil = PromiseNothingLeft is checked with
	// Backend and Forwards alone, which both say "gone" for a Service
	// whose resources leaked (an address never released, say): set
	// Leftovers to catch leaks. With none of the three, see Skip.
	Leftovers func(ctx context.Context) ([]string, error)
	// Class, when set, is the spec.loadBalancerClass of every Service the
	// checks use (Service's and Elsewhere), as a load balancer served by a
	// class controller (provider/lbclass) sees them; "" = Services as
	// Service and Elsewhere return them.
	Class string
	// Skip names the promises this setup leaves unchecked, by their
	// constants (PromiseElsewhere, PromiseRetry, PromisePortChange,
	// PromiseNodeChange, PromiseNothingLeft); their checks are skipped
	// when the option that checks them is unset. A check whose option is
	// unset and whose promise is not named here fails, saying which
	// option would check it. Naming any other promise is a setup error.
	Skip []string
}

// Forward is one Service port as the backend forwards it.
type Forward struct {
	Protocol v1.Protocol
	// Port is the port the load balancer serves, the Service port's Port.
	Port int32
	// NodePort is the port it forwards to on the nodes.
	NodePort int32
	// Nodes are the names of the nodes it forwards to, in any order.
	Nodes []string
}

// defaultScheme is the ProviderID scheme of DefaultNodes, which no cloud
// knows.
const defaultScheme = "conformance://"

// DefaultNodes returns two initialized Ready nodes for LoadBalancerSetup
// and RoutesSetup: node-a (InternalIP 192.168.1.10, spec.providerID
// conformance://node-a) and node-b (192.168.1.11, conformance://node-b).
// Their ProviderIDs are of no real cloud, so they are no use as
// InstancesV2Setup nodes, whose checks refuse them.
func DefaultNodes() []*v1.Node {
	return []*v1.Node{
		cluster.Node("node-a", cluster.Initialized(), cluster.InternalIP("192.168.1.10"), cluster.ProviderID(defaultScheme+"node-a")),
		cluster.Node("node-b", cluster.Initialized(), cluster.InternalIP("192.168.1.11"), cluster.ProviderID(defaultScheme+"node-b")),
	}
}

// DefaultService returns a Service of type LoadBalancer with one TCP port,
// 8080+i, forwarded to node port 30080+i.
func DefaultService(namespace, name string, i int) *v1.Service {
	return cluster.Service(namespace, name, cluster.Port("http", v1.ProtocolTCP, int32(8080+i), int32(30080+i)))
}

// The promises of a cloudprovider.LoadBalancer.
const (
	promiseIdempotent     = "EnsureLoadBalancer is idempotent"
	promiseGetAfterEnsure = "GetLoadBalancer after EnsureLoadBalancer reports it exists with the same status"
	promiseDeleteMissing  = "EnsureLoadBalancerDeleted of a missing load balancer returns nil"
	promiseGetAfterDelete = "GetLoadBalancer after EnsureLoadBalancerDeleted reports it does not exist"
	promiseReadOnly       = "Services and Nodes passed in are never modified"
	promiseConcurrent     = "Calls for different Services may run concurrently"
)

// The promises of a cloudprovider.LoadBalancer that a LoadBalancerSetup
// may leave unchecked, naming them in its Skip.
const (
	// PromiseElsewhere is checked with LoadBalancerSetup.Elsewhere; when
	// skipped, the other checks still report a wrapped ImplementedElsewhere.
	PromiseElsewhere = "ImplementedElsewhere is returned unwrapped"
	// PromiseRetry is checked with LoadBalancerSetup.ProvokeRetry.
	PromiseRetry = "A RetryError is an *api.RetryError reachable with errors.As"
	// PromisePortChange is checked with LoadBalancerSetup.Forwards.
	PromisePortChange = "EnsureLoadBalancer after a port change forwards the new ports only"
	// PromiseNodeChange is checked with LoadBalancerSetup.Forwards and at
	// least two Nodes.
	PromiseNodeChange = "UpdateLoadBalancer after a node change forwards to the nodes given only"
	// PromiseNothingLeft is checked with LoadBalancerSetup.Leftovers (or,
	// missing leaks, with Backend or Forwards alone).
	PromiseNothingLeft = "EnsureLoadBalancerDeleted leaves nothing behind"
)

// lbOptional are the promises a LoadBalancerSetup may leave unchecked.
var (
	lbElsewhere   = optional{PromiseElsewhere, "PromiseElsewhere", "set LoadBalancerSetup.Elsewhere to a Service the load balancer leaves to another controller"}
	lbRetry       = optional{PromiseRetry, "PromiseRetry", "set LoadBalancerSetup.ProvokeRetry to bring the load balancer to ask for a retry"}
	lbPortChange  = optional{PromisePortChange, "PromisePortChange", "set LoadBalancerSetup.Forwards to show what the backend forwards"}
	lbNodeChange  = optional{PromiseNodeChange, "PromiseNodeChange", "set LoadBalancerSetup.Forwards to show what the backend forwards, with two or more Nodes (nil = DefaultNodes)"}
	lbNothingLeft = optional{PromiseNothingLeft, "PromiseNothingLeft", "set LoadBalancerSetup.Leftovers to list everything the backend holds"}
	lbOptional    = []optional{lbElsewhere, lbRetry, lbPortChange, lbNodeChange, lbNothingLeft}
)

// lbRun is a LoadBalancerSetup with its defaults filled in.
type lbRun struct{ LoadBalancerSetup }

func (s *LoadBalancerSetup) withDefaults() lbRun {
	r := lbRun{*s}
	if r.ClusterName == "" {
		r.ClusterName = "kubernetes"
	}
	if r.Nodes == nil {
		r.Nodes = DefaultNodes()
	}
	if r.Service == nil {
		r.Service = DefaultService
	}
	if r.Class != "" {
		class := r.Class
		service := r.Service
		r.Service = func(namespace, name string, i int) *v1.Service {
			svc := service(namespace, name, i).DeepCopy()
			svc.Spec.LoadBalancerClass = &class
			return svc
		}
		if r.Elsewhere != nil {
			r.Elsewhere = r.Elsewhere.DeepCopy()
			r.Elsewhere.Spec.LoadBalancerClass = &class
		}
	}
	return r
}

func (r lbRun) ensure(ctx context.Context, svc *v1.Service) (*v1.LoadBalancerStatus, error) {
	return retry(ctx, "EnsureLoadBalancer "+key(svc), func() (*v1.LoadBalancerStatus, error) {
		return r.LoadBalancer.EnsureLoadBalancer(ctx, r.ClusterName, svc, r.Nodes)
	})
}

func (r lbRun) update(ctx context.Context, svc *v1.Service) error {
	return r.updateWith(ctx, svc, r.Nodes)
}

func (r lbRun) updateWith(ctx context.Context, svc *v1.Service, nodes []*v1.Node) error {
	_, err := retry(ctx, "UpdateLoadBalancer "+key(svc), func() (struct{}, error) {
		return struct{}{}, r.LoadBalancer.UpdateLoadBalancer(ctx, r.ClusterName, svc, nodes)
	})
	return err
}

func (r lbRun) delete(ctx context.Context, svc *v1.Service) error {
	_, err := retry(ctx, "EnsureLoadBalancerDeleted "+key(svc), func() (struct{}, error) {
		return struct{}{}, r.LoadBalancer.EnsureLoadBalancerDeleted(ctx, r.ClusterName, svc)
	})
	return err
}

type getResult struct {
	status *v1.LoadBalancerStatus
	exists bool
}

func (r lbRun) get(ctx context.Context, svc *v1.Service) (*v1.LoadBalancerStatus, bool, error) {
	g, err := retry(ctx, "GetLoadBalancer "+key(svc), func() (getResult, error) {
		st, ok, err := r.LoadBalancer.GetLoadBalancer(ctx, r.ClusterName, svc)
		return getResult{st, ok}, err
	})
	return g.status, g.exists, err
}

// backendExists is what Backend says, true when there is no Backend.
func (r lbRun) backendExists(ctx context.Context, svc *v1.Service, want bool) (bool, error) {
	if r.Backend == nil {
		return want, nil
	}
	return r.Backend.Exists(ctx, svc)
}

func key(svc *v1.Service) string { return svc.Namespace + "/" + svc.Name }

// LoadBalancerChecks returns the checks of the cloudprovider.LoadBalancer
// contract, one per promise.
func LoadBalancerChecks() []Check[LoadBalancerSetup] {
	checks := []Check[LoadBalancerSetup]{
		{promiseIdempotent, checkIdempotent},
		{promiseGetAfterEnsure, checkGetAfterEnsure},
		{promiseDeleteMissing, checkDeleteMissing},
		{promiseGetAfterDelete, checkGetAfterDelete},
		{PromiseElsewhere, checkElsewhere},
		{promiseReadOnly, checkReadOnly},
		{promiseConcurrent, checkConcurrent},
		{PromiseRetry, checkRetry},
		{PromisePortChange, checkPortChange},
		{PromiseNodeChange, checkNodeChange},
		{PromiseNothingLeft, checkNothingLeft},
	}
	for i := range checks {
		c := checks[i].Run
		checks[i].Run = func(ctx context.Context, s LoadBalancerSetup) error {
			if err := s.validate(); err != nil {
				return err
			}
			return c(ctx, s)
		}
	}
	return checks
}

// validate reports setup mistakes, which are not broken promises.
func (s LoadBalancerSetup) validate() error {
	if s.LoadBalancer == nil {
		return errors.New("LoadBalancerSetup.LoadBalancer is nil")
	}
	return validateSkip("LoadBalancerSetup", s.Skip, lbOptional)
}

// RunLoadBalancer runs LoadBalancerChecks as subtests of t, each on a fresh
// setup from newSetup (which may register cleanups on the testing.TB it is
// given).
func RunLoadBalancer(t *testing.T, newSetup func(testing.TB) LoadBalancerSetup) {
	t.Helper()
	run(t, LoadBalancerChecks(), newSetup)
}

func checkIdempotent(ctx context.Context, s LoadBalancerSetup) error {
	r := s.withDefaults()
	svc := r.Service("conformance", "idempotent", 0)
	first, err := r.ensure(ctx, svc)
	if err != nil {
		return err
	}
	if first == nil {
		return broken(promiseIdempotent, "the first EnsureLoadBalancer of %s returned a nil status and no error", key(svc))
	}
	second, err := r.ensure(ctx, svc)
	if err != nil {
		return broken(promiseIdempotent, "the second EnsureLoadBalancer of %s failed: %v", key(svc), err)
	}
	if !apiequality.Semantic.DeepEqual(first, second) {
		return broken(promiseIdempotent, "the second EnsureLoadBalancer of %s returned another status (-first +second):\n%s", key(svc), diff.Diff(first, second))
	}
	ok, err := r.backendExists(ctx, svc, true)
	if err != nil {
		return fmt.Errorf("backend: %w", err)
	}
	if !ok {
		return broken(promiseIdempotent, "after two EnsureLoadBalancer of %s the backend has no load balancer for it", key(svc))
	}
	return r.delete(ctx, svc)
}

func checkGetAfterEnsure(ctx context.Context, s LoadBalancerSetup) error {
	r := s.withDefaults()
	svc := r.Service("conformance", "get-after-ensure", 0)
	want, err := r.ensure(ctx, svc)
	if err != nil {
		return err
	}
	got, exists, err := r.get(ctx, svc)
	if err != nil {
		return broken(promiseGetAfterEnsure, "GetLoadBalancer failed: %v", err)
	}
	if !exists {
		return broken(promiseGetAfterEnsure, "GetLoadBalancer of %s after EnsureLoadBalancer reports it does not exist", key(svc))
	}
	if !apiequality.Semantic.DeepEqual(want, got) {
		return broken(promiseGetAfterEnsure, "GetLoadBalancer of %s reports another status than EnsureLoadBalancer returned (-ensure +get):\n%s", key(svc), diff.Diff(want, got))
	}
	return r.delete(ctx, svc)
}

func checkDeleteMissing(ctx context.Context, s LoadBalancerSetup) error {
	r := s.withDefaults()
	never := r.Service("conformance", "never-created", 0)
	if err := r.delete(ctx, never); err != nil {
		return broken(promiseDeleteMissing, "EnsureLoadBalancerDeleted of %s, never ensured: %v", key(never), err)
	}
	svc := r.Service("conformance", "deleted-twice", 1)
	if _, err := r.ensure(ctx, svc); err != nil {
		return err
	}
	if err := r.delete(ctx, svc); err != nil {
		return err
	}
	if err := r.delete(ctx, svc); err != nil {
		return broken(promiseDeleteMissing, "the second EnsureLoadBalancerDeleted of %s: %v", key(svc), err)
	}
	return nil
}

func checkGetAfterDelete(ctx context.Context, s LoadBalancerSetup) error {
	r := s.withDefaults()
	svc := r.Service("conformance", "get-after-delete", 0)
	if _, err := r.ensure(ctx, svc); err != nil {
		return err
	}
	if err := r.delete(ctx, svc); err != nil {
		return err
	}
	st, exists, err := r.get(ctx, svc)
	if err != nil {
		return broken(promiseGetAfterDelete, "GetLoadBalancer failed: %v", err)
	}
	if exists {
		return broken(promiseGetAfterDelete, "GetLoadBalancer of %s after EnsureLoadBalancerDeleted reports it exists, status %v", key(svc), st)
	}
	ok, err := r.backendExists(ctx, svc, false)
	if err != nil {
		return fmt.Errorf("backend: %w", err)
	}
	if ok {
		return broken(promiseGetAfterDelete, "after EnsureLoadBalancerDeleted of %s the backend still has a load balancer for it", key(svc))
	}
	return nil
}

func checkElsewhere(ctx context.Context, s LoadBalancerSetup) error {
	r := s.withDefaults()
	if r.Elsewhere == nil {
		return unchecked("LoadBalancerSetup", r.Skip, lbElsewhere, "LoadBalancerSetup.Elsewhere is nil")
	}
	svc := r.Elsewhere
	// retry reports a wrapped ImplementedElsewhere; the calls upstream
	// compares with == must return it as is.
	if _, err := r.ensure(ctx, svc); !errors.Is(err, cloudprovider.ImplementedElsewhere) {
		if bp := (*BrokenPromise)(nil); errors.As(err, &bp) {
			return err
		}
		return broken(PromiseElsewhere, "EnsureLoadBalancer of %s, which LoadBalancerSetup.Elsewhere says is left to another, returned %v, not cloudprovider.ImplementedElsewhere", key(svc), err)
	}
	if err := r.update(ctx, svc); err != nil && !errors.Is(err, cloudprovider.ImplementedElsewhere) {
		return err
	}
	return nil
}

func checkReadOnly(ctx context.Context, s LoadBalancerSetup) error {
	r := s.withDefaults()
	svc := r.Service("conformance", "read-only", 0)
	svcBefore := svc.DeepCopy()
	nodesBefore := make([]*v1.Node, len(r.Nodes))
	for i, n := range r.Nodes {
		nodesBefore[i] = n.DeepCopy()
	}
	compare := func(op string) error {
		if !apiequality.Semantic.DeepEqual(svcBefore, svc) {
			return broken(promiseReadOnly, "%s modified the Service (-before +after):\n%s", op, diff.Diff(svcBefore, svc))
		}
		for i := range nodesBefore {
			if !apiequality.Semantic.DeepEqual(nodesBefore[i], r.Nodes[i]) {
				return broken(promiseReadOnly, "%s modified node %s (-before +after):\n%s", op, nodesBefore[i].Name, diff.Diff(nodesBefore[i], r.Nodes[i]))
			}
		}
		if len(r.Nodes) != len(nodesBefore) {
			return broken(promiseReadOnly, "%s changed the node list", op)
		}
		return nil
	}
	steps := []struct {
		op string
		f  func() error
	}{
		{"GetLoadBalancerName", func() error { r.LoadBalancer.GetLoadBalancerName(ctx, r.ClusterName, svc); return nil }},
		{"EnsureLoadBalancer", func() error { _, err := r.ensure(ctx, svc); return err }},
		{"GetLoadBalancer", func() error { _, _, err := r.get(ctx, svc); return err }},
		{"UpdateLoadBalancer", func() error { return r.update(ctx, svc) }},
		{"EnsureLoadBalancerDeleted", func() error { return r.delete(ctx, svc) }},
	}
	for _, st := range steps {
		err := st.f()
		if err := compare(st.op); err != nil {
			return err
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// concurrency is how many Services checkConcurrent drives at once.
const concurrency = 8

func checkConcurrent(ctx context.Context, s LoadBalancerSetup) error {
	r := s.withDefaults()
	svcs := make([]*v1.Service, concurrency)
	for i := range svcs {
		svcs[i] = r.Service("conformance", fmt.Sprintf("concurrent-%d", i), i)
	}
	errs := make([]error, concurrency)
	// Every goroutine ensures its Service, waits for the others, then
	// checks its own and deletes it: cross-talk between Services shows as
	// a missing or foreign status.
	var ensured, wg sync.WaitGroup
	ensured.Add(concurrency)
	for i, svc := range svcs {
		wg.Go(func() {
			errs[i] = func() error {
				want, err := r.ensure(ctx, svc)
				ensured.Done()
				if err != nil {
					return err
				}
				ensured.Wait()
				got, exists, err := r.get(ctx, svc)
				if err != nil {
					return err
				}
				if !exists || !apiequality.Semantic.DeepEqual(want, got) {
					return broken(promiseConcurrent, "with %d Services ensured concurrently, GetLoadBalancer of %s reports exists=%t, status %v; EnsureLoadBalancer returned %v", concurrency, key(svc), exists, got, want)
				}
				if err := r.update(ctx, svc); err != nil {
					return err
				}
				return r.delete(ctx, svc)
			}()
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for _, svc := range svcs {
		_, exists, err := r.get(ctx, svc)
		if err != nil {
			return err
		}
		if exists {
			return broken(promiseConcurrent, "after concurrent EnsureLoadBalancerDeleted, %s still exists", key(svc))
		}
	}
	return nil
}

func checkRetry(ctx context.Context, s LoadBalancerSetup) error {
	r := s.withDefaults()
	if r.ProvokeRetry == nil {
		return unchecked("LoadBalancerSetup", r.Skip, lbRetry, "LoadBalancerSetup.ProvokeRetry is nil")
	}
	svc := r.Service("conformance", "retry", 0)
	call := r.ProvokeRetry(ctx, svc)
	err := call()
	var re *api.RetryError
	switch {
	case err == nil:
		return broken(PromiseRetry, "the call ProvokeRetry returned for %s succeeded", key(svc))
	case !errors.As(err, &re):
		return broken(PromiseRetry, "the call ProvokeRetry returned for %s failed with %q, in which errors.As finds no *api.RetryError: the service controller would back off instead of retrying when asked", key(svc), err)
	case re.RetryAfter() <= 0:
		return broken(PromiseRetry, "the call ProvokeRetry returned for %s failed with an *api.RetryError with RetryAfter %s", key(svc), re.RetryAfter())
	}
	if _, err := retry(ctx, "the call ProvokeRetry returned", func() (struct{}, error) { return struct{}{}, call() }); err != nil {
		return broken(PromiseRetry, "the call ProvokeRetry returned for %s, retried after RetryAfter: %v", key(svc), err)
	}
	return r.delete(ctx, svc)
}

// forwards returns what Forwards says for svc, sorted, with each Forward's
// nodes sorted.
func (r lbRun) forwards(ctx context.Context, svc *v1.Service) ([]Forward, error) {
	fs, err := r.Forwards(ctx, svc)
	if err != nil {
		return nil, fmt.Errorf("LoadBalancerSetup.Forwards of %s: %w", key(svc), err)
	}
	fs = slices.Clone(fs)
	for i := range fs {
		fs[i].Nodes = slices.Sorted(slices.Values(fs[i].Nodes))
	}
	slices.SortFunc(fs, func(a, b Forward) int {
		return cmp.Or(cmp.Compare(a.Protocol, b.Protocol), cmp.Compare(a.Port, b.Port), cmp.Compare(a.NodePort, b.NodePort))
	})
	return fs, nil
}

// ports returns the Service's ports as (protocol, port, node port) lines.
func ports(svc *v1.Service) []string {
	var out []string
	for _, p := range svc.Spec.Ports {
		out = append(out, fmt.Sprintf("%s %d->%d", p.Protocol, p.Port, p.NodePort))
	}
	slices.Sort(out)
	return out
}

func forwardedPorts(fs []Forward) []string {
	var out []string
	for _, f := range fs {
		out = append(out, fmt.Sprintf("%s %d->%d", f.Protocol, f.Port, f.NodePort))
	}
	slices.Sort(out)
	return out
}

func nodeNames(nodes []*v1.Node) []string {
	var out []string
	for _, n := range nodes {
		out = append(out, n.Name)
	}
	return out
}

func checkPortChange(ctx context.Context, s LoadBalancerSetup) error {
	r := s.withDefaults()
	if r.Forwards == nil {
		return unchecked("LoadBalancerSetup", r.Skip, lbPortChange, "LoadBalancerSetup.Forwards is nil")
	}
	svc := r.Service("conformance", "port-change", 0)
	if _, err := r.ensure(ctx, svc); err != nil {
		return err
	}
	// The Service's ports become those of another Service of the suite,
	// which no other Service of this check uses.
	changed := svc.DeepCopy()
	changed.Spec.Ports = r.Service("conformance", "port-change", 1).Spec.Ports
	if slices.Equal(ports(svc), ports(changed)) {
		return fmt.Errorf("LoadBalancerSetup.Service gives Services 0 and 1 the same ports %q", ports(svc))
	}
	// The service controller calls EnsureLoadBalancer when a Service's
	// spec changes, and UpdateLoadBalancer on its next node sync.
	for _, step := range []struct {
		op string
		f  func() error
	}{
		{"EnsureLoadBalancer", func() error { _, err := r.ensure(ctx, changed); return err }},
		{"UpdateLoadBalancer", func() error { return r.update(ctx, changed) }},
	} {
		if err := step.f(); err != nil {
			return err
		}
		fs, err := r.forwards(ctx, changed)
		if err != nil {
			return err
		}
		if got, want := forwardedPorts(fs), ports(changed); !slices.Equal(got, want) {
			return broken(PromisePortChange, "after %s of %s with ports changed from %q to %q, the backend forwards %q", step.op, key(svc), ports(svc), want, got)
		}
	}
	return r.delete(ctx, changed)
}

func checkNodeChange(ctx context.Context, s LoadBalancerSetup) error {
	r := s.withDefaults()
	if r.Forwards == nil {
		return unchecked("LoadBalancerSetup", r.Skip, lbNodeChange, "LoadBalancerSetup.Forwards is nil")
	}
	if len(r.Nodes) < 2 {
		return unchecked("LoadBalancerSetup", r.Skip, lbNodeChange, "LoadBalancerSetup.Nodes has fewer than two nodes")
	}
	svc := r.Service("conformance", "node-change", 0)
	if _, err := r.ensure(ctx, svc); err != nil {
		return err
	}
	// A node leaves, then another: each time the forwards go to the
	// nodes given, and to at least one.
	for _, nodes := range [][]*v1.Node{r.Nodes[1:], r.Nodes[:1]} {
		if err := r.updateWith(ctx, svc, nodes); err != nil {
			return err
		}
		fs, err := r.forwards(ctx, svc)
		if err != nil {
			return err
		}
		if got, want := forwardedPorts(fs), ports(svc); !slices.Equal(got, want) {
			return broken(PromiseNodeChange, "after UpdateLoadBalancer of %s with nodes %q, the backend forwards ports %q, want %q", key(svc), nodeNames(nodes), got, want)
		}
		given := nodeNames(nodes)
		for _, f := range fs {
			if len(f.Nodes) == 0 {
				return broken(PromiseNodeChange, "after UpdateLoadBalancer of %s with nodes %q, the backend forwards %s %d to no node", key(svc), given, f.Protocol, f.Port)
			}
			for _, n := range f.Nodes {
				if !slices.Contains(given, n) {
					return broken(PromiseNodeChange, "after UpdateLoadBalancer of %s with nodes %q, the backend forwards %s %d to node %s, which was removed", key(svc), given, f.Protocol, f.Port, n)
				}
			}
		}
	}
	return r.delete(ctx, svc)
}

func checkNothingLeft(ctx context.Context, s LoadBalancerSetup) error {
	r := s.withDefaults()
	if r.Forwards == nil && r.Leftovers == nil && r.Backend == nil {
		return unchecked("LoadBalancerSetup", r.Skip, lbNothingLeft, "LoadBalancerSetup has no Backend, Forwards or Leftovers to inspect the backend with")
	}
	svc := r.Service("conformance", "nothing-left", 0)
	if _, err := r.ensure(ctx, svc); err != nil {
		return err
	}
	// A Service's life: its ports change, a node leaves, it is deleted.
	changed := svc.DeepCopy()
	changed.Spec.Ports = r.Service("conformance", "nothing-left", 1).Spec.Ports
	if _, err := r.ensure(ctx, changed); err != nil {
		return err
	}
	if len(r.Nodes) > 1 {
		if err := r.updateWith(ctx, changed, r.Nodes[1:]); err != nil {
			return err
		}
	}
	if err := r.delete(ctx, changed); err != nil {
		return err
	}
	if ok, err := r.backendExists(ctx, changed, false); err != nil {
		return fmt.Errorf("backend: %w", err)
	} else if ok {
		return broken(PromiseNothingLeft, "after EnsureLoadBalancerDeleted of %s the backend still has a load balancer for it", key(svc))
	}
	if r.Forwards != nil {
		for _, v := range []*v1.Service{svc, changed} {
			fs, err := r.forwards(ctx, v)
			if err != nil {
				return err
			}
			if len(fs) > 0 {
				return broken(PromiseNothingLeft, "after EnsureLoadBalancerDeleted of %s the backend still forwards %q", key(svc), forwardedPorts(fs))
			}
		}
	}
	if r.Leftovers != nil {
		left, err := r.Leftovers(ctx)
		if err != nil {
			return fmt.Errorf("LoadBalancerSetup.Leftovers: %w", err)
		}
		if len(left) > 0 {
			return broken(PromiseNothingLeft, "after EnsureLoadBalancerDeleted of %s, the only Service, whose ports and nodes had changed, the backend still holds %q", key(svc), left)
		}
	}
	return nil
}
