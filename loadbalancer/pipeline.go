// This file is the load balancer's pipeline, read top-down: the
// cloudprovider.LoadBalancer calls, then the steps every Ensure, Update and
// Delete takes a Service through: select it, serve each of its IP families
// (the family step: each through its family, family.go: IPv4 as mappings,
// IPv6 as pinholes), plan its ports, prove what the router holds, write,
// report its status. The Service-level
// work (its families, ports, admission, target nodes, what its status
// records, how its families' ingresses join into one status, events) is
// done here; other files are handed plain data, and what a step asks of
// them is named where it is called: owner.go (the owner token and
// description), pinholes.go (IPv6 pinholes, from a pinholeRequest), read.go
// and the router mode (mode.go), converge.go (the writes), admit.go and
// ports.go (admission and per-port errors), state.go (what this process
// holds).

package loadbalancer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/api"
	"k8s.io/klog/v2"

	"github.com/ccmkit/ccmkit/igd"
)

// GetLoadBalancerName returns the owner token of the Service's mappings, the
// second field of their descriptions; it depends only on cluster, namespace and name.
func (lb *LoadBalancer) GetLoadBalancerName(_ context.Context, clusterName string, service *v1.Service) string {
	return newOwner(clusterName, service.Namespace, service.Name).token
}

// EnsureLoadBalancer makes the router forward each port of the Service to
// its nodePort on one eligible node (writing nothing when nothing changes)
// and returns the status. A Service not selected by Config.Services loses the
// mappings its status or this process records (no router call when none),
// then gets cloudprovider.ImplementedElsewhere and, once, an opt-in event.
// A Service being deleted (deletionTimestamp set) is not served: nothing is
// written and its status is returned. A call after EnsureLoadBalancerDeleted of the same Service (same UID) is
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
			stale, err := lb.optedInSince(ctx, o, service)
			if err == nil && !stale {
				err = lb.withdraw(ctx, o, service)
			}
			if err != nil {
				return nil, err
			}
		}
		return nil, cloudprovider.ImplementedElsewhere
	}
	if service.DeletionTimestamp != nil {
		// Being deleted: EnsureLoadBalancerDeleted removes its mappings.
		// The node sync still calls Update for it, also in a process
		// that took over after another removed them: its status, nothing written.
		return service.Status.LoadBalancer.DeepCopy(), nil
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
		if lb.holdsPinholes(o, recordedPinholes(service)) { // an IPv6 family's
			return service.Status.LoadBalancer.DeepCopy(), true, nil
		}
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

// ---- Step 1: select the Service (its owner, whether it is handed to this
// LoadBalancer and opted in, whether it was deleted meanwhile). ----

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

// Serves reports whether EnsureLoadBalancer exposes svc (rather than
// answering cloudprovider.ImplementedElsewhere): a Service of type
// LoadBalancer handed to this LoadBalancer (Config.Class, Config.Classless)
// that opted in (see Config.Services). A caller that adds its finalizer
// only to Services served (provider/lbclass) leaves the others without it.
func (lb *LoadBalancer) Serves(svc *v1.Service) bool {
	return lb.handed(svc) && lb.optedIn(svc)
}

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

// selected reports whether selection serves svc.
func selected(selection ServiceSelection, svc *v1.Service) bool {
	return selection == AllServices || svc.Annotations[AnnotationLoadBalancerType] == AnnotationValue ||
		svc.Annotations[LegacyAnnotationLoadBalancerType] == AnnotationValue
}

// finalized reports whether svc carries Config.Finalizer: the caller set
// up its load balancer and will call EnsureLoadBalancerDeleted.
func (lb *LoadBalancer) finalized(svc *v1.Service) bool {
	return slices.Contains(svc.Finalizers, lb.cfg.Finalizer)
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
	return s == nil || len(s.held) == 0 && len(s.pinholes) == 0
}

// goneSinceDelete reports whether an Ensure of svc, in o's turn, comes after
// EnsureLoadBalancerDeleted removed svc's mappings (the deleted mark, same
// UID) with svc as it was before: the API server no longer has it, has
// another under its name, is deleting it, or has it wanting no load balancer
// from this LoadBalancer. The service controller's node sync calls
// UpdateLoadBalancer for each Service of a list taken before the delete;
// served, it would put back mappings that nothing removes before their lease
// ends. Without an API client (no Initialize) it reports false.
func (lb *LoadBalancer) goneSinceDelete(ctx context.Context, o owner, svc *v1.Service) (bool, error) {
	lb.mu.Lock()
	s := lb.services[o.token]
	marked := s != nil && s.deleted && s.deletedUID == svc.UID
	lb.mu.Unlock()
	client := lb.bg.apiClient()
	if !marked || client == nil {
		return false, nil
	}
	live, err := reread(ctx, client, svc)
	switch {
	case err != nil:
		return false, fmt.Errorf("loadbalancer: ensure service %s: re-read it after its delete: %w", o.key(), err)
	case live == nil:
		return true, nil
	}
	return live.UID != svc.UID || live.DeletionTimestamp != nil || !lb.Serves(live), nil
}

// reread returns svc as the API server has it now; nil when it has none.
func reread(ctx context.Context, client kubernetes.Interface, svc *v1.Service) (*v1.Service, error) {
	live, err := client.CoreV1().Services(svc.Namespace).Get(ctx, svc.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return live, err
}

// optedInSince reports whether svc, not opted in, is a stale copy: the API
// server has it (same UID, not being deleted) served by this LoadBalancer.
// The service controller's node sync calls UpdateLoadBalancer with the
// Services of its cache, which may predate an opt-in; withdrawn, the
// Service would lose its mappings, and the deleted mark would keep passes
// off it until an Ensure that, the Service unchanged since, never comes.
// Without an API client (no Initialize) it reports false.
func (lb *LoadBalancer) optedInSince(ctx context.Context, o owner, svc *v1.Service) (bool, error) {
	client := lb.bg.apiClient()
	if client == nil {
		return false, nil
	}
	live, err := reread(ctx, client, svc)
	if err != nil {
		return false, fmt.Errorf("loadbalancer: service %s: re-read it before withdrawing it (not opted in): %w", o.key(), err)
	}
	return live != nil && live.UID == svc.UID && live.DeletionTimestamp == nil && lb.Serves(live), nil
}

// hintOptIn records on svc, not selected, a Normal event saying how to opt
// in: once per UID per process, while the background work runs.
func (lb *LoadBalancer) hintOptIn(svc *v1.Service) {
	b := &lb.bg
	b.mu.Lock()
	w, ph, already := b.watch, b.phase, b.hinted[svc.UID]
	if ph == phaseRunning {
		b.hinted[svc.UID] = true
	}
	b.mu.Unlock()
	if ph != phaseRunning || already {
		return
	}
	w.recorder.Eventf(svc, v1.EventTypeNormal, EventReasonOptInRequired,
		"Not exposed on the router: only Services annotated %s=%s (or %s=%s) are; annotate the Service to expose it, or serve every Service (cloud-config services: all)",
		AnnotationLoadBalancerType, AnnotationValue, LegacyAnnotationLoadBalancerType, AnnotationValue)
}

// ---- Steps 2 to 4: plan its ports (the spec, admission, the node), prove
// what the router holds at its keys (read.go, through the router mode) and
// write (converge.go). ----

// operation says how serve runs.
type operation struct {
	pass  bool      // a background pass: leaves the deleted mark alone
	extra []igd.Key // more keys where the Service may hold mappings
}

// serve is EnsureLoadBalancer for a selected Service, and a pass's work on
// one, in turn t: the family step. Its ports are planned once (an invalid
// Service is withdrawn from every family); each family of the load
// balancer (family.go) then serves it if its spec.ipFamilies name the
// family, or removes what it holds there (a family dropped from the spec;
// while that fails, the status keeps its ingress); joinFamilies makes one
// status of what was served.
func (lb *LoadBalancer) serve(ctx context.Context, t *turn, svc *v1.Service, nodes []*v1.Node, op operation) (*v1.LoadBalancerStatus, error) {
	fams := families(svc)
	plans, invalid := planServicePorts(t.owner, svc)
	if !lb.servesAny(fams) {
		invalid = errors.Join(errNoFamily(t.owner, fams), invalid) // every problem reported
	}
	if invalid != nil {
		return nil, errors.Join(invalid, lb.withdrawIn(ctx, t, svc))
	}
	var got []familyStatus
	var dropped []error
	var kept []v1.LoadBalancerIngress // of dropped families not yet withdrawn
	for _, f := range lb.families {
		if !slices.Contains(fams, f.ipFamily()) {
			if !f.holds(t.owner, svc) {
				continue
			}
			if err := f.withdraw(ctx, t, svc); err != nil {
				dropped = append(dropped, err)
				kept = append(kept, recordedIngress(svc, f.ipFamily())...)
			}
			continue
		}
		st, err := f.serve(ctx, t, svc, plans, nodes, op)
		if errors.Is(err, ErrInvalidService) {
			// Ports the user asked to restrict must not stay open.
			return nil, errors.Join(err, lb.withdrawIn(ctx, t, svc))
		}
		got = append(got, familyStatus{family: f.ipFamily(), status: st, err: err})
	}
	st, err := lb.joinFamilies(t.owner, svc, fams, got)
	if derr := errors.Join(dropped...); derr != nil {
		if st != nil {
			// The status a pass records goes on naming what a dropped
			// family may still hold: the only record from which a
			// restarted or failed-over process removes it.
			st.Ingress = append(st.Ingress, kept...)
		}
		return st, errors.Join(err, derr)
	}
	return st, err
}

// recordedIngress returns the ingresses of svc's status of family fam.
func recordedIngress(svc *v1.Service, fam v1.IPFamily) []v1.LoadBalancerIngress {
	var out []v1.LoadBalancerIngress
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		ip, err := netip.ParseAddr(ing.IP)
		if err == nil && ip.Unmap().Is4() == (fam == v1.IPv4Protocol) {
			out = append(out, *ing.DeepCopy())
		}
	}
	return out
}

// families returns svc's IP families in the order of spec.ipFamilies; none
// (a Service the API server has not defaulted) is IPv4.
func families(svc *v1.Service) []v1.IPFamily {
	if len(svc.Spec.IPFamilies) == 0 {
		return []v1.IPFamily{v1.IPv4Protocol}
	}
	return svc.Spec.IPFamilies
}

// servesAny reports whether lb has a family for one of fams.
func (lb *LoadBalancer) servesAny(fams []v1.IPFamily) bool {
	return slices.ContainsFunc(lb.families, func(f family) bool { return slices.Contains(fams, f.ipFamily()) })
}

// ipv4Mappings is the IPv4 family: one port mapping per port of the
// Service, from the router's external address to a node's nodePort.
type ipv4Mappings struct{ lb *LoadBalancer }

func (ipv4Mappings) ipFamily() v1.IPFamily { return v1.IPv4Protocol }

func (m ipv4Mappings) serve(ctx context.Context, t *turn, svc *v1.Service, plans []portPlan, nodes []*v1.Node, op operation) (*v1.LoadBalancerStatus, error) {
	return m.lb.serveIPv4(ctx, t, svc, plans, nodes, op)
}

// holds: this process holds keys of o, or svc's status has an IPv4 ingress
// with ports.
func (m ipv4Mappings) holds(o owner, svc *v1.Service) bool {
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		if ip, err := netip.ParseAddr(ing.IP); err == nil && ip.Unmap().Is4() && len(ing.Ports) > 0 {
			return true
		}
	}
	return len(m.lb.keysHeldBy(o)) > 0
}

func (m ipv4Mappings) withdraw(ctx context.Context, t *turn, svc *v1.Service) error {
	return m.lb.withdrawMappings(ctx, t, svc)
}

// ipv6Pinholes is the IPv6 family: one pinhole per port of the Service, to
// one node's global address (no NAT), through Config.Pinholes.
type ipv6Pinholes struct{ lb *LoadBalancer }

func (ipv6Pinholes) ipFamily() v1.IPFamily { return v1.IPv6Protocol }

func (p ipv6Pinholes) serve(ctx context.Context, t *turn, svc *v1.Service, plans []portPlan, nodes []*v1.Node, op operation) (*v1.LoadBalancerStatus, error) {
	return p.lb.serveIPv6(ctx, t, svc, plans, nodes, op)
}

func (p ipv6Pinholes) holds(o owner, svc *v1.Service) bool {
	return p.lb.holdsPinholes(o, recordedPinholes(svc))
}

func (p ipv6Pinholes) withdraw(ctx context.Context, t *turn, svc *v1.Service) error {
	return p.lb.closePinholes(ctx, t, recordedPinholes(svc), nil)
}

// serveIPv4 serves svc's IPv4 family at plans (its ports, valid): each
// port mapped on the router. With every port refused, or with no node to
// map to and a port another holds, it returns the status saying so beside
// the error. An invalid Service (its loadBalancerIP, its
// externalTrafficPolicy) is returned as such, for the pipeline to withdraw.
func (lb *LoadBalancer) serveIPv4(ctx context.Context, t *turn, svc *v1.Service, plans []portPlan, nodes []*v1.Node, op operation) (*v1.LoadBalancerStatus, error) {
	o := t.owner
	var invalid error
	admitted, refused := lb.admit(o, svc, plans) // refused ports are withdrawn
	// Asked in every operation's turn: an address the router no longer
	// reports (its WAN link went down) is never served from a cache.
	ext, extErr := lb.refreshExternalIP(ctx)
	if extErr != nil && !errors.Is(extErr, ErrExternalIPNotUsable) {
		return nil, fmt.Errorf("loadbalancer: ensure service %s: %w", o.key(), extErr)
	}
	if extErr == nil {
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
			return nil, invalid // the pipeline withdraws it
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

// serveIPv6 serves svc's IPv6 family at plans (its ports, valid): it plans
// what the family needs of svc (the ports Config.Admit admits, the pinholes
// its status records, for Local the nodes with a ready endpoint) and
// servePinholes opens them. It returns the IPv6 ingress, each port that
// could not be opened with its reason, or why the family cannot be served,
// with an empty status when it holds no pinhole any more (pinholesGone).
func (lb *LoadBalancer) serveIPv6(ctx context.Context, t *turn, svc *v1.Service, plans []portPlan, nodes []*v1.Node, op operation) (*v1.LoadBalancerStatus, error) {
	if !op.pass {
		lb.update(t.owner, func(s *serviceState) { s.deleted = false })
	}
	req := pinholeRequest{plans: plans}
	req.admitted, req.refused = lb.admit(t.owner, svc, plans)
	req.recorded = recordedPinholes(svc)
	if svc.Spec.ExternalTrafficPolicy == v1.ServiceExternalTrafficPolicyLocal {
		withEndpoints, err := lb.localNodes(svc, nil)
		if err != nil {
			return nil, err // its pinholes stay until a node is eligible, or their leases end
		}
		req.local = withEndpoints
	}
	addr, failed, err := lb.servePinholes(ctx, t, req, nodes)
	switch {
	case err != nil && lb.pinholesGone(t.owner, err):
		return &v1.LoadBalancerStatus{}, err // for a pass to record: it lists no pinhole
	case err != nil:
		return nil, err
	}
	return status(addr, plans, portReasons(failed)), nil
}

// planPorts validates svc and returns the mappings it wants, sorted by key,
// for arbitration among IPv4 Services: every problem is reported, each as a
// *ServiceError naming the field; a Service without IPv4 is one.
func planPorts(o owner, svc *v1.Service) ([]portPlan, error) {
	plans, err := planServicePorts(o, svc)
	if fams := families(svc); !slices.Contains(fams, v1.IPv4Protocol) {
		return nil, errors.Join(errNoFamily(o, fams), err)
	}
	return plans, err
}

// planServicePorts is planPorts whatever svc's IP families.
func planServicePorts(o owner, svc *v1.Service) ([]portPlan, error) {
	var errs []error
	bad := func(field, value, reason string) {
		errs = append(errs, &ServiceError{Service: o.key(), Field: field, Value: value, Reason: reason})
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

// specKeys returns the keys of svc's ports that a router can map.
func specKeys(svc *v1.Service) []igd.Key {
	var out []igd.Key
	for _, p := range svc.Spec.Ports {
		if k, ok := portKey(p.Protocol, p.Port); ok {
			out = append(out, k)
		}
	}
	return out
}

// portKey is the router key of a Service port, if a router can map it.
func portKey(proto v1.Protocol, port int32) (igd.Key, bool) {
	p, ok := protocols[proto]
	return igd.Key{Protocol: p, ExternalPort: uint16(port)}, ok && port >= 1 && port <= 65535
}

// knownKeys returns every key where o may hold a mapping (unsorted, maybe
// repeated: read sorts and compacts them): the ports of svc's spec (or
// plans) and status, the keys o holds here, and extra.
func (lb *LoadBalancer) knownKeys(o owner, svc *v1.Service, plans []portPlan, extra ...igd.Key) []igd.Key {
	keys := slices.Clone(extra)
	if plans == nil {
		keys = append(keys, specKeys(svc)...)
	}
	for _, p := range plans {
		keys = append(keys, p.key)
	}
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		for _, p := range ing.Ports {
			if k, ok := portKey(p.Protocol, p.Port); ok {
				keys = append(keys, k)
			}
		}
	}
	lb.mu.Lock()
	if s := lb.services[o.token]; s != nil {
		for k := range s.held {
			keys = append(keys, k)
		}
	}
	lb.mu.Unlock()
	return keys // read sorts and compacts them
}

// recordedPinholes returns the pinholes svc's status records: each port of
// an ingress whose IP is a global IPv6 address, but none recorded with an
// error. A port with an error was not opened for svc (refused: another
// Service holds it, the router or Config.Admit refused it), so its record
// is no proof of ownership: it neither claims the pinhole from another
// Service nor has it closed when svc goes.
func recordedPinholes(svc *v1.Service) []pinholeKey {
	var out []pinholeKey
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		ip, err := netip.ParseAddr(ing.IP)
		if err != nil || !isGlobalIPv6(ip) {
			continue
		}
		for _, p := range ing.Ports {
			if p.Error != nil {
				continue
			}
			if k, ok := portKey(p.Protocol, p.Port); ok {
				out = append(out, pinholeKey{Protocol: k.Protocol, Addr: ip.WithZone(""), Port: k.ExternalPort})
			}
		}
	}
	return out
}

// specNodePorts returns the nodePort of each of svc's ports at keys this
// process holds nothing for.
func (lb *LoadBalancer) specNodePorts(o owner, svc *v1.Service, keys []igd.Key) map[igd.Key]uint16 {
	written := lb.writtenKeys(o)
	out := make(map[igd.Key]uint16)
	for _, p := range svc.Spec.Ports {
		k, ok := portKey(p.Protocol, p.Port)
		if ok && p.NodePort > 0 && p.NodePort < 65536 && slices.Contains(keys, k) && !written[k] {
			out[k] = uint16(p.NodePort)
		}
	}
	return out
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
		withEndpoints, err := lb.localNodes(svc, req.eligible)
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

// localNodes returns the nodes of eligible (nil: any node) with a ready
// endpoint of svc, a Service with externalTrafficPolicy Local: the one rule
// for where such a Service can be served. Its own request maps only to
// these, and with none it does not contend for a key (wants), so the two
// never disagree given the same nodes. Errors are endpointNodes'.
func (lb *LoadBalancer) localNodes(svc *v1.Service, eligible map[string]bool) (map[string]bool, error) {
	nodes, err := lb.endpointNodes(svc)
	if err != nil {
		return nil, err
	}
	if eligible != nil {
		maps.DeleteFunc(nodes, func(n string, _ bool) bool { return !eligible[n] })
	}
	return nodes, nil
}

// endpointNodes returns the nodes with a ready endpoint of svc. Only running
// background work knows them: before, and once Run returned, an
// api.RetryError (the mappings stay as they are); without Initialize, a
// *ServiceError (Local cannot be served).
func (lb *LoadBalancer) endpointNodes(svc *v1.Service) (map[string]bool, error) {
	ph, w := lb.bg.now()
	switch ph {
	case phaseRunning:
	case phaseNotStarted:
		return nil, &ServiceError{Service: svc.Namespace + "/" + svc.Name, Field: "spec.externalTrafficPolicy", Value: string(svc.Spec.ExternalTrafficPolicy),
			Reason: "Local needs the load balancer's background work (Initialize or Run) to watch EndpointSlices"}
	default:
		return nil, api.NewRetryError(fmt.Sprintf("loadbalancer: service %s/%s: the EndpointSlice cache is not current (background work %s)", svc.Namespace, svc.Name, ph), lb.cfg.RetryAfter)
	}
	sel := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: svc.Name})
	list, err := w.slices.EndpointSlices(svc.Namespace).List(sel)
	if err != nil {
		return nil, fmt.Errorf("loadbalancer: list endpoint slices of service %s/%s: %w", svc.Namespace, svc.Name, err)
	}
	out := make(map[string]bool)
	for _, es := range list {
		for _, ep := range es.Endpoints {
			if ep.NodeName != nil && (ep.Conditions.Ready == nil || *ep.Conditions.Ready) {
				out[*ep.NodeName] = true
			}
		}
	}
	return out, nil
}

// ---- Withdrawal: the same steps with no port wanted. ----

// withdraw removes o's mappings and keeps passes off the Service until an Ensure.
func (lb *LoadBalancer) withdraw(ctx context.Context, o owner, svc *v1.Service) error {
	t, err := lb.acquire(ctx, o)
	if err != nil {
		return err
	}
	defer t.release()
	now, uid := lb.cfg.Clock.Now(), svc.UID
	lb.update(o, func(s *serviceState) {
		s.deleted, s.deletedUID, s.deletedAt, s.warned = true, uid, now, netip.Addr{}
	})
	return lb.withdrawIn(ctx, t, svc)
}

// withdrawIn removes everything svc holds on each family (its mappings, its
// pinholes), in turn t. Served on no family, svc has none to retry
// (familyDown) nor warn about again.
func (lb *LoadBalancer) withdrawIn(ctx context.Context, t *turn, svc *v1.Service) error {
	lb.update(t.owner, func(s *serviceState) { s.familyDown, s.familyWarned = false, nil })
	var errs []error
	for _, f := range lb.families {
		errs = append(errs, f.withdraw(ctx, t, svc))
	}
	return errors.Join(errs...)
}

// withdrawMappings removes every mapping of svc, in turn t.
func (lb *LoadBalancer) withdrawMappings(ctx context.Context, t *turn, svc *v1.Service) error {
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

// ---- Step 5: report the status (and events; per-port errors: ports.go). ----

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

// warn records on svc, once per address and only while the background work
// runs, a Warning event that the external IP ext is not usable (err) or,
// when err is nil, not public.
func (lb *LoadBalancer) warn(o owner, svc *v1.Service, ext netip.Addr, err error) {
	if err == nil && igd.IsPublic(ext) {
		return
	}
	ph, w := lb.bg.now()
	if ph != phaseRunning {
		return
	}
	key := ext
	if !key.IsValid() {
		key = netip.IPv4Unspecified() // no address: warned as 0.0.0.0
	}
	var already bool
	lb.update(o, func(s *serviceState) { already, s.warned = s.warned == key, key })
	switch {
	case already:
	case err != nil:
		w.recorder.Eventf(svc, v1.EventTypeWarning, EventReasonExternalIPNotPublic, "Waiting for a usable external IP: %v", err)
	default:
		w.recorder.Eventf(svc, v1.EventTypeWarning, EventReasonExternalIPNotPublic, "The router's external IP %s is not a public address (double NAT or carrier-grade NAT): the Service is not reachable from the internet through it", ext)
	}
}

// familyNotServed records on svc a Warning event that family fam is not
// served, and why: once per reason, while the background work runs.
func (lb *LoadBalancer) familyNotServed(o owner, svc *v1.Service, fam v1.IPFamily, why error) {
	if joined, ok := why.(interface{ Unwrap() []error }); ok && len(joined.Unwrap()) > 0 {
		why = joined.Unwrap()[0] // the reason, without the retry joined to it
	}
	msg := why.Error()
	lb.mu.Lock()
	s := lb.services[o.token]
	already := s != nil && s.familyWarned[fam] == msg
	lb.mu.Unlock()
	if already {
		return
	}
	other := v1.IPv4Protocol
	if fam == v1.IPv4Protocol {
		other = v1.IPv6Protocol
	}
	if lb.tell(svc, v1.EventTypeWarning, EventReasonIPFamilyNotServed, "Not served on %s: %s; the Service is served on %s", fam, msg, other) {
		lb.mu.Lock()
		s := lb.stateLocked(o)
		if s.familyWarned == nil {
			s.familyWarned = make(map[v1.IPFamily]string)
		}
		s.familyWarned[fam] = msg
		lb.mu.Unlock()
	}
}

// tell records an event on svc while the background work runs (its recorder
// exists only then), and reports whether it did; svc nil records nothing.
func (lb *LoadBalancer) tell(svc *v1.Service, eventType, reason, format string, args ...any) bool {
	ph, w := lb.bg.now()
	if ph != phaseRunning || svc == nil {
		return false
	}
	w.recorder.Eventf(svc, eventType, reason, format, args...)
	return true
}

// admit splits plans (sorted) into the ports Config.Admit lets svc map and
// the refused ones, each with its PortError.
func (lb *LoadBalancer) admit(o owner, svc *v1.Service, plans []portPlan) ([]portPlan, map[igd.Key]*PortError) {
	if lb.cfg.Admit == nil || len(plans) == 0 {
		return plans, nil
	}
	keys := make([]igd.Key, len(plans))
	for i, p := range plans {
		keys[i] = p.key
	}
	why := lb.cfg.Admit(svc, keys)
	var admitted []portPlan
	refused := make(map[igd.Key]*PortError)
	for _, p := range plans {
		if err := why[p.key]; err != nil {
			refused[p.key] = &PortError{Service: o.key(), Key: p.key, Err: fmt.Errorf("%w: %w", ErrNotAdmitted, err)}
		} else {
			admitted = append(admitted, p)
		}
	}
	return admitted, refused
}

// notePorts records the ports of svc that could not be forwarded (for
// GetLoadBalancer and the background retry) and warns once about each
// failure and reason, as soon as the background work runs (a failure noted
// before is warned about at its next retry).
func (lb *LoadBalancer) notePorts(o owner, svc *v1.Service, failed map[igd.Key]*PortError) {
	reasons := portReasons(failed)
	var fresh []igd.Key
	lb.update(o, func(s *serviceState) {
		for k, why := range reasons {
			if s.told[k] != why {
				fresh = append(fresh, k)
			}
		}
		maps.DeleteFunc(s.told, func(k igd.Key, _ string) bool { _, ok := reasons[k]; return !ok })
		s.failed = failed
		if len(failed) == 0 {
			s.failed = nil
		}
	})
	if len(reasons) > 0 {
		lb.bg.poke() // retried in the background
	}
	slices.SortFunc(fresh, compareKeys)
	for _, k := range fresh {
		why := reasons[k]
		if lb.tell(svc, v1.EventTypeWarning, EventReasonPortNotForwarded,
			"Port %s is not forwarded (%s), the Service's other ports are: %v; %s", k, why, failed[k], advice(why, k)) {
			lb.update(o, func(s *serviceState) {
				if s.told == nil {
					s.told = make(map[igd.Key]string)
				}
				s.told[k] = why
			})
		}
	}
}

// EventReasonIPFamilyNotServed is a Warning's: one of a Service's IP families
// cannot be served (the message names it and why) while the other is.
const EventReasonIPFamilyNotServed = "IPFamilyNotServed"

// errNoPinholeClient is why IPv6 is not served without Config.Pinholes.
var errNoPinholeClient = errors.New("the router opens no IPv6 firewall pinholes (IPv6 is not enabled: no pinhole client; in provider/edge, gateway.ipv6.enabled)")

// familyStatus is one family's outcome of serving a Service: its status
// (one ingress) or why it is not served.
type familyStatus struct {
	family v1.IPFamily
	status *v1.LoadBalancerStatus
	err    error
}

// joinFamilies returns the status and error of o, svc of families fams,
// served on each family of got (in the load balancer's order, IPv4 first).
// The status has one ingress per family served, in the order of fams. A
// family not served while another is (one that failed, or one the load
// balancer has no family for) gets a Warning event saying why
// (familyNotServed); one that failed is retried in the background
// (familyDown). A family that failed without a status of its own (a router
// that failed: what it holds is not known) keeps its part of svc's status as
// it is (recordedIngress): for IPv6 the status is the only record of its
// pinholes, which a lost answer may have opened. With none served, the
// Service fails with each family's error, and a status for a pass to record
// when a family returned one.
func (lb *LoadBalancer) joinFamilies(o owner, svc *v1.Service, fams []v1.IPFamily, got []familyStatus) (*v1.LoadBalancerStatus, error) {
	var errs []error
	var down, served []v1.IPFamily
	for _, g := range got {
		if g.err == nil && g.status != nil {
			served = append(served, g.family)
			continue
		}
		down = append(down, g.family)
		errs = append(errs, g.err)
	}
	if len(served) == 0 {
		lb.update(o, func(s *serviceState) { s.familyDown = false }) // the caller retries
		err := errors.Join(errs...)
		if len(errs) == 1 {
			err = errs[0]
		}
		if !slices.ContainsFunc(got, func(g familyStatus) bool { return g.status != nil }) {
			return nil, err
		}
		st := &v1.LoadBalancerStatus{}
		for _, fam := range fams {
			if i := slices.IndexFunc(got, func(g familyStatus) bool { return g.family == fam }); i >= 0 {
				st.Ingress = append(st.Ingress, got[i].keptIngress(svc)...)
			}
		}
		return st, err
	}
	lb.update(o, func(s *serviceState) {
		s.familyDown = len(down) > 0
		for _, f := range served {
			delete(s.familyWarned, f)
		}
	})
	if len(down) > 0 {
		lb.bg.poke() // retried in the background
	}
	st := &v1.LoadBalancerStatus{}
	for _, f := range fams {
		i := slices.IndexFunc(got, func(g familyStatus) bool { return g.family == f })
		switch {
		case i < 0:
			lb.familyNotServed(o, svc, f, errNoPinholeClient)
		case slices.Contains(served, f):
			st.Ingress = append(st.Ingress, got[i].status.Ingress...)
		default:
			lb.familyNotServed(o, svc, f, got[i].err)
			if got[i].status == nil {
				st.Ingress = append(st.Ingress, got[i].keptIngress(svc)...)
			}
		}
	}
	return st, nil
}

// keptIngress is g's part of the status of svc, g not served: the status it
// returned, or, with none, svc's status's ingress of its family as it is.
func (g familyStatus) keptIngress(svc *v1.Service) []v1.LoadBalancerIngress {
	if g.status != nil {
		return g.status.Ingress
	}
	return recordedIngress(svc, g.family)
}
