package fake

import (
	"cmp"
	"context"
	"net/netip"
	"slices"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"
)

// Names of the cloudprovider.LoadBalancer methods, as recorded in
// LoadBalancerCall.Method.
const (
	MethodEnsureLoadBalancer        = "EnsureLoadBalancer"
	MethodUpdateLoadBalancer        = "UpdateLoadBalancer"
	MethodEnsureLoadBalancerDeleted = "EnsureLoadBalancerDeleted"
	MethodGetLoadBalancer           = "GetLoadBalancer"
	MethodGetLoadBalancerName       = "GetLoadBalancerName"
)

// LoadBalancerCall is one call a LoadBalancer received.
type LoadBalancerCall struct {
	// Method is the cloudprovider.LoadBalancer method name.
	Method string
	// ClusterName is the clusterName argument.
	ClusterName string
	// Service names the Service the call was about (nil Service: empty).
	Service types.NamespacedName
	// Nodes are the names of the nodes passed to EnsureLoadBalancer and
	// UpdateLoadBalancer, in the order given (nil for other methods).
	Nodes []string
	// Err is what the call returned.
	Err error
}

// LoadBalancer is a recording fake of cloudprovider.LoadBalancer for tests
// of CCM wiring. It keeps one load balancer per Service (by namespace and
// name): EnsureLoadBalancer creates or updates it with a status holding
// IngressIP, EnsureLoadBalancerDeleted removes it, GetLoadBalancer reports
// it. Errors, delays and other answers are injected with Intercept. It never
// modifies its arguments, returns copies, and is safe for concurrent use.
// Create it with NewLoadBalancer.
type LoadBalancer struct {
	// mu guards every field below it.
	mu        sync.Mutex
	ingressIP netip.Addr
	lbs       map[types.NamespacedName]*v1.LoadBalancerStatus
	hooks     []LoadBalancerHooks // newest first
	calls     []LoadBalancerCall
}

var _ cloudprovider.LoadBalancer = (*LoadBalancer)(nil)

// NewLoadBalancer returns a LoadBalancer with no load balancers whose
// statuses report ingressIP (zero means DefaultExternalIP).
func NewLoadBalancer(ingressIP netip.Addr) *LoadBalancer {
	if !ingressIP.IsValid() {
		ingressIP = DefaultExternalIP
	}
	return &LoadBalancer{
		ingressIP: ingressIP,
		lbs:       make(map[types.NamespacedName]*v1.LoadBalancerStatus),
	}
}

// The next functions a LoadBalancerHooks hook is given: each passes the
// call on, as it is or changed, to the hooks added before and then to the
// fake's load balancers, and returns their answer.
type (
	GetLoadBalancerFunc           func(ctx context.Context, clusterName string, service *v1.Service) (*v1.LoadBalancerStatus, bool, error)
	EnsureLoadBalancerFunc        func(ctx context.Context, clusterName string, service *v1.Service, nodes []*v1.Node) (*v1.LoadBalancerStatus, error)
	UpdateLoadBalancerFunc        func(ctx context.Context, clusterName string, service *v1.Service, nodes []*v1.Node) error
	EnsureLoadBalancerDeletedFunc func(ctx context.Context, clusterName string, service *v1.Service) error
)

// LoadBalancerHooks intercept calls to a LoadBalancer, one field per
// cloudprovider.LoadBalancer method that can fail, in the idiom of the
// Router's RouterHooks: a nil field lets its calls through; a hook gets the
// call's arguments and next, and may pass the call on (changed or not) or
// answer it itself. A call a hook fails before passing it on changes no load
// balancer (one that fails after next returned keeps what next did). Hooks run
// outside the LoadBalancer's lock and may block; they should honour ctx.
// Every call is logged with the error it finally returned.
type LoadBalancerHooks struct {
	GetLoadBalancer           func(ctx context.Context, clusterName string, service *v1.Service, next GetLoadBalancerFunc) (*v1.LoadBalancerStatus, bool, error)
	EnsureLoadBalancer        func(ctx context.Context, clusterName string, service *v1.Service, nodes []*v1.Node, next EnsureLoadBalancerFunc) (*v1.LoadBalancerStatus, error)
	UpdateLoadBalancer        func(ctx context.Context, clusterName string, service *v1.Service, nodes []*v1.Node, next UpdateLoadBalancerFunc) error
	EnsureLoadBalancerDeleted func(ctx context.Context, clusterName string, service *v1.Service, next EnsureLoadBalancerDeletedFunc) error
}

// Intercept puts h in front of every hook added before: h's hooks run
// first, and their next reaches the earlier ones, then the fake's load
// balancers. Hooks stay until ClearHooks.
func (lb *LoadBalancer) Intercept(h LoadBalancerHooks) {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	lb.hooks = append([]LoadBalancerHooks{h}, lb.hooks...)
}

// ClearHooks removes every hook.
func (lb *LoadBalancer) ClearHooks() {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	lb.hooks = nil
}

// layers returns the hooks, newest first.
func (lb *LoadBalancer) layers() []LoadBalancerHooks {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	return slices.Clone(lb.hooks)
}

// record logs a call.
func (lb *LoadBalancer) record(method, clusterName string, service *v1.Service, nodes []*v1.Node, err error) {
	call := LoadBalancerCall{Method: method, ClusterName: clusterName, Service: serviceName(service), Err: err}
	if nodes != nil {
		call.Nodes = make([]string, 0, len(nodes))
		for _, n := range nodes {
			if n != nil {
				call.Nodes = append(call.Nodes, n.Name)
			}
		}
	}
	lb.mu.Lock()
	defer lb.mu.Unlock()
	lb.calls = append(lb.calls, call)
}

// SetExternalIP changes the address later EnsureLoadBalancer calls report;
// the zero Addr restores DefaultExternalIP, as in NewLoadBalancer.
func (lb *LoadBalancer) SetExternalIP(a netip.Addr) {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	if !a.IsValid() {
		a = DefaultExternalIP
	}
	lb.ingressIP = a
}

// Calls returns a copy of the call log, oldest first.
func (lb *LoadBalancer) Calls() []LoadBalancerCall {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	out := make([]LoadBalancerCall, len(lb.calls))
	for i, c := range lb.calls {
		c.Nodes = slices.Clone(c.Nodes)
		out[i] = c
	}
	return out
}

// CallCount returns how many calls of method the log holds.
func (lb *LoadBalancer) CallCount(method string) int {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	n := 0
	for _, c := range lb.calls {
		if c.Method == method {
			n++
		}
	}
	return n
}

// ResetCalls empties the call log.
func (lb *LoadBalancer) ResetCalls() {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	lb.calls = nil
}

// Status returns a copy of the status of the Service's load balancer and
// whether it exists.
func (lb *LoadBalancer) Status(service types.NamespacedName) (*v1.LoadBalancerStatus, bool) {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	st, ok := lb.lbs[service]
	if !ok {
		return nil, false
	}
	return st.DeepCopy(), true
}

// Services returns the Services that have a load balancer, sorted.
func (lb *LoadBalancer) Services() []types.NamespacedName {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	out := make([]types.NamespacedName, 0, len(lb.lbs))
	for k := range lb.lbs {
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b types.NamespacedName) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	return out
}

// GetLoadBalancer reports whether the Service has a load balancer and its
// status (a copy).
func (lb *LoadBalancer) GetLoadBalancer(ctx context.Context, clusterName string, service *v1.Service) (*v1.LoadBalancerStatus, bool, error) {
	next := chain[LoadBalancerHooks, GetLoadBalancerFunc](lb.layers(), lb.get, func(h LoadBalancerHooks, next GetLoadBalancerFunc) (GetLoadBalancerFunc, bool) {
		f := h.GetLoadBalancer
		return func(ctx context.Context, clusterName string, service *v1.Service) (*v1.LoadBalancerStatus, bool, error) {
			return f(ctx, clusterName, service, next)
		}, f != nil
	})
	st, ok, err := next(ctx, clusterName, service)
	lb.record(MethodGetLoadBalancer, clusterName, service, nil, err)
	if err != nil {
		return nil, false, err
	}
	return st, ok, nil
}

func (lb *LoadBalancer) get(_ context.Context, _ string, service *v1.Service) (*v1.LoadBalancerStatus, bool, error) {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	st, ok := lb.lbs[serviceName(service)]
	if !ok {
		return nil, false, nil
	}
	return st.DeepCopy(), true, nil
}

// GetLoadBalancerName returns cloudprovider.DefaultLoadBalancerName for the
// Service. The call is logged; no hook sees it (it returns no error).
func (lb *LoadBalancer) GetLoadBalancerName(_ context.Context, clusterName string, service *v1.Service) string {
	lb.record(MethodGetLoadBalancerName, clusterName, service, nil, nil)
	if service == nil {
		return ""
	}
	return cloudprovider.DefaultLoadBalancerName(service)
}

// EnsureLoadBalancer creates or updates the Service's load balancer and
// returns its status (a copy): one ingress entry with the ingress IP.
func (lb *LoadBalancer) EnsureLoadBalancer(ctx context.Context, clusterName string, service *v1.Service, nodes []*v1.Node) (*v1.LoadBalancerStatus, error) {
	next := chain[LoadBalancerHooks, EnsureLoadBalancerFunc](lb.layers(), lb.ensure, func(h LoadBalancerHooks, next EnsureLoadBalancerFunc) (EnsureLoadBalancerFunc, bool) {
		f := h.EnsureLoadBalancer
		return func(ctx context.Context, clusterName string, service *v1.Service, nodes []*v1.Node) (*v1.LoadBalancerStatus, error) {
			return f(ctx, clusterName, service, nodes, next)
		}, f != nil
	})
	st, err := next(ctx, clusterName, service, nodes)
	lb.record(MethodEnsureLoadBalancer, clusterName, service, nodes, err)
	if err != nil {
		return nil, err
	}
	return st, nil
}

func (lb *LoadBalancer) ensure(_ context.Context, _ string, service *v1.Service, _ []*v1.Node) (*v1.LoadBalancerStatus, error) {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	st := &v1.LoadBalancerStatus{Ingress: []v1.LoadBalancerIngress{{IP: lb.ingressIP.String()}}}
	lb.lbs[serviceName(service)] = st
	return st.DeepCopy(), nil
}

// UpdateLoadBalancer records the call; the load balancer's status does not
// change.
func (lb *LoadBalancer) UpdateLoadBalancer(ctx context.Context, clusterName string, service *v1.Service, nodes []*v1.Node) error {
	next := chain[LoadBalancerHooks, UpdateLoadBalancerFunc](lb.layers(), func(context.Context, string, *v1.Service, []*v1.Node) error { return nil },
		func(h LoadBalancerHooks, next UpdateLoadBalancerFunc) (UpdateLoadBalancerFunc, bool) {
			f := h.UpdateLoadBalancer
			return func(ctx context.Context, clusterName string, service *v1.Service, nodes []*v1.Node) error {
				return f(ctx, clusterName, service, nodes, next)
			}, f != nil
		})
	err := next(ctx, clusterName, service, nodes)
	lb.record(MethodUpdateLoadBalancer, clusterName, service, nodes, err)
	return err
}

// EnsureLoadBalancerDeleted removes the Service's load balancer; deleting
// one that does not exist succeeds.
func (lb *LoadBalancer) EnsureLoadBalancerDeleted(ctx context.Context, clusterName string, service *v1.Service) error {
	next := chain[LoadBalancerHooks, EnsureLoadBalancerDeletedFunc](lb.layers(), lb.remove, func(h LoadBalancerHooks, next EnsureLoadBalancerDeletedFunc) (EnsureLoadBalancerDeletedFunc, bool) {
		f := h.EnsureLoadBalancerDeleted
		return func(ctx context.Context, clusterName string, service *v1.Service) error {
			return f(ctx, clusterName, service, next)
		}, f != nil
	})
	err := next(ctx, clusterName, service)
	lb.record(MethodEnsureLoadBalancerDeleted, clusterName, service, nil, err)
	return err
}

func (lb *LoadBalancer) remove(_ context.Context, _ string, service *v1.Service) error {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	delete(lb.lbs, serviceName(service))
	return nil
}

// serviceName returns the namespace and name of service (empty for nil).
func serviceName(service *v1.Service) types.NamespacedName {
	if service == nil {
		return types.NamespacedName{}
	}
	return types.NamespacedName{Namespace: service.Namespace, Name: service.Name}
}
