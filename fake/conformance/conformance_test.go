package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/api"

	"github.com/ccmkit/ccmkit/fake/conformance"
)

// memLB is an in-memory LoadBalancer that keeps its promises unless told
// to break one.
type memLB struct {
	breaks  string // the promise to break; "" = none
	mu      sync.Mutex
	lbs     map[string]*v1.LoadBalancerStatus
	fwd     map[string][]conformance.Forward // what the backend forwards, by Service
	ensures int
	retry   map[string]bool // Services whose next Ensure asks for a retry
	last    string          // for breaking the concurrency promise
}

func newMemLB(breaks string) *memLB {
	return &memLB{breaks: breaks, lbs: map[string]*v1.LoadBalancerStatus{}, fwd: map[string][]conformance.Forward{}, retry: map[string]bool{}}
}

// The promises, as the suite names them.
const (
	idempotent     = "EnsureLoadBalancer is idempotent"
	getAfterEnsure = "GetLoadBalancer after EnsureLoadBalancer reports it exists with the same status"
	deleteMissing  = "EnsureLoadBalancerDeleted of a missing load balancer returns nil"
	getAfterDelete = "GetLoadBalancer after EnsureLoadBalancerDeleted reports it does not exist"
	elsewhere      = "ImplementedElsewhere is returned unwrapped"
	readOnly       = "Services and Nodes passed in are never modified"
	concurrent     = "Calls for different Services may run concurrently"
	retryPromise   = "A RetryError is an *api.RetryError reachable with errors.As"
	portChange     = "EnsureLoadBalancer after a port change forwards the new ports only"
	nodeChange     = "UpdateLoadBalancer after a node change forwards to the nodes given only"
	nothingLeft    = "EnsureLoadBalancerDeleted leaves nothing behind"
)

// forwards is what a load balancer for svc over nodes forwards.
func forwards(svc *v1.Service, nodes []*v1.Node) []conformance.Forward {
	var names []string
	for _, n := range nodes {
		names = append(names, n.Name)
	}
	var out []conformance.Forward
	for _, p := range svc.Spec.Ports {
		out = append(out, conformance.Forward{Protocol: p.Protocol, Port: p.Port, NodePort: p.NodePort, Nodes: names})
	}
	return out
}

const elsewhereClass = "elsewhere"

func svcKey(s *v1.Service) string { return s.Namespace + "/" + s.Name }

func (m *memLB) GetLoadBalancer(_ context.Context, _ string, svc *v1.Service) (*v1.LoadBalancerStatus, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := svcKey(svc)
	if m.breaks == concurrent {
		k = m.last
	}
	st, ok := m.lbs[k]
	if !ok {
		return nil, false, nil
	}
	st = st.DeepCopy()
	if m.breaks == getAfterEnsure {
		st.Ingress[0].IP = "198.51.100.99"
	}
	return st, true, nil
}

func (m *memLB) GetLoadBalancerName(_ context.Context, cluster string, svc *v1.Service) string {
	return cluster + "-" + string(svc.UID)
}

func (m *memLB) EnsureLoadBalancer(_ context.Context, _ string, svc *v1.Service, nodes []*v1.Node) (*v1.LoadBalancerStatus, error) {
	if svc.Spec.LoadBalancerClass != nil && *svc.Spec.LoadBalancerClass == elsewhereClass {
		if m.breaks == elsewhere {
			return nil, fmt.Errorf("memlb: %w", cloudprovider.ImplementedElsewhere)
		}
		return nil, cloudprovider.ImplementedElsewhere
	}
	if m.breaks == readOnly {
		svc.Annotations = map[string]string{"memlb/touched": "yes"}
		nodes[0].Labels = map[string]string{"memlb/touched": "yes"}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	k := svcKey(svc)
	if m.retry[k] {
		delete(m.retry, k)
		re := api.NewRetryError("memlb: busy", 10*time.Millisecond)
		if m.breaks == retryPromise {
			return nil, fmt.Errorf("memlb: %v", re) // loses the type
		}
		return nil, re
	}
	m.ensures++
	ip := "198.51.100.1"
	if m.breaks == idempotent {
		ip = fmt.Sprintf("198.51.100.%d", m.ensures)
	}
	st := &v1.LoadBalancerStatus{Ingress: []v1.LoadBalancerIngress{{IP: ip}}}
	if m.breaks == concurrent {
		// One load balancer for everyone: the last Service ensured wins.
		clear(m.lbs)
		m.last = k
	}
	_, had := m.lbs[k]
	m.lbs[k] = st
	switch {
	case m.breaks == portChange && had:
		// Keeps the ports it was first given.
	case m.breaks == nothingLeft && had:
		// Adds the new ports, forgets the old ones without removing them.
		m.fwd[k+"/leaked"] = m.fwd[k]
		m.fwd[k] = forwards(svc, nodes)
	default:
		m.fwd[k] = forwards(svc, nodes)
	}
	return st.DeepCopy(), nil
}

func (m *memLB) UpdateLoadBalancer(ctx context.Context, cluster string, svc *v1.Service, nodes []*v1.Node) error {
	if m.breaks == nodeChange {
		return nil // keeps the nodes it was first given
	}
	_, err := m.EnsureLoadBalancer(ctx, cluster, svc, nodes)
	return err
}

func (m *memLB) EnsureLoadBalancerDeleted(_ context.Context, _ string, svc *v1.Service) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := svcKey(svc)
	if _, ok := m.lbs[k]; !ok && m.breaks == deleteMissing {
		return fmt.Errorf("memlb: no load balancer for %s", k)
	}
	if m.breaks == getAfterDelete {
		return nil
	}
	delete(m.lbs, k)
	delete(m.fwd, k)
	return nil
}

// Forwards is the backend's view of what it forwards for svc.
func (m *memLB) Forwards(_ context.Context, svc *v1.Service) ([]conformance.Forward, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.fwd[svcKey(svc)]), nil
}

// Leftovers is everything the backend holds.
func (m *memLB) Leftovers(context.Context) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for k, fs := range m.fwd {
		for _, f := range fs {
			out = append(out, fmt.Sprintf("%s %s %d->%d", k, f.Protocol, f.Port, f.NodePort))
		}
	}
	for k := range m.lbs {
		out = append(out, k)
	}
	return out, nil
}

// Exists is the backend view.
func (m *memLB) Exists(_ context.Context, svc *v1.Service) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.lbs[svcKey(svc)]
	return ok, nil
}

func memSetup(breaks string) conformance.LoadBalancerSetup {
	lb := newMemLB(breaks)
	cls := elsewhereClass
	other := conformance.DefaultService("conformance", "other-class", 99)
	other.Spec.LoadBalancerClass = &cls
	return conformance.LoadBalancerSetup{
		LoadBalancer: lb,
		Backend:      lb,
		Forwards:     lb.Forwards,
		Leftovers:    lb.Leftovers,
		Elsewhere:    other,
		ProvokeRetry: func(ctx context.Context, svc *v1.Service) func() error {
			lb.mu.Lock()
			defer lb.mu.Unlock()
			lb.retry[svcKey(svc)] = true
			return func() error {
				_, err := lb.EnsureLoadBalancer(ctx, "kubernetes", svc, conformance.DefaultNodes())
				return err
			}
		},
	}
}

func TestLoadBalancerSuitePassesOnACorrectBalancer(t *testing.T) {
	conformance.RunLoadBalancer(t, func(testing.TB) conformance.LoadBalancerSetup { return memSetup("") })
}

// TestLoadBalancerChecksFailOnBrokenPromises runs each check on a balancer
// that breaks its promise, and wants a *BrokenPromise naming it.
func TestLoadBalancerChecksFailOnBrokenPromises(t *testing.T) {
	checks := conformance.LoadBalancerChecks()
	names := map[string]bool{}
	for _, c := range checks {
		names[c.Promise] = true
	}
	for _, promise := range []string{idempotent, getAfterEnsure, deleteMissing, getAfterDelete, elsewhere, readOnly, concurrent, retryPromise, portChange, nodeChange, nothingLeft} {
		if !names[promise] {
			t.Fatalf("the suite has no check named %q", promise)
		}
		t.Run(promise, func(t *testing.T) {
			for _, c := range checks {
				if c.Promise != promise {
					continue
				}
				err := c.Run(t.Context(), memSetup(promise))
				wantBroken(t, err, promise)
			}
		})
	}
}

func wantBroken(t *testing.T, err error, promise string) {
	t.Helper()
	var bp *conformance.BrokenPromise
	switch {
	case err == nil:
		t.Fatalf("the check passed on an implementation breaking %q", promise)
	case !errors.As(err, &bp):
		t.Fatalf("the check failed with %v, not a *BrokenPromise", err)
	case bp.Promise != promise:
		t.Fatalf("the check reported broken promise %q, want %q: %v", bp.Promise, promise, err)
	case !strings.Contains(err.Error(), promise):
		t.Fatalf("the error %q does not name the promise", err)
	}
	t.Log(err)
}

// A promise the setup cannot check and names in Skip is skipped.
func TestSkippedWhenOptedOutByName(t *testing.T) {
	lb := minimalLB()
	lb.Skip = []string{conformance.PromiseElsewhere, conformance.PromiseRetry, conformance.PromisePortChange, conformance.PromiseNodeChange, conformance.PromiseNothingLeft}
	for _, c := range conformance.LoadBalancerChecks() {
		if _, ok := uncheckedLB[c.Promise]; !ok {
			continue
		}
		if err := c.Run(t.Context(), lb); !errors.Is(err, conformance.ErrSkipped) {
			t.Errorf("%s: got %v, want ErrSkipped", c.Promise, err)
		}
	}
	inst := minimalInstances()
	inst.Skip = []string{conformance.PromiseGone, conformance.PromiseShutdown, conformance.PromiseZone}
	for _, c := range conformance.InstancesV2Checks() {
		if _, ok := uncheckedInstances[c.Promise]; !ok {
			continue
		}
		if err := c.Run(t.Context(), inst); !errors.Is(err, conformance.ErrSkipped) {
			t.Errorf("%s: got %v, want ErrSkipped", c.Promise, err)
		}
	}
}

// Skip names only promises a setup may leave unchecked: any other name (a
// typo, a promise checked on every setup) is a setup error naming the
// field, for every check.
func TestSkipOfAnotherPromiseIsASetupError(t *testing.T) {
	for _, name := range []string{idempotent, "A RetryError is an api.RetryError"} {
		lb := memSetup("")
		lb.Skip = []string{name}
		for _, c := range conformance.LoadBalancerChecks() {
			wantSetupError(t, c.Promise, c.Run(t.Context(), lb), "LoadBalancerSetup.Skip")
		}
		inst := memInstancesSetup("")
		inst.Skip = []string{name}
		for _, c := range conformance.InstancesV2Checks() {
			wantSetupError(t, c.Promise, c.Run(t.Context(), inst), "InstancesV2Setup.Skip")
		}
	}
}

func wantSetupError(t *testing.T, promise string, err error, field string) {
	t.Helper()
	var bp *conformance.BrokenPromise
	if err == nil || errors.Is(err, conformance.ErrSkipped) || errors.As(err, &bp) || !strings.Contains(err.Error(), field) {
		t.Errorf("%s: got %v, want a setup error naming %s", promise, err, field)
	}
}

// memInstances is an InstancesV2 over a fixed inventory that keeps its
// promises unless told to break one.
type memInstances struct {
	breaks   string
	mu       sync.Mutex
	calls    int
	exists   map[string]bool // by ProviderID
	shutdown map[string]bool // by ProviderID
}

const (
	instExists       = "InstanceExists is true for instances that exist"
	instGone         = "InstanceExists is false for instances that are gone"
	instStable       = "InstanceMetadata is stable across calls"
	instForeign      = "A foreign ProviderID is an error, never reported gone"
	instReadOnly     = "Nodes passed in are never modified"
	instNoProviderID = "An existing node without spec.providerID is found"
	instProviderID   = "InstanceMetadata's ProviderID is the node's spec.providerID"
	instRunning      = "InstanceShutdown is false for running instances"
	instShutdown     = "InstanceShutdown is true for instances shut down, which still exist"
	instZone         = "InstanceMetadata's Zone and Region are the node's"
)

// id returns the node's ProviderID, found by name when it has none.
func (m *memInstances) id(node *v1.Node) (string, error) {
	switch {
	case node.Spec.ProviderID == "" && m.breaks != instNoProviderID:
		return "mem://" + node.Name, nil
	case !strings.HasPrefix(node.Spec.ProviderID, "mem://"):
		return "", fmt.Errorf("node %s: providerID %q is not ours", node.Name, node.Spec.ProviderID)
	}
	return node.Spec.ProviderID, nil
}

func (m *memInstances) InstanceExists(_ context.Context, node *v1.Node) (bool, error) {
	if m.breaks == instReadOnly {
		node.Spec.ProviderID = strings.ToLower(node.Spec.ProviderID) + "/"
	}
	id, err := m.id(node)
	if err != nil {
		if m.breaks == instForeign {
			return false, nil
		}
		return false, err
	}
	switch m.breaks {
	case instExists:
		return false, nil
	case instGone:
		return true, nil
	}
	return m.exists[id], nil
}

func (m *memInstances) InstanceShutdown(_ context.Context, node *v1.Node) (bool, error) {
	id, err := m.id(node)
	if err != nil {
		return false, err
	}
	switch m.breaks {
	case instRunning:
		return true, nil
	case instShutdown:
		return false, nil
	}
	return m.shutdown[id], nil
}

func (m *memInstances) InstanceMetadata(_ context.Context, node *v1.Node) (*cloudprovider.InstanceMetadata, error) {
	id, err := m.id(node)
	if err != nil {
		return nil, err
	}
	if m.breaks == instProviderID && node.Spec.ProviderID == "" {
		id = "mem://i-" + node.Name // another ID than the node gets later
	}
	m.mu.Lock()
	m.calls++
	n := m.calls
	m.mu.Unlock()
	zone := "zone-a"
	switch m.breaks {
	case instStable:
		zone = fmt.Sprintf("zone-%d", n)
	case instZone:
		zone = "" // dropped
	}
	return &cloudprovider.InstanceMetadata{ProviderID: id, Zone: zone, Region: "region-1"}, nil
}

func memNode(name string) *v1.Node {
	return &v1.Node{ObjectMeta: metaName(name), Spec: v1.NodeSpec{ProviderID: "mem://" + name}}
}

func memInstancesSetup(breaks string) conformance.InstancesV2Setup {
	return conformance.InstancesV2Setup{
		Instances: &memInstances{
			breaks:   breaks,
			exists:   map[string]bool{"mem://alive": true, "mem://sleeping": true},
			shutdown: map[string]bool{"mem://sleeping": true},
		},
		Existing: []*v1.Node{memNode("alive")},
		Gone:     []*v1.Node{memNode("dead")},
		Shutdown: []*v1.Node{memNode("sleeping")},
		Zones:    map[string]cloudprovider.Zone{"alive": {FailureDomain: "zone-a", Region: "region-1"}},
	}
}

func TestInstancesV2SuitePassesOnACorrectInventory(t *testing.T) {
	conformance.RunInstancesV2(t, func(testing.TB) conformance.InstancesV2Setup { return memInstancesSetup("") })
}

func TestInstancesV2ChecksFailOnBrokenPromises(t *testing.T) {
	checks := conformance.InstancesV2Checks()
	for _, promise := range []string{instExists, instGone, instStable, instForeign, instReadOnly, instNoProviderID, instProviderID, instRunning, instShutdown, instZone} {
		t.Run(promise, func(t *testing.T) {
			found := false
			for _, c := range checks {
				if c.Promise == promise {
					found = true
					wantBroken(t, c.Run(t.Context(), memInstancesSetup(promise)), promise)
				}
			}
			if !found {
				t.Fatalf("the suite has no check named %q", promise)
			}
		})
	}
}

// DefaultNodes are for load balancers and routes: as InstancesV2 nodes they
// are a setup mistake, reported as such, never as a broken promise.
func TestInstancesV2RefusesDefaultNodes(t *testing.T) {
	s := memInstancesSetup("")
	s.Existing = conformance.DefaultNodes()
	for _, c := range conformance.InstancesV2Checks() {
		err := c.Run(t.Context(), s)
		var bp *conformance.BrokenPromise
		if err == nil || errors.As(err, &bp) || !strings.Contains(err.Error(), "DefaultNodes") {
			t.Errorf("%s: got %v, want a setup error naming DefaultNodes", c.Promise, err)
		}
	}
}

// Zones must say what every Existing node's zone is: a node left out is a
// setup error naming it, not a broken promise.
func TestInstancesV2ZonesMissingANodeIsASetupError(t *testing.T) {
	s := memInstancesSetup("")
	s.Existing = append(s.Existing, memNode("unzoned"))
	for _, c := range conformance.InstancesV2Checks() {
		err := c.Run(t.Context(), s)
		wantSetupError(t, c.Promise, err, "InstancesV2Setup.Zones")
		if err != nil && !strings.Contains(err.Error(), "unzoned") {
			t.Errorf("%s: error %q does not name the node", c.Promise, err)
		}
	}
}

func metaName(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Name: name} }
