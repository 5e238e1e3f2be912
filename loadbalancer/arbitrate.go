package loadbalancer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ccmkit/ccmkit/igd"
)

// Who of the cluster's Services that want a key is served it is decided
// from the API server, alike in every process (see the package
// documentation): the one whose status records the port, then the older,
// then the first by namespace/name, then by UID. A key is taken only by its
// winner in a list made before the add, and kept only if a list made after
// the add still names it.

// listServices lists the cluster's Services live (no informer lag); without
// Initialize's client, or when removing, none.
func (lb *LoadBalancer) listServices(ctx context.Context, req request) ([]*v1.Service, error) {
	client := lb.bg.apiClient()
	if client == nil || req.svc == nil {
		return nil, nil
	}
	l, err := client.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("loadbalancer: service %s: list Services to see who else wants its ports: %w", req.owner.key(), err)
	}
	list := make([]*v1.Service, 0, len(l.Items))
	for i := range l.Items {
		list = append(list, &l.Items[i])
	}
	return list, nil
}

// contendersOnce returns listServices for req, called at most once.
func (lb *LoadBalancer) contendersOnce(ctx context.Context, req request) func() ([]*v1.Service, error) {
	return sync.OnceValues(func() ([]*v1.Service, error) { return lb.listServices(ctx, req) })
}

// claim is one Service that wants a key, and whether its status records it.
type claim struct {
	svc   *v1.Service
	holds bool
}

// compareClaims orders claims on one key, the winner first: the Service
// whose status records the key (written only by the controller), then the
// older by creationTimestamp, then by namespace/name, then by UID. Every
// process orders the same Services alike.
func compareClaims(a, b claim) int {
	if a.holds != b.holds {
		if a.holds {
			return -1
		}
		return 1
	}
	return cmp.Or(
		a.svc.CreationTimestamp.Time.Compare(b.svc.CreationTimestamp.Time),
		strings.Compare(a.svc.Namespace, b.svc.Namespace),
		strings.Compare(a.svc.Name, b.svc.Name),
		strings.Compare(string(a.svc.UID), string(b.svc.UID)))
}

// recordsKey reports whether svc's status records k as served (a port with
// no error).
func recordsKey(svc *v1.Service, k igd.Key) bool {
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		for _, p := range ing.Ports {
			if pk, ok := portKey(p.Protocol, p.Port); ok && pk == k && p.Error == nil {
				return true
			}
		}
	}
	return false
}

// wants reports whether s, a Service of the cluster other than the one
// being served, wants k and would be served: handed to this LoadBalancer,
// opted in, not being deleted, valid, and not asking for another address
// than the router's.
func (lb *LoadBalancer) wants(cluster string, s *v1.Service, k igd.Key, eligible map[string]bool) bool {
	if !lb.handed(s) || s.DeletionTimestamp != nil || !lb.optedIn(s) || !slices.Contains(specKeys(s), k) ||
		!lb.admitted(s, k) {
		return false // a Service the operator's limits refuse k does not contend for it
	}
	so := newOwner(cluster, s.Namespace, s.Name)
	if _, invalid := planPorts(so, s); invalid != nil {
		return false // an invalid Service is not served, so it claims nothing
	}
	if ext := lb.cachedExternalIP(); ext.IsValid() && checkLoadBalancerIP(so, s, ext) != nil {
		return false // nor is one asking for another address than the router's
	}
	if s.Spec.ExternalTrafficPolicy == v1.ServiceExternalTrafficPolicyLocal {
		// Nor one that can be served nowhere (Local with no ready endpoint
		// on a node eligible, nil: on any node; scaled to zero, or its
		// endpoints linger on nodes removed or not ready), even if its
		// status records k: once the router has lost its mapping (a
		// reboot), it would keep k from one that can be served while
		// nothing maps it, as it makes no mapping without a node. (A
		// mapping of it the router still has stays, and keeps k by the
		// router's table; blind, only while its lease lasts: see
		// pastLease.) Unknown (no current cache): it contends. The
		// nodes are those its own request maps to (localNodes).
		nodes, err := lb.localNodes(s, eligible)
		return err != nil || len(nodes) > 0
	}
	return true
}

// winner returns, of req's Service and the Services in svcs that want k,
// the one served k and why it goes first; nil when req's Service does.
// req's Service is taken as listed when svcs holds it (its status as the
// API server has it).
func (lb *LoadBalancer) winner(req request, k igd.Key, svcs []*v1.Service) (*v1.Service, string) {
	me := req.svc
	for _, s := range svcs {
		if s.Namespace == me.Namespace && s.Name == me.Name && s.UID == me.UID {
			me = s
		}
	}
	best := claim{svc: me, holds: recordsKey(me, k)}
	for _, s := range svcs {
		if s.Namespace == me.Namespace && s.Name == me.Name || !lb.wants(req.owner.cluster, s, k, req.eligible) {
			continue
		}
		if c := (claim{svc: s, holds: recordsKey(s, k)}); compareClaims(c, best) < 0 {
			best = c
		}
	}
	if best.svc == me {
		return nil, ""
	}
	switch {
	case best.holds:
		return best.svc, "its status records the port"
	case !best.svc.CreationTimestamp.Equal(&me.CreationTimestamp):
		return best.svc, "it is older"
	}
	return best.svc, "created in the same second, it comes first by namespace/name"
}

// arbitrate refuses k, a key req's Service does not hold, unless it is the
// one of the Services that want k to be served it (winner).
func (lb *LoadBalancer) arbitrate(req request, k igd.Key, contenders func() ([]*v1.Service, error)) error {
	svcs, err := contenders()
	if err != nil {
		return err
	}
	if w, why := lb.winner(req, k, svcs); w != nil {
		return refusedFor(req, k, w, why)
	}
	return nil
}

// refusedFor is the PortError of req's Service at k, which w is served.
func refusedFor(req request, k igd.Key, w *v1.Service, why string) *PortError {
	return &PortError{Service: req.owner.key(), Key: k, Claimant: w.Namespace + "/" + w.Name,
		Err: fmt.Errorf("%w: Service %s/%s wants it too and is served it (%s); this Service is served it when that one gives it up", ErrPortInUse, w.Namespace, w.Name, why)}
}

// confirm lists the Services again after req's Service took the keys of
// taken (it held none of them, or held them still to confirm), and gives up
// each that another Service now wins: one that came to want it, or to be
// served, after the list the take rested on. Of two processes that both
// took a key, each list made after its own add follows the other's read of
// the router (else that read had shown the add), and so the other Service's
// want: both lists see both Services, and name the same winner. When the
// list fails, every key of taken is given up (none was confirmed) but one
// the Service's status records, which goes first whoever else wants it: it
// is kept to confirm, and the list's error returned. A key
// given up whose mapping could not be removed stays to confirm (contested)
// by the next operation. It returns the keys given up, with their
// PortErrors, and the errors of removing them.
func (lb *LoadBalancer) confirm(ctx context.Context, t *turn, req request, taken []igd.Key) (map[igd.Key]*PortError, error) {
	if len(taken) == 0 || lb.bg.apiClient() == nil {
		return nil, nil
	}
	lost := make(map[igd.Key]*PortError)
	svcs, err := lb.listServices(ctx, req)
	var kept error // the list's error, when a key is kept unconfirmed
	for _, k := range taken {
		switch w, why := lb.winner(req, k, svcs); {
		case err != nil && recordsKey(req.svc, k):
			// Its status records k: it goes first, whoever else wants
			// k (unless another's status records it too). Kept, to
			// be confirmed by the next operation.
			lb.markContested(t.owner, k, true)
			kept = err
		case err != nil:
			lost[k] = &PortError{Service: req.owner.key(), Key: k, Err: err}
		case w != nil:
			lost[k] = refusedFor(req, k, w, why)
		default:
			lb.markContested(t.owner, k, false)
		}
	}
	if len(lost) == 0 {
		return nil, kept // the operation is retried
	}
	keys := slices.SortedFunc(maps.Keys(lost), compareKeys)
	for _, k := range keys {
		lb.markContested(t.owner, k, true) // until removed
	}
	r, rerr := lb.read(ctx, t.owner, keys) // blind: what this process wrote (recall)
	if rerr != nil {
		return lost, fmt.Errorf("loadbalancer: service %s: read the ports it gives up: %w", t.owner.key(), rerr)
	}
	var errs []error
	for _, k := range keys {
		m, ok := r.mappings[k]
		if !ok || !lb.owns(t.owner, m) {
			lb.update(t.owner, func(s *serviceState) { delete(s.held, k) })
			continue
		}
		if _, err := lb.remove(ctx, t.owner, m, r.at); err != nil {
			errs = append(errs, err)
		}
	}
	return lost, errors.Join(append(errs, kept)...)
}

// markContested records whether o's key k, held, is still to be confirmed.
func (lb *LoadBalancer) markContested(o owner, k igd.Key, contested bool) {
	lb.update(o, func(s *serviceState) {
		if h, ok := s.held[k]; ok {
			h.contested = contested
			s.held[k] = h
		}
	})
}

// serviceOf returns the Service ("namespace/name") of this cluster whose
// description m carries, when it names one: one this process knows, or a
// readable owner token of its cluster; else "". For messages only: a LAN
// host can write any description.
func (lb *LoadBalancer) serviceOf(m igd.Mapping) string {
	p, ok := parseDescription(m.Description)
	if !ok {
		return ""
	}
	lb.mu.Lock()
	s, cluster := lb.services[p.token], lb.cluster
	lb.mu.Unlock()
	if s != nil {
		return s.name
	}
	if rest, ok := strings.CutPrefix(p.token, cluster+"/"); ok && strings.Count(rest, "/") == 1 {
		return rest
	}
	return ""
}
