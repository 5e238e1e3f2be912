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

// arbitrate refuses k, a key req's Service does not hold, when another
// Service of the cluster that is served (selected, valid, not being deleted)
// wants it too: a key goes to a Service only while no other wants it, and
// two that want one neither holds both wait until one gives it up. Every
// process reads the Services live after its own Service came to want k, so
// of two processes (a fail-over overlap) that both took k, each would have
// read before the other Service wanted it: impossible. The router cannot
// tell them apart. A key the router lost (a reboot) is arbitrated again: a
// process's memory of holding it may be stale.
func (lb *LoadBalancer) arbitrate(req request, k igd.Key, contenders func() ([]*v1.Service, error)) error {
	svcs, err := contenders()
	if err != nil {
		return err
	}
	me := req.svc
	for _, s := range svcs {
		if (s.Namespace == me.Namespace && s.Name == me.Name) || !lb.handed(s) || s.DeletionTimestamp != nil ||
			!lb.optedIn(s) || !slices.Contains(specKeys(s), k) || !lb.admitted(s, k) {
			continue
		}
		so := newOwner(req.owner.cluster, s.Namespace, s.Name)
		if _, invalid := planPorts(so, s); invalid != nil {
			continue // an invalid Service is not served, so it claims nothing
		}
		if ext := lb.cachedExternalIP(); ext.IsValid() && checkLoadBalancerIP(so, s, ext) != nil {
			continue // nor is one asking for another address than the router's
		}
		return &PortError{Service: req.owner.key(), Key: k, Claimant: s.Namespace + "/" + s.Name,
			Err: fmt.Errorf("%w: another Service of the cluster wants it too, and neither holds it: delete one, or change its port", ErrPortInUse)}
	}
	return nil
}
