package loadbalancer

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/api"
	"k8s.io/klog/v2"

	"github.com/ccmkit/ccmkit/igd"
)

var _ cloudprovider.LoadBalancer = (*LoadBalancer)(nil)

// LoadBalancer serves Services of type LoadBalancer with port mappings on a
// UPnP IGD router. It implements cloudprovider.LoadBalancer; its background
// work (lease renewal, repair, external IP refresh, re-pointing) is started
// by Initialize or Run. It is safe for concurrent use.
type LoadBalancer struct {
	cfg           Config // read-only after New, defaults filled in
	permanentOnce sync.Once
	// passes counts finished background passes (read by tests).
	passes atomic.Int64
	// observationsUsed counts deletes made from a GetLoadBalancer's read
	// (read by tests).
	observationsUsed atomic.Int64

	// mu guards every field below it. It is never held across a router or
	// API server call.
	mu sync.Mutex
	// cluster is the cluster name learned from Config or the first call.
	cluster string
	// external is the cached external IP of the router (zero: not known).
	external netip.Addr
	// nodeAddrs maps the addresses of every node seen by this process to
	// the node's name: a mapping claiming to be ours must point at one.
	nodeAddrs map[netip.Addr]string
	// claims reserves router keys for the Service taking or holding them.
	claims map[igd.Key]owner
	// expires records when the mappings this process added (or renewed)
	// expire, by the lease the router granted (none for permanent ones).
	expires map[igd.Key]time.Time
	// written records, by key, the description this process last wrote to
	// its own mapping there. When the router reports another one although
	// nothing else was written since, the router alters descriptions (cuts
	// them short, say): the mapping then counts as labelled, rather than
	// being deleted and re-added on every pass.
	written map[igd.Key]string
	// busy holds one channel per Service with an operation in flight,
	// closed when it ends.
	busy map[string]chan struct{}
	// warned records the non-public external IP each Service was warned
	// about.
	warned map[types.UID]netip.Addr
	// deleted records when EnsureLoadBalancerDeleted (or a deselection) last
	// removed the mappings of a Service, by UID: a background pass works
	// from a list of Services taken at its start, and must not serve one
	// again that was deleted since (its mappings would outlive it). Ensure
	// of the same UID clears it; entries older than deletedTTL are dropped.
	deleted map[types.UID]time.Time
	// observed holds, by owner token, the table read of the last
	// GetLoadBalancer of that Service, for the EnsureLoadBalancerDeleted
	// that the service controller makes right after it (see observation).
	observed map[string]observation
	// watch is the background work's view of the cluster (nil until its
	// caches have synced).
	watch *watch
	// client is the background work's API client, set by Initialize.
	client kubernetes.Interface
	// running is set when Run has started.
	running bool
	// self is the node this process runs on, found by its address toward
	// the router, selfAddr, when Config.NodeName is empty ("" until found).
	self     string
	selfAddr netip.Addr
}

// New returns a LoadBalancer configured by cfg. It makes no router call: an
// unreachable router at start-up does not disable anything, the first
// operation reaches it.
func New(cfg Config) (*LoadBalancer, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &LoadBalancer{
		cfg:       cfg,
		cluster:   cfg.ClusterName,
		nodeAddrs: make(map[netip.Addr]string),
		claims:    make(map[igd.Key]owner),
		expires:   make(map[igd.Key]time.Time),
		written:   make(map[igd.Key]string),
		busy:      make(map[string]chan struct{}),
		warned:    make(map[types.UID]netip.Addr),
		observed:  make(map[string]observation),
		deleted:   make(map[types.UID]time.Time),
	}, nil
}

// GetLoadBalancerName returns the owner token of the Service's mappings:
// "cluster/namespace/name" when that is at most 43 bytes of letters, digits,
// '-', '.' and '_', otherwise "#" and 20 base32 characters of its SHA-256. It
// depends only on those three names, never on the Service's UID or spec, and
// is what the second field of every mapping description says.
func (lb *LoadBalancer) GetLoadBalancerName(_ context.Context, clusterName string, service *v1.Service) string {
	return newOwner(clusterName, service.Namespace, service.Name).token
}

// GetLoadBalancer reports whether the router holds any mapping of the
// Service (whatever the Service's spec says now), and its status built from
// those mappings. It costs one table read, plus one external-IP call when
// the address is not cached. It waits for an operation in flight on the
// same Service to end, so that its read shows what that operation wrote. An
// EnsureLoadBalancerDeleted of the same Service that follows within
// ObservationTTL, with no write for the Service in between, deletes from
// this read instead of reading again: that is how the service controller
// deletes (GetLoadBalancer, then EnsureLoadBalancerDeleted when it exists).
func (lb *LoadBalancer) GetLoadBalancer(ctx context.Context, clusterName string, service *v1.Service) (*v1.LoadBalancerStatus, bool, error) {
	o := lb.owner(clusterName, service)
	if err := lb.waitNodes(o); err != nil {
		return nil, false, err
	}
	// Under the Service's gate no write for it is in flight, so the read
	// shows every mapping this process made for it.
	release, err := lb.acquire(ctx, o)
	if err != nil {
		return nil, false, err
	}
	start := lb.cfg.Clock.Now()
	t, err := lb.readTable(ctx)
	if err == nil {
		t = lb.observe(o, t, start)
	}
	release()
	if err != nil {
		return nil, false, fmt.Errorf("loadbalancer: get service %s: %w", o.key(), err)
	}
	var plans []portPlan
	for k, m := range t { // the mappings whose description names o
		if lb.owns(o, m) {
			plans = append(plans, portPlan{key: k, nodePort: m.InternalPort, description: m.Description})
		}
	}
	if len(plans) == 0 {
		return nil, false, nil
	}
	sort.Slice(plans, func(i, j int) bool { return compareKeys(plans[i].key, plans[j].key) < 0 })
	ext, err := lb.externalIP(ctx)
	if err != nil {
		return nil, true, fmt.Errorf("loadbalancer: get service %s: %w", o.key(), err)
	}
	return status(ext, plans), true, nil
}

// EnsureLoadBalancer makes the router forward each port of the Service to
// its nodePort on one eligible node and returns the status. It is idempotent:
// a call with nothing to change costs one table read. A Service not selected
// by Config.Services has its mappings removed and gets
// cloudprovider.ImplementedElsewhere.
func (lb *LoadBalancer) EnsureLoadBalancer(ctx context.Context, clusterName string, service *v1.Service, nodes []*v1.Node) (*v1.LoadBalancerStatus, error) {
	lb.seeNodes(nodes)
	o := lb.owner(clusterName, service)
	return lb.ensure(ctx, o, service, nodes)
}

// UpdateLoadBalancer converges the Service's mappings onto the given nodes;
// it is EnsureLoadBalancer without the status.
func (lb *LoadBalancer) UpdateLoadBalancer(ctx context.Context, clusterName string, service *v1.Service, nodes []*v1.Node) error {
	_, err := lb.EnsureLoadBalancer(ctx, clusterName, service, nodes)
	return err
}

// EnsureLoadBalancerDeleted removes every mapping the Service owns, and
// nothing else. It needs only the Service's namespace and name, so it works
// for Services that are no longer valid or no longer selected, and it
// succeeds when there is nothing to remove.
func (lb *LoadBalancer) EnsureLoadBalancerDeleted(ctx context.Context, clusterName string, service *v1.Service) error {
	o := lb.owner(clusterName, service)
	if err := lb.waitNodes(o); err != nil {
		return err
	}
	if err := lb.removeAll(ctx, o, service.UID); err != nil {
		return err
	}
	lb.mu.Lock()
	delete(lb.warned, service.UID)
	lb.mu.Unlock()
	return nil
}

// ensure is EnsureLoadBalancer for owner o on nodes.
func (lb *LoadBalancer) ensure(ctx context.Context, o owner, svc *v1.Service, nodes []*v1.Node) (*v1.LoadBalancerStatus, error) {
	if !selected(lb.cfg.Services, svc) {
		if err := lb.removeAll(ctx, o, svc.UID); err != nil {
			return nil, err
		}
		return nil, cloudprovider.ImplementedElsewhere
	}
	plans, err := planPorts(o, svc)
	if err != nil {
		return nil, lb.withdraw(ctx, o, err)
	}
	ext, err := lb.externalIP(ctx)
	if err != nil {
		return nil, fmt.Errorf("loadbalancer: ensure service %s: %w", o.key(), err)
	}
	if err := checkLoadBalancerIP(o, svc, ext); err != nil {
		return nil, lb.withdraw(ctx, o, err)
	}
	req, err := lb.request(ctx, o, svc, plans, nodes)
	if err != nil {
		return nil, err
	}
	release, err := lb.acquire(ctx, o)
	if err != nil {
		return nil, err
	}
	defer release()
	lb.undelete(svc.UID)
	t, err := lb.readTable(ctx)
	if err != nil {
		return nil, fmt.Errorf("loadbalancer: ensure service %s: %w", o.key(), err)
	}
	if err := lb.reconcile(ctx, t, req); err != nil {
		return nil, err
	}
	lb.warnNotPublic(svc, ext)
	return status(ext, plans), nil
}

// withdraw handles a Service whose spec a port mapping cannot serve
// (invalid, a *ServiceError): it removes the mappings o already owns, if
// any, so that ports the user asked to restrict or stop serving do not stay
// open, and touches nothing else; for a Service with no mapping of ours it
// only reads the table. It returns invalid, joined with any error of the
// removal.
func (lb *LoadBalancer) withdraw(ctx context.Context, o owner, invalid error) error {
	release, err := lb.acquire(ctx, o)
	if err != nil {
		return errors.Join(invalid, err)
	}
	defer release()
	t, err := lb.readTable(ctx)
	if err != nil {
		return errors.Join(invalid, fmt.Errorf("loadbalancer: withdraw invalid service %s: %w", o.key(), err))
	}
	return errors.Join(invalid, lb.reconcile(ctx, t, request{owner: o}))
}

// removeAll deletes every mapping o owns, as seen by a table read: the
// observation of a GetLoadBalancer just before, when it still stands in for
// one, or a read of its own. It first marks the Service (uid) deleted, so
// that background passes leave it alone until an Ensure serves it again.
func (lb *LoadBalancer) removeAll(ctx context.Context, o owner, uid types.UID) error {
	release, err := lb.acquire(ctx, o)
	if err != nil {
		return err
	}
	defer release()
	lb.markDeleted(uid)
	t, ok := lb.takeObservation(o)
	if !ok {
		if t, err = lb.readTable(ctx); err != nil {
			return fmt.Errorf("loadbalancer: delete service %s: %w", o.key(), err)
		}
	}
	return lb.reconcile(ctx, t, request{owner: o})
}

// request builds the desired state of svc: its ports and which of nodes may
// receive them.
func (lb *LoadBalancer) request(ctx context.Context, o owner, svc *v1.Service, plans []portPlan, nodes []*v1.Node) (request, error) {
	req := request{owner: o, ports: plans}
	targets, reasons := eligibleTargets(nodes)
	if svc.Spec.ExternalTrafficPolicy == v1.ServiceExternalTrafficPolicyLocal {
		withEndpoints, err := lb.endpointNodes(svc)
		if err != nil {
			return request{}, err
		}
		var kept []target
		for _, t := range targets {
			if withEndpoints[t.name] {
				kept = append(kept, t)
			} else {
				reasons[t.name] = "has no ready endpoint of the Service (externalTrafficPolicy Local)"
			}
		}
		targets = kept
	}
	if lb.cfg.SecureMode {
		name, addr, err := lb.selfNode(ctx, nodes)
		if err != nil {
			return request{}, fmt.Errorf("loadbalancer: service %s: %w", o.key(), err)
		}
		req.self = name
		var self []target
		for _, t := range targets {
			if t.name == name {
				if addr.IsValid() {
					t.addr = addr // the only address the router maps to
				}
				self = append(self, t)
			}
		}
		if len(self) == 0 {
			why, ok := reasons[name]
			if !ok {
				why = "is not among the cluster's nodes"
			}
			req.noTarget = lb.retry(fmt.Errorf("%w for service %s: the router is in secure mode and maps only to this node, %s, which %s",
				ErrNoEligibleNode, o.key(), name, why))
		}
		targets = self
	} else if len(targets) == 0 {
		req.noTarget = lb.retry(fmt.Errorf("%w for service %s: %s", ErrNoEligibleNode, o.key(), describeReasons(reasons)))
	}
	req.candidates = targets
	return req, nil
}

// describeReasons lists why each node is not eligible, sorted by node name.
func describeReasons(reasons map[string]string) string {
	if len(reasons) == 0 {
		return "the cluster has no nodes"
	}
	names := make([]string, 0, len(reasons))
	for n := range reasons {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = "node " + n + " " + reasons[n]
	}
	return strings.Join(parts, "; ")
}

// retry joins err with an api.RetryError so that the service controller
// comes back after Config.RetryAfter rather than backing off: the cluster is
// expected to become ready (a node turning Ready, an endpoint appearing).
func (lb *LoadBalancer) retry(err error) error {
	return errors.Join(err, api.NewRetryError(fmt.Sprintf("loadbalancer: retrying in %s", lb.cfg.RetryAfter), lb.cfg.RetryAfter))
}

// owner returns the owner of service in clusterName, and remembers the
// cluster name for background work.
func (lb *LoadBalancer) owner(clusterName string, service *v1.Service) owner {
	lb.mu.Lock()
	if lb.cluster == "" {
		lb.cluster = clusterName
	}
	lb.mu.Unlock()
	return newOwner(clusterName, service.Namespace, service.Name)
}

// clusterName returns the cluster name background work uses ("" = not yet
// known).
func (lb *LoadBalancer) clusterName() string {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	return lb.cluster
}

// seeNodes records the addresses of nodes.
func (lb *LoadBalancer) seeNodes(nodes []*v1.Node) {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	for _, n := range nodes {
		if n == nil {
			continue
		}
		for _, a := range nodeAddrs(n) {
			lb.nodeAddrs[a] = n.Name
		}
	}
}

// isNodeAddr reports whether a is the address of a node seen by this process.
func (lb *LoadBalancer) isNodeAddr(a netip.Addr) bool {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	_, ok := lb.nodeAddrs[a.Unmap()]
	return ok
}

// externalIP returns the router's external IP, from the cache when known.
func (lb *LoadBalancer) externalIP(ctx context.Context) (netip.Addr, error) {
	lb.mu.Lock()
	ext := lb.external
	lb.mu.Unlock()
	if ext.IsValid() {
		return ext, nil
	}
	return lb.refreshExternalIP(ctx)
}

// refreshExternalIP asks the router for its external IP and caches it.
func (lb *LoadBalancer) refreshExternalIP(ctx context.Context) (netip.Addr, error) {
	ext, err := lb.cfg.Client.ExternalIP(ctx)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("loadbalancer: get external IP: %w", err)
	}
	if !ext.Unmap().Is4() {
		return netip.Addr{}, fmt.Errorf("loadbalancer: get external IP: router reports %q, not an IPv4 address", ext)
	}
	ext = ext.Unmap()
	lb.mu.Lock()
	old := lb.external
	lb.external = ext
	lb.mu.Unlock()
	if old != ext {
		klog.FromContext(ctx).Info("Router external IP", "ip", ext, "previous", old, "public", igd.IsPublic(ext))
	}
	return ext, nil
}

// acquire waits until no other operation on o is in flight and marks one as
// in flight; release ends it. No lock is held while waiting or after it
// returns: operations on other Services proceed in parallel.
func (lb *LoadBalancer) acquire(ctx context.Context, o owner) (release func(), err error) {
	for {
		lb.mu.Lock()
		ch, busy := lb.busy[o.token]
		if !busy {
			ch = make(chan struct{})
			lb.busy[o.token] = ch
			lb.mu.Unlock()
			return func() { lb.releaseBusy(o, ch) }, nil
		}
		lb.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, fmt.Errorf("loadbalancer: service %s: waiting for another operation: %w", o.key(), ctx.Err())
		}
	}
}

// tryAcquire is acquire that gives up at once when o is busy.
func (lb *LoadBalancer) tryAcquire(o owner) (release func(), ok bool) {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	if _, busy := lb.busy[o.token]; busy {
		return nil, false
	}
	ch := make(chan struct{})
	lb.busy[o.token] = ch
	return func() { lb.releaseBusy(o, ch) }, true
}

// deletedTTL bounds how long a deleted Service is remembered: far longer
// than a background pass can work from its list of Services.
const deletedTTL = time.Hour

// markDeleted records that the Service with this UID had its mappings
// removed; the caller holds its gate.
func (lb *LoadBalancer) markDeleted(uid types.UID) {
	if uid == "" {
		return
	}
	lb.mu.Lock()
	defer lb.mu.Unlock()
	now := lb.cfg.Clock.Now()
	for u, at := range lb.deleted {
		if now.Sub(at) > deletedTTL {
			delete(lb.deleted, u)
		}
	}
	lb.deleted[uid] = now
}

// undelete forgets that the Service was deleted: it is served again.
func (lb *LoadBalancer) undelete(uid types.UID) {
	lb.mu.Lock()
	delete(lb.deleted, uid)
	lb.mu.Unlock()
}

// wasDeleted reports whether the Service's mappings were removed and no
// Ensure served it since.
func (lb *LoadBalancer) wasDeleted(uid types.UID) bool {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	_, ok := lb.deleted[uid]
	return ok
}

func (lb *LoadBalancer) releaseBusy(o owner, ch chan struct{}) {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	delete(lb.busy, o.token)
	close(ch)
}
