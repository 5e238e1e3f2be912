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

// arbitrate refuses k to req's Service when another, served (selected, valid,
// not being deleted) and created first, wants k. Every process of the cluster
// reads the same Services, so two (a fail-over overlap) never both take a key:
// the router cannot tell them apart.
func (lb *LoadBalancer) arbitrate(req request, k igd.Key, contenders func() ([]*v1.Service, error)) error {
	svcs, err := contenders()
	if err != nil {
		return err
	}
	me := req.svc
	for _, s := range svcs {
		if (s.Namespace == me.Namespace && s.Name == me.Name) || !prior(s, me) || !wantsLoadBalancer(s) || s.DeletionTimestamp != nil || !selected(lb.cfg.Services, s) || !slices.Contains(specKeys(s), k) {
			continue
		}
		so := newOwner(req.owner.cluster, s.Namespace, s.Name)
		if _, invalid := planPorts(so, s); invalid != nil {
			continue // an invalid Service is not served, so it claims nothing
		}
		if ext := lb.cachedExternalIP(); ext.IsValid() && checkLoadBalancerIP(so, s, ext) != nil {
			continue // nor is one asking for another address than the router's
		}
		why := "an older Service of the cluster wants it"
		if s.CreationTimestamp.Equal(&me.CreationTimestamp) {
			why = "a Service of the cluster created in the same second wants it, and neither gets it: delete one, or change its port"
		}
		return &PortError{Service: req.owner.key(), Key: k, Claimant: s.Namespace + "/" + s.Name,
			Err: fmt.Errorf("%w: %s", ErrPortInUse, why)}
	}
	return nil
}

// prior reports whether a was created before b or in the same second
// (creationTimestamp's precision). A tie refuses both: a process that listed
// the Services before the other of the same second existed cannot know it,
// so no tie-break could be decided alike by every process.
func prior(a, b *v1.Service) bool {
	return !a.CreationTimestamp.After(b.CreationTimestamp.Time)
}
