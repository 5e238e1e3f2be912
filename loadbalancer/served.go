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
	if c := svc.Spec.LoadBalancerClass; c != nil {
		return lb.cfg.Class != "" && *c == lb.cfg.Class
	}
	return lb.cfg.Class == "" || lb.cfg.Classless
}

// optedIn reports whether svc is to be exposed: a Service of Config.Class
// chose it; a classless one is selected by Config.Services.
func (lb *LoadBalancer) optedIn(svc *v1.Service) bool {
	if c := svc.Spec.LoadBalancerClass; c != nil && lb.cfg.Class != "" && *c == lb.cfg.Class {
		return true
	}
	return selected(lb.cfg.Services, svc)
}

// finalized reports whether svc carries Config.Finalizer: the caller set
// up its load balancer and will call EnsureLoadBalancerDeleted.
func (lb *LoadBalancer) finalized(svc *v1.Service) bool {
	return slices.Contains(svc.Finalizers, lb.cfg.Finalizer)
}
