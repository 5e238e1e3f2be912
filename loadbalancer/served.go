package loadbalancer

import (
	"slices"

	v1 "k8s.io/api/core/v1"
)

// handed reports whether svc is a Service of type LoadBalancer that the
// caller hands this LoadBalancer (Config.Class, Config.Classless).
func (lb *LoadBalancer) handed(svc *v1.Service) bool {
	if svc.Spec.Type != v1.ServiceTypeLoadBalancer {
		return false
	}
	if svc.Spec.LoadBalancerClass != nil {
		return lb.ofClass(svc)
	}
	return lb.cfg.Class == "" || lb.cfg.Classless
}

// ofClass reports whether svc's loadBalancerClass is Config.Class.
func (lb *LoadBalancer) ofClass(svc *v1.Service) bool {
	c := svc.Spec.LoadBalancerClass
	return c != nil && lb.cfg.Class != "" && *c == lb.cfg.Class
}

// optedIn reports whether svc is to be exposed: a Service of Config.Class
// chose it; a classless one is selected by Config.Services.
func (lb *LoadBalancer) optedIn(svc *v1.Service) bool {
	return lb.ofClass(svc) || selected(lb.cfg.Services, svc)
}

// Serves reports whether EnsureLoadBalancer exposes svc (rather than
// answering cloudprovider.ImplementedElsewhere): a Service of type
// LoadBalancer handed to this LoadBalancer (Config.Class, Config.Classless)
// that opted in (see Config.Services). A caller that adds its finalizer
// only to Services served (provider/lbclass) leaves the others without it.
func (lb *LoadBalancer) Serves(svc *v1.Service) bool {
	return lb.handed(svc) && lb.optedIn(svc)
}

// finalized reports whether svc carries Config.Finalizer: the caller set
// up its load balancer and will call EnsureLoadBalancerDeleted.
func (lb *LoadBalancer) finalized(svc *v1.Service) bool {
	return slices.Contains(svc.Finalizers, lb.cfg.Finalizer)
}
