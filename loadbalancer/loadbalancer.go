package loadbalancer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/api"
	"k8s.io/klog/v2"

	"github.com/ccmkit/ccmkit/igd"
)

var _ cloudprovider.LoadBalancer = (*LoadBalancer)(nil)

// LoadBalancer serves Services of type LoadBalancer with UPnP IGD port
// mappings; Initialize and Run start its background work. Safe for concurrent use.
type LoadBalancer struct {
	cfg            Config // read-only after New, defaults filled in
	permanentOnce  sync.Once
	passes, probes atomic.Int64 // finished background passes and probes
	bg             background   // the background work's lifecycle (lifecycle.go)
	mode           routerMode   // chosen in New from what cfg.Client declares (mode.go)

	// mu guards the fields below; never held across a router or API call.
	mu        sync.Mutex
	cluster   string                   // from Config or the first call
	external  netip.Addr               // last usable external IP, for arbitration only (zero: none)
	nodeAddrs map[netip.Addr]string    // every node address seen, to its node
	services  map[string]*serviceState // by owner token
	self      string                   // this process's node when Config.NodeName is empty ("" until found)
	selfAddr  netip.Addr               // self's address toward the router, by which it was found
	probeSeq  int                      // picks the mapping the next probe reads
}

// New returns a LoadBalancer configured by cfg. It makes no router call.
func New(cfg Config) (*LoadBalancer, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	lb := &LoadBalancer{cfg: cfg, cluster: cfg.ClusterName, nodeAddrs: make(map[netip.Addr]string),
		services: make(map[string]*serviceState), bg: background{hinted: make(map[types.UID]bool), wake: make(chan struct{}, 1)}}
	lb.mode = newMode(lb)
	return lb, nil
}

// GetLoadBalancerName returns the owner token of the Service's mappings, the
// second field of their descriptions; it depends only on cluster, namespace and name.
func (lb *LoadBalancer) GetLoadBalancerName(_ context.Context, clusterName string, service *v1.Service) string {
	return newOwner(clusterName, service.Namespace, service.Name).token
}

// GetLoadBalancer reports whether the Service holds mappings, and the status
// built from them. When this process holds keys of the Service (it wrote
// them, or read them as the Service's), those are the answer, without a
// read: wrong at worst toward "exists" (a router that lost them), which
// costs the caller an EnsureLoadBalancerDeleted that reads and finds
// nothing. Otherwise it reads the router at every key the Service's spec and
// status name (those only), so that mappings this process does not know of
// (a restart, a fail-over, a lost reply) are never reported gone. A Service
// that exists while the router gives no usable external IP has an empty
// status and no error: its clean-up needs no address. For a Service not selected, with no
// mapping recorded (see EnsureLoadBalancer), it calls nothing and reports none.
// A port of the spec that EnsureLoadBalancer could not forward carries its
// reason, as EnsureLoadBalancer reported it. While the router's external IP
// is not usable (ErrExternalIPNotUsable), a
// Service with mappings exists with an empty status: the address is never
// reported, and nothing stops the service controller's clean-up.
func (lb *LoadBalancer) GetLoadBalancer(ctx context.Context, clusterName string, service *v1.Service) (*v1.LoadBalancerStatus, bool, error) {
	o, err := lb.owner(clusterName, service)
	if err != nil {
		return nil, false, err
	}
	if lb.untouched(o, service) {
		return nil, false, nil
	}
	if err := lb.waitNodes(o); err != nil {
		return nil, false, err
	}
	t, err := lb.acquire(ctx, o)
	if err != nil {
		return nil, false, err
	}
	if keys := lb.keysHeldBy(o); len(keys) > 0 {
		// It exists without a read (see the doc comment).
		t.release()
		plans := make([]portPlan, 0, len(keys))
		for _, k := range keys {
			plans = append(plans, portPlan{key: k})
		}
		ip, err := lb.refreshExternalIP(ctx)
		return lb.getStatus(ctx, o, service, plans, ip, err), true, nil
	}
	if !lb.mode.canRead() {
		// Nothing to read: the status the service controller recorded
		// says whether it exists (toward "exists": the delete sweeps).
		t.release()
		if len(service.Status.LoadBalancer.Ingress) == 0 {
			return nil, false, nil
		}
		return service.Status.LoadBalancer.DeepCopy(), true, nil
	}
	// The external IP is asked while the keys are read: a Get costs about
	// one read, as the service controller asks it before every delete.
	type answer struct {
		ip  netip.Addr
		err error
	}
	extC := make(chan answer, 1)
	go func() {
		ip, err := lb.refreshExternalIP(ctx)
		extC <- answer{ip, err}
	}()
	got, err := lb.read(ctx, o, lb.knownKeys(o, service, nil))
	t.release()
	ext := <-extC
	if err != nil {
		return nil, false, fmt.Errorf("loadbalancer: get service %s: %w", o.key(), err)
	}
	var plans []portPlan
	for k, m := range got.mappings {
		if lb.owns(o, m) {
			plans = append(plans, portPlan{key: k, nodePort: m.InternalPort, description: m.Description})
		}
	}
	if len(plans) == 0 {
		return nil, false, nil
	}
	return lb.getStatus(ctx, o, service, plans, ext.ip, ext.err), true, nil
}

// getStatus is GetLoadBalancer's status of a Service that exists, holding
// the keys of plans, with the external IP as asked (ip or extErr).
func (lb *LoadBalancer) getStatus(ctx context.Context, o owner, service *v1.Service, plans []portPlan, ip netip.Addr, extErr error) *v1.LoadBalancerStatus {
	// The ports of the spec this process failed to forward, with why.
	failed := lb.failedPorts(o)
	for _, k := range specKeys(service) {
		if _, ok := failed[k]; ok && !slices.ContainsFunc(plans, func(p portPlan) bool { return p.key == k }) {
			plans = append(plans, portPlan{key: k})
		}
	}
	slices.SortFunc(plans, func(a, b portPlan) int { return compareKeys(a.key, b.key) })
	if extErr != nil {
		// The address is not reported, but the mappings exist: the
		// service controller asks this before it cleans up, and a delete
		// needs no address, so the answer does not wait for one.
		klog.FromContext(ctx).V(2).Info("Reporting load balancer without its address", "service", o.key(), "err", extErr)
		return &v1.LoadBalancerStatus{}
	}
	return status(ip, plans, portReasons(failed))
}

// EnsureLoadBalancer makes the router forward each port of the Service to
// its nodePort on one eligible node (writing nothing when nothing changes)
// and returns the status. A Service not selected by Config.Services loses the
// mappings its status or this process records (no router call when none),
// then gets cloudprovider.ImplementedElsewhere and, once, an opt-in event.
// A call after EnsureLoadBalancerDeleted of the same Service (same UID) is
// served only if the API server (once Initialize gave a client) still has it
// wanting a load balancer from this LoadBalancer; otherwise it writes nothing
// and returns the status service records.
func (lb *LoadBalancer) EnsureLoadBalancer(ctx context.Context, clusterName string, service *v1.Service, nodes []*v1.Node) (*v1.LoadBalancerStatus, error) {
	lb.seeNodes(nodes)
	o, err := lb.owner(clusterName, service)
	if err != nil {
		return nil, err
	}
	if !lb.optedIn(service) {
		lb.hintOptIn(service)
		if !lb.untouched(o, service) {
			if err := lb.withdraw(ctx, o, service); err != nil {
				return nil, err
			}
		}
		return nil, cloudprovider.ImplementedElsewhere
	}
	t, err := lb.acquire(ctx, o)
	if err != nil {
		return nil, err
	}
	defer t.release()
	if gone, err := lb.goneSinceDelete(ctx, o, service); err != nil || gone {
		// service predates the delete (the service controller's node
		// sync lists before it): its recorded status, nothing written.
		return service.Status.LoadBalancer.DeepCopy(), err
	}
	st, err := lb.serve(ctx, t, service, nodes, operation{})
	if err != nil {
		return nil, err
	}
	return st, nil
}

// UpdateLoadBalancer is EnsureLoadBalancer without the status.
func (lb *LoadBalancer) UpdateLoadBalancer(ctx context.Context, clusterName string, service *v1.Service, nodes []*v1.Node) error {
	_, err := lb.EnsureLoadBalancer(ctx, clusterName, service, nodes)
	return err
}

// EnsureLoadBalancerDeleted removes every mapping the Service owns at the
// keys its spec, its status or this process knows of, and nothing else, also
// for Services no longer valid or selected; nothing to remove is success. For
// a Service not selected, with no mapping recorded, it calls nothing.
func (lb *LoadBalancer) EnsureLoadBalancerDeleted(ctx context.Context, clusterName string, service *v1.Service) error {
	o, err := lb.owner(clusterName, service)
	if err != nil {
		return err
	}
	if lb.untouched(o, service) {
		return nil
	}
	if err := lb.waitNodes(o); err != nil {
		return err
	}
	return lb.withdraw(ctx, o, service)
}

// untouched reports whether svc is not selected and neither its status's
// ports nor this process record a key where it may own a mapping (a mapping
// added just before opting out, not yet in the status, stays till its lease ends).
func (lb *LoadBalancer) untouched(o owner, svc *v1.Service) bool {
	if lb.optedIn(svc) {
		return false
	}
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		if len(ing.Ports) > 0 {
			return false
		}
	}
	lb.mu.Lock()
	defer lb.mu.Unlock()
	s := lb.services[o.token]
	return s == nil || len(s.held) == 0
}

// operation says how serve runs.
type operation struct {
	pass  bool      // a background pass: leaves the deleted mark alone
	extra []igd.Key // more keys where the Service may hold mappings
}

// serve is EnsureLoadBalancer for a selected Service, and a pass's work on
// one, in turn t. With every port refused, or with no node to map to and a
// port another holds, it returns the status saying so beside the error.
func (lb *LoadBalancer) serve(ctx context.Context, t *turn, svc *v1.Service, nodes []*v1.Node, op operation) (*v1.LoadBalancerStatus, error) {
	o := t.owner
	plans, invalid := planPorts(o, svc)
	admitted, refused := lb.admit(o, svc, plans) // refused ports are withdrawn
	// Asked in every operation's turn: an address the router no longer
	// reports (its WAN link went down) is never served from a cache.
	ext, extErr := lb.refreshExternalIP(ctx)
	if extErr != nil && !errors.Is(extErr, ErrExternalIPNotUsable) {
		return nil, fmt.Errorf("loadbalancer: ensure service %s: %w", o.key(), extErr)
	}
	if invalid == nil && extErr == nil {
		invalid = checkLoadBalancerIP(o, svc, ext)
	}
	var failed map[igd.Key]*PortError
	var err, swept error
	// A router that refuses, during this operation, to map for another
	// host (the client says so: SelfOnly) is served once more, to this
	// process's node.
	for selfOnly := lb.selfOnly(); ; selfOnly = true {
		var req request
		if invalid == nil {
			if req, err = lb.request(ctx, o, svc, admitted, nodes); err != nil && !errors.Is(err, ErrInvalidService) {
				return nil, err
			}
			invalid = err
		}
		if invalid != nil {
			// Ports the user asked to restrict must not stay open.
			return nil, errors.Join(invalid, lb.withdrawIn(ctx, t, svc))
		}
		if !op.pass {
			lb.update(o, func(s *serviceState) { s.deleted = false })
		}
		if len(refused) > 0 {
			// A refused port this process did not write (it restarted
			// with the policy) is recalled nowhere: swept (blind) like a
			// withdrawn Service's, at the spec's nodePorts.
			_, swept = lb.mode.sweep(ctx, o, lb.specNodePorts(o, svc, slices.Collect(maps.Keys(refused))), netip.Addr{})
		}
		var got reading
		if got, err = lb.read(ctx, o, lb.knownKeys(o, svc, plans, op.extra...)); err != nil {
			return nil, fmt.Errorf("loadbalancer: ensure service %s: %w", o.key(), err)
		}
		if failed, err = lb.converge(ctx, t, req, got); selfOnly || !lb.selfOnly() {
			break
		}
	}
	if len(refused) > 0 && failed == nil {
		failed = make(map[igd.Key]*PortError, len(refused))
	}
	maps.Copy(failed, refused)
	err = errors.Join(err, swept)
	if err != nil {
		var st *v1.LoadBalancerStatus
		if extErr == nil && errors.Is(err, ErrNoEligibleNode) {
			// Served nowhere: converge kept the mappings it holds at its
			// spec's ports and removed the others. Its status, for a pass
			// to record, must not go on telling it holds a port another
			// took, or one no longer mapped for it (the service
			// controller records none on error).
			st = status(ext, plans, portReasons(failed))
		}
		maps.DeleteFunc(failed, func(_ igd.Key, pe *PortError) bool { return errors.Is(pe.Err, ErrNoEligibleNode) }) // err says so
		return st, errors.Join(err, joinPortErrors(failed))
	}
	if len(failed) > 0 && len(failed) == len(plans) {
		// No port forwarded: fail as a whole, so that the service
		// controller backs off; the status, every port with its error, is
		// for a pass to record (the status must not keep ports the Service
		// no longer holds).
		var st *v1.LoadBalancerStatus
		if extErr == nil {
			st = status(ext, plans, portReasons(failed))
		}
		return st, joinPortErrors(failed)
	}
	lb.notePorts(o, svc, failed)
	lb.warn(o, svc, ext, extErr)
	if extErr != nil {
		return nil, errors.Join(extErr, api.NewRetryError(fmt.Sprintf("loadbalancer: service %s: retrying in %s", o.key(), lb.cfg.RetryAfter), lb.cfg.RetryAfter))
	}
	return status(ext, plans, portReasons(failed)), nil
}

// withdraw removes o's mappings and keeps passes off the Service until an Ensure.
func (lb *LoadBalancer) withdraw(ctx context.Context, o owner, svc *v1.Service) error {
	t, err := lb.acquire(ctx, o)
	if err != nil {
		return err
	}
	defer t.release()
	now := lb.cfg.Clock.Now()
	lb.update(o, func(s *serviceState) {
		s.deleted, s.deletedUID, s.deletedAt, s.warned = true, svc.UID, now, netip.Addr{}
	})
	return lb.withdrawIn(ctx, t, svc)
}

// withdrawIn removes every mapping of svc, in turn t.
func (lb *LoadBalancer) withdrawIn(ctx context.Context, t *turn, svc *v1.Service) error {
	keys := lb.knownKeys(t.owner, svc, nil)
	// What this process did not write, at the spec's nodePorts (blind).
	_, swept := lb.mode.sweep(ctx, t.owner, lb.specNodePorts(t.owner, svc, keys), netip.Addr{})
	got, err := lb.read(ctx, t.owner, keys)
	if err != nil {
		return fmt.Errorf("loadbalancer: remove mappings of service %s: %w", t.owner.key(), err)
	}
	lb.update(t.owner, func(s *serviceState) { s.failed, s.told = nil, nil }) // no port is wanted
	_, err = lb.converge(ctx, t, request{owner: t.owner}, got)
	return errors.Join(swept, err)
}

// owner returns the owner of service, and remembers the cluster name. It
// refuses a clusterName other than background work's (Config.ClusterName, or
// the first call's): two owners of one Service would each see the other's as foreign.
func (lb *LoadBalancer) owner(clusterName string, service *v1.Service) (owner, error) {
	lb.mu.Lock()
	if lb.cluster == "" {
		lb.cluster = clusterName
	}
	cluster := lb.cluster
	lb.mu.Unlock()
	o := newOwner(clusterName, service.Namespace, service.Name)
	if clusterName != cluster {
		return o, fmt.Errorf("loadbalancer: service %s: cluster name %q differs from %q, which this LoadBalancer serves (Config.ClusterName, or the first call's): set Config.ClusterName to the controller's --cluster-name", o.key(), clusterName, cluster)
	}
	return o, nil
}

// clusterName returns the cluster name background work uses ("": unknown).
func (lb *LoadBalancer) clusterName() string {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	return lb.cluster
}
