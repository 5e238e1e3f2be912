package loadbalancer

import (
	"context"
	"fmt"
	"slices"
	"sync"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ccmkit/ccmkit/igd"
)

// contendersOnce returns a function listing the cluster's Services live (no
// informer lag), at most once; without Initialize's client, none.
func (lb *LoadBalancer) contendersOnce(ctx context.Context, req request) func() ([]*v1.Service, error) {
	return sync.OnceValues(func() ([]*v1.Service, error) {
		client := lb.bg.apiClient()
		if client == nil || req.svc == nil {
			return nil, nil
		}
		l, err := client.CoreV1().Services("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("loadbalancer: service %s: list Services to see who else wants its ports: %w", req.owner.key(), err)
		}
		var list []*v1.Service
		for i := range l.Items {
			list = append(list, &l.Items[i])
		}
		return list, nil
	})
}

// arbitrate refuses k to req's Service when another Service of the cluster
// that is served (selected, valid, not being deleted) holds k by its status,
// or wants k while req's Service does not hold it by its own status: a key
// no status lists goes to a Service only when no other wants it. Every
// process reads the same Services live, so two of them (a fail-over overlap)
// never both take a key, whatever changes between their reads (a Service
// created, or updated to want the key); the router cannot tell them apart.
func (lb *LoadBalancer) arbitrate(req request, k igd.Key, contenders func() ([]*v1.Service, error)) error {
	svcs, err := contenders()
	if err != nil {
		return err
	}
	me := req.svc
	isMe := func(s *v1.Service) bool { return s.Namespace == me.Namespace && s.Name == me.Name }
	mine := statusLists(me, k)
	if i := slices.IndexFunc(svcs, isMe); i >= 0 {
		mine = statusLists(svcs[i], k) // the live copy
	}
	for _, s := range svcs {
		if isMe(s) || !wantsLoadBalancer(s) || s.DeletionTimestamp != nil || !selected(lb.cfg.Services, s) {
			continue
		}
		holds, wants := statusLists(s, k), slices.Contains(specKeys(s), k)
		if !holds && (!wants || mine) {
			continue
		}
		so := newOwner(req.owner.cluster, s.Namespace, s.Name)
		if _, invalid := planPorts(so, s); invalid != nil {
			continue // an invalid Service is not served, so it claims nothing
		}
		if ext := lb.cachedExternalIP(); ext.IsValid() && checkLoadBalancerIP(so, s, ext) != nil {
			continue // nor is one asking for another address than the router's
		}
		why := "another Service of the cluster holds it (its status lists it)"
		if !holds {
			why = "another Service of the cluster wants it too, and neither holds it: delete one, or change its port"
		}
		return &PortError{Service: req.owner.key(), Key: k, Claimant: s.Namespace + "/" + s.Name,
			Err: fmt.Errorf("%w: %s", ErrPortInUse, why)}
	}
	return nil
}

// statusLists reports whether svc's status lists k as served.
func statusLists(svc *v1.Service, k igd.Key) bool {
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		for _, p := range ing.Ports {
			if pk, ok := portKey(p.Protocol, p.Port); ok && pk == k && p.Error == nil {
				return true
			}
		}
	}
	return false
}
