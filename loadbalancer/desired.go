package loadbalancer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/cloud-provider/api"

	"github.com/ccmkit/ccmkit/igd"
)

const (
	// annotationSourceRanges is the older form of spec.loadBalancerSourceRanges.
	annotationSourceRanges = "service.beta.kubernetes.io/load-balancer-source-ranges"
	noSourceRanges         = "a router port mapping cannot restrict source addresses; refusing rather than exposing the Service to every address"
)

// request is the desired state of one Service on the router.
type request struct {
	owner      owner
	svc        *v1.Service     // nil when removing all its mappings
	ports      []portPlan      // none: remove all of the Service's mappings
	candidates []target        // the nodes the mappings may target, by name
	noTarget   error           // why candidates is empty
	self       string          // this process's node on a secure-mode router
	eligible   map[string]bool // the nodes any Service's mappings may target, by name
}

// portPlan is one mapping a Service wants.
type portPlan struct {
	key         igd.Key
	nodePort    uint16
	description string
}

// selected reports whether selection serves svc.
func selected(selection ServiceSelection, svc *v1.Service) bool {
	return selection == AllServices || svc.Annotations[AnnotationLoadBalancerType] == AnnotationValue ||
		svc.Annotations[LegacyAnnotationLoadBalancerType] == AnnotationValue
}

// planPorts validates svc and returns the mappings it wants, sorted by key.
// Every problem is reported, each as a *ServiceError naming the field.
func planPorts(o owner, svc *v1.Service) ([]portPlan, error) {
	var errs []error
	bad := func(field, value, reason string) {
		errs = append(errs, &ServiceError{Service: o.key(), Field: field, Value: value, Reason: reason})
	}
	if len(svc.Spec.IPFamilies) > 0 && !slices.Contains(svc.Spec.IPFamilies, v1.IPv4Protocol) {
		bad("spec.ipFamilies", fmt.Sprint(svc.Spec.IPFamilies), "the router maps IPv4 only; an IPv6-only Service cannot be served")
	}
	if len(svc.Spec.LoadBalancerSourceRanges) > 0 {
		bad("spec.loadBalancerSourceRanges", strings.Join(svc.Spec.LoadBalancerSourceRanges, ","), noSourceRanges)
	}
	if v := strings.TrimSpace(svc.Annotations[annotationSourceRanges]); v != "" {
		bad("metadata.annotations["+annotationSourceRanges+"]", v, noSourceRanges)
	}
	var plans []portPlan
	seen := make(map[igd.Key]int)
	for i, p := range svc.Spec.Ports {
		field := fmt.Sprintf("spec.ports[%d]", i)
		k, ok := portKey(p.Protocol, p.Port)
		j, dup := seen[k]
		switch _, known := protocols[p.Protocol]; {
		case !known:
			bad(field+".protocol", string(p.Protocol), "routers map only TCP and UDP")
		case !ok:
			bad(field+".port", strconv.Itoa(int(p.Port)), "must be 1-65535")
		case p.NodePort < 1 || p.NodePort > 65535:
			bad(field+".nodePort", strconv.Itoa(int(p.NodePort)),
				"the router forwards to a nodePort; set spec.allocateLoadBalancerNodePorts to true (or unset)")
		case dup:
			bad(field+".port", strconv.Itoa(int(p.Port)), fmt.Sprintf("same external port and protocol as spec.ports[%d]", j))
		default:
			seen[k] = i
			plans = append(plans, portPlan{key: k, nodePort: uint16(p.NodePort), description: o.description(p.Name)})
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	slices.SortFunc(plans, func(a, b portPlan) int { return compareKeys(a.key, b.key) })
	return plans, nil
}

// checkLoadBalancerIP refuses a spec.loadBalancerIP other than external.
func checkLoadBalancerIP(o owner, svc *v1.Service, external netip.Addr) error {
	want := svc.Spec.LoadBalancerIP
	if want == "" {
		return nil
	}
	if ip, err := netip.ParseAddr(want); err == nil && ip.Unmap() == external {
		return nil
	}
	return &ServiceError{Service: o.key(), Field: "spec.loadBalancerIP", Value: want,
		Reason: fmt.Sprintf("the router's external address is %s; it cannot serve another address", external)}
}

// compareKeys orders keys by protocol, then external port.
func compareKeys(a, b igd.Key) int {
	return cmp.Or(strings.Compare(string(a.Protocol), string(b.Protocol)), cmp.Compare(a.ExternalPort, b.ExternalPort))
}

// status is the status of a Service served at external with plans (ipMode
// VIP: see the package documentation); a port in failed carries its reason.
func status(external netip.Addr, plans []portPlan, failed map[igd.Key]string) *v1.LoadBalancerStatus {
	mode := v1.LoadBalancerIPModeVIP
	ing := v1.LoadBalancerIngress{IP: external.String(), IPMode: &mode}
	for _, p := range plans {
		proto := v1.ProtocolTCP
		if p.key.Protocol == igd.UDP {
			proto = v1.ProtocolUDP
		}
		ps := v1.PortStatus{Port: int32(p.key.ExternalPort), Protocol: proto}
		if why, ok := failed[p.key]; ok {
			ps.Error = &why
		}
		ing.Ports = append(ing.Ports, ps)
	}
	return &v1.LoadBalancerStatus{Ingress: []v1.LoadBalancerIngress{ing}}
}

// request builds the desired state of svc: its ports and which of nodes may
// receive them. An ErrInvalidService means the spec cannot be served.
func (lb *LoadBalancer) request(ctx context.Context, o owner, svc *v1.Service, plans []portPlan, nodes []*v1.Node) (request, error) {
	req := request{owner: o, svc: svc, ports: plans}
	targets, reasons := eligibleTargets(nodes)
	req.eligible = make(map[string]bool, len(targets))
	for _, t := range targets {
		req.eligible[t.name] = true
	}
	if svc.Spec.ExternalTrafficPolicy == v1.ServiceExternalTrafficPolicyLocal {
		withEndpoints, err := lb.endpointNodes(svc)
		if err != nil {
			return request{}, err
		}
		targets = slices.DeleteFunc(targets, func(t target) bool {
			if !withEndpoints[t.name] {
				reasons[t.name] = "has no ready endpoint of the Service (externalTrafficPolicy Local)"
			}
			return !withEndpoints[t.name]
		})
	}
	if lb.selfOnly() {
		name, addr, err := lb.selfNode(ctx, nodes)
		if err != nil {
			return request{}, fmt.Errorf("loadbalancer: service %s: %w", o.key(), err)
		}
		req.self = name
		req.eligible = map[string]bool{name: req.eligible[name]}
		targets = slices.DeleteFunc(targets, func(t target) bool { return t.name != name })
		for i := range targets {
			if addr.IsValid() {
				targets[i].addr = addr // the only address the router maps to
			}
		}
		if len(targets) == 0 {
			why := cmp.Or(reasons[name], "is not among the cluster's nodes")
			req.noTarget = lb.retry(fmt.Errorf("%w for service %s: the router maps only to this node (secure mode, or PCP without THIRD_PARTY), %s, which %s",
				ErrNoEligibleNode, o.key(), name, why))
		}
	} else if len(targets) == 0 {
		req.noTarget = lb.retry(fmt.Errorf("%w for service %s: %s", ErrNoEligibleNode, o.key(), describeReasons(reasons)))
	}
	req.candidates = targets
	return req, nil
}

// selfOnly reports whether the router maps only to this process's node:
// Config.SecureMode, or a client that says so (igd.SelfOnlyReporter:
// igd/pcp.Backend once the router refused THIRD_PARTY).
func (lb *LoadBalancer) selfOnly() bool {
	return lb.cfg.SecureMode || lb.mode.selfOnly()
}

// describeReasons lists why each node is not eligible, sorted by node name.
func describeReasons(reasons map[string]string) string {
	if len(reasons) == 0 {
		return "the cluster has no nodes"
	}
	parts := make([]string, 0, len(reasons))
	for n, why := range reasons {
		parts = append(parts, "node "+n+" "+why)
	}
	slices.Sort(parts) // by name: no node name holds a character below " "
	return strings.Join(parts, "; ")
}

// retry joins err with an api.RetryError after Config.RetryAfter.
func (lb *LoadBalancer) retry(err error) error {
	return errors.Join(err, api.NewRetryError(fmt.Sprintf("loadbalancer: retrying in %s", lb.cfg.RetryAfter), lb.cfg.RetryAfter))
}
