// This file is the family seam: each IP family a Service's spec.ipFamilies
// names is served by the family that serves it, chosen once in New, and the
// pipeline (pipeline.go's serve) asks the family, never which one it is.
// Both families are the pipeline's own steps (pipeline.go), over the
// router's mappings (read.go, converge.go) or its pinholes (pinholes.go).

package loadbalancer

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
)

// family serves one IP family of Services: IPv4 through the router's port
// mappings (ipv4Mappings), IPv6 through pinholes in the router's IPv6
// firewall (ipv6Pinholes). A family the load balancer has no family for (IPv6 without
// Config.Pinholes) is not served.
type family interface {
	// ipFamily is the IP family served.
	ipFamily() v1.IPFamily
	// serve serves svc on the family in turn t: svc's spec has the family
	// and its ports are valid (plans, sorted by key). It returns the
	// family's status, one ingress (with an error: what a pass may record,
	// or nil), or why the family is not served; an error wrapping
	// ErrInvalidService makes the Service invalid, and the pipeline then
	// withdraws it from every family.
	serve(ctx context.Context, t *turn, svc *v1.Service, plans []portPlan, nodes []*v1.Node, op operation) (*v1.LoadBalancerStatus, error)
	// holds reports whether svc may hold something on the family: its
	// status records it, or this process holds it.
	holds(o owner, svc *v1.Service) bool
	// withdraw removes in turn t everything svc holds on the family, at
	// every key its spec, its status or this process names.
	withdraw(ctx context.Context, t *turn, svc *v1.Service) error
}

// newFamilies returns the families lb serves, IPv4 first: the router's
// mappings and, with Config.Pinholes, its IPv6 pinholes.
func newFamilies(lb *LoadBalancer) []family {
	fams := []family{ipv4Mappings{lb}}
	if lb.cfg.Pinholes != nil {
		fams = append(fams, ipv6Pinholes{lb})
	}
	return fams
}

// errNoFamily is the *ServiceError of o, a Service of families fams none of
// which the load balancer serves.
func errNoFamily(o owner, fams []v1.IPFamily) error {
	return &ServiceError{Service: o.key(), Field: "spec.ipFamilies", Value: fmt.Sprint(fams), Reason: "the router maps IPv4 only; an IPv6-only Service cannot be served"}
}
