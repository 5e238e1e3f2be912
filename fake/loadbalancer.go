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
// LoadBalancerCall.Method and accepted by LoadBalancer.SetError.
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
// it. Errors are injected per method. It never modifies its arguments,
// returns copies, and is safe for concurrent use. Create it with
// NewLoadBalancer.
type LoadBalancer struct {
	// mu guards every field below it.
	mu        sync.Mutex
	ingressIP netip.Addr
	lbs       map[types.NamespacedName]*v1.LoadBalancerStatus
	errs      map[string]error
	nextErrs  map[string][]error
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
		errs:      make(map[string]error),
		nextErrs:  make(map[string][]error),
	}
}

// SetError makes every later call of method fail with err (nil clears it).
// A failing call changes no state.
func (lb *LoadBalancer) SetError(method string, err error) {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	if err == nil {
		delete(lb.errs, method)
		return
	}
	lb.errs[method] = err
}

// FailNext makes the next call of method fail with err, once. Several
// FailNext errors for one method are returned in the order given, before
// any SetError error.
func (lb *LoadBalancer) FailNext(method string, err error) {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	lb.nextErrs[method] = append(lb.nextErrs[method], err)
}

// SetIngressIP changes the address later EnsureLoadBalancer calls report;
// the zero Addr restores DefaultExternalIP, as in NewLoadBalancer.
func (lb *LoadBalancer) SetIngressIP(a netip.Addr) {
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
func (lb *LoadBalancer) GetLoadBalancer(_ context.Context, clusterName string, service *v1.Service) (*v1.LoadBalancerStatus, bool, error) {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	call := lb.beginLocked(MethodGetLoadBalancer, clusterName, service, nil)
	lb.calls = append(lb.calls, call)
	if call.Err != nil {
		return nil, false, call.Err
	}
	st, ok := lb.lbs[call.Service]
	if !ok {
		return nil, false, nil
	}
	return st.DeepCopy(), true, nil
}

// GetLoadBalancerName returns cloudprovider.DefaultLoadBalancerName for the
// Service. The call is logged; SetError has no effect on it (it returns no
// error).
func (lb *LoadBalancer) GetLoadBalancerName(_ context.Context, clusterName string, service *v1.Service) string {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	lb.calls = append(lb.calls, LoadBalancerCall{Method: MethodGetLoadBalancerName, ClusterName: clusterName, Service: serviceName(service)})
	if service == nil {
		return ""
	}
	return cloudprovider.DefaultLoadBalancerName(service)
}

// EnsureLoadBalancer creates or updates the Service's load balancer and
// returns its status (a copy): one ingress entry with the ingress IP.
func (lb *LoadBalancer) EnsureLoadBalancer(_ context.Context, clusterName string, service *v1.Service, nodes []*v1.Node) (*v1.LoadBalancerStatus, error) {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	call := lb.beginLocked(MethodEnsureLoadBalancer, clusterName, service, nodes)
	lb.calls = append(lb.calls, call)
	if call.Err != nil {
		return nil, call.Err
	}
	st := &v1.LoadBalancerStatus{Ingress: []v1.LoadBalancerIngress{{IP: lb.ingressIP.String()}}}
	lb.lbs[call.Service] = st
	return st.DeepCopy(), nil
}

// UpdateLoadBalancer records the call; the load balancer's status does not
// change.
func (lb *LoadBalancer) UpdateLoadBalancer(_ context.Context, clusterName string, service *v1.Service, nodes []*v1.Node) error {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	call := lb.beginLocked(MethodUpdateLoadBalancer, clusterName, service, nodes)
	lb.calls = append(lb.calls, call)
	return call.Err
}

// EnsureLoadBalancerDeleted removes the Service's load balancer; deleting
// one that does not exist succeeds.
func (lb *LoadBalancer) EnsureLoadBalancerDeleted(_ context.Context, clusterName string, service *v1.Service) error {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	call := lb.beginLocked(MethodEnsureLoadBalancerDeleted, clusterName, service, nil)
	lb.calls = append(lb.calls, call)
	if call.Err != nil {
		return call.Err
	}
	delete(lb.lbs, call.Service)
	return nil
}

// beginLocked builds the log record of a call, with the injected error for
// method if any (consuming a FailNext error).
func (lb *LoadBalancer) beginLocked(method, clusterName string, service *v1.Service, nodes []*v1.Node) LoadBalancerCall {
	call := LoadBalancerCall{Method: method, ClusterName: clusterName, Service: serviceName(service)}
	if nodes != nil {
		call.Nodes = make([]string, 0, len(nodes))
		for _, n := range nodes {
			if n != nil {
				call.Nodes = append(call.Nodes, n.Name)
			}
		}
	}
	if q := lb.nextErrs[method]; len(q) > 0 {
		call.Err = q[0]
		lb.nextErrs[method] = q[1:]
	} else {
		call.Err = lb.errs[method]
	}
	return call
}

// serviceName returns the namespace and name of service (empty for nil).
func serviceName(service *v1.Service) types.NamespacedName {
	if service == nil {
		return types.NamespacedName{}
	}
	return types.NamespacedName{Namespace: service.Namespace, Name: service.Name}
}
