package main

import (
	"context"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	cloudproviderapi "k8s.io/cloud-provider/api"
	"k8s.io/utils/ptr"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/fake/cluster"
	"github.com/ccmkit/ccmkit/loadbalancer"
	"github.com/ccmkit/ccmkit/provider/edge"
)

// permission is one verb on one resource ("services/status"), of an API
// group ("" core), in a namespace ("" = every namespace, or cluster-scoped).
type permission struct{ verb, group, resource, namespace string }

func (p permission) String() string {
	s := p.verb + " " + p.resource
	if p.group != "" {
		s += "." + p.group
	}
	if p.namespace != "" {
		s += " in " + p.namespace
	}
	return s
}

// ccmOnlyInTheApp are the permissions of the CCM manifests that the fake
// cluster cannot show used: the cloud-controller-manager command itself
// takes them, not the controllers it runs.
var ccmOnlyInTheApp = map[permission]string{
	{"get", "coordination.k8s.io", "leases", "kube-system"}:    "leader election (--leader-elect) reads its Lease",
	{"create", "coordination.k8s.io", "leases", "kube-system"}: "leader election creates its Lease",
	{"update", "coordination.k8s.io", "leases", "kube-system"}: "leader election renews and releases its Lease",
}

// TestRBACIsWhatTheCodeUses runs each mode's controllers through a
// Service's life on a fake clientset (a node initialized, a Service
// mapped, changed, its address changed by the router, deleted) and checks
// the manifests' RBAC against the API calls they made: every call is
// allowed, and every permission granted was used, or is listed (with why)
// as taken only where the fake cannot show it.
func TestRBACIsWhatTheCodeUses(t *testing.T) {
	t.Run("cloud-controller-manager", func(t *testing.T) {
		router := fake.NewRouter(fake.RouterConfig{})
		ann := newAnnouncer()
		// The node's address in the cloud-config replaces the one it
		// registered with (a patch of its status), and its beta zone label
		// is copied to the GA key (a patch of the node).
		cfg := edge.Default()
		cfg.Instances.Nodes = map[string]edge.NodeConfig{"n1": {Addresses: []edge.NodeAddress{{Type: "InternalIP", Address: "192.168.1.10"}}}}
		cloud, err := edge.New(cfg, edge.Options{Client: router.Client(netip.MustParseAddr("192.168.1.10")), Announcer: ann})
		if err != nil {
			t.Fatal(err)
		}
		h, err := cluster.Start(t.Context(), cluster.Config{Cloud: cloud})
		if err != nil {
			t.Fatal(err)
		}
		defer h.Stop()
		serviceLife(t, h.Client, router, ann, "", cluster.InternalIP("192.168.1.20"), cluster.NodeLabel(v1.LabelFailureDomainBetaZone, "z1"))
		roles, bound := rbacOf(t, "manifests", "kube-system", "cloud-controller-manager")
		checkRBAC(t, h.Client, roles, bound, ccmOnlyInTheApp)
	})

	t.Run("standalone", func(t *testing.T) {
		router := fake.NewRouter(fake.RouterConfig{})
		ann := newAnnouncer()
		cloud, err := edge.New(edge.Default(), edge.Options{Client: router.Client(netip.MustParseAddr("192.168.1.10")), Announcer: ann, Class: DefaultClass})
		if err != nil {
			t.Fatal(err)
		}
		client := k8sfake.NewClientset()
		_, o := standaloneCmd()
		o.bindAddress = ""
		o.leaseNamespace = "edge-load-balancer"
		// Renewed many times during the test (an update); a busy machine
		// must not lose the Lease.
		o.leaseDuration, o.renewDeadline, o.retryPeriod = time.Minute, 50*time.Second, 100*time.Millisecond
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- o.runOn(ctx, client, cluster.ClientBuilder(client), cloud) }()
		serviceLife(t, client, router, ann, DefaultClass, cluster.InternalIP("192.168.1.10"), cluster.Initialized())
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("runOn: %v", err)
		}
		roles, bound := rbacOf(t, standaloneDir, "edge-load-balancer", "edge-load-balancer")
		checkRBAC(t, client, roles, bound, nil)
	})
}

// serviceLife takes a node and a Service through their lives on client's
// objects (through its tracker, so that only the controllers' calls are
// recorded): the node (cluster.Node with nodeOpts) appears (and, with class
// "", is initialized and relabelled), the Service (of class, "" none) is
// mapped, gains a port, follows the router's new external IP (a repair pass
// after an announced restart), and is deleted.
func serviceLife(t *testing.T, client *k8sfake.Clientset, router *fake.Router, ann *announcer, class string, nodeOpts ...cluster.NodeOption) {
	t.Helper()
	tr := client.Tracker()
	services := v1.SchemeGroupVersion.WithResource("services")
	if err := tr.Add(cluster.Node("n1", nodeOpts...)); err != nil {
		t.Fatal(err)
	}
	// With the cloud node controller (class ""), the node is initialized,
	// its address replaced (a patch of its status), then it gets another
	// beta zone label (a kubelet of old) that the controller copies to the
	// GA key (a get and a patch), all before the Service exists: a node
	// sync of upstream's service controller overlapping a Service's first
	// sync is a data race there.
	nodes := v1.SchemeGroupVersion.WithResource("nodes")
	nodeUntil := func(what string, done func(*v1.Node) bool) *v1.Node {
		t.Helper()
		var n *v1.Node
		// A bound on a failure to converge, not a speed check.
		err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			obj, err := tr.Get(nodes, "", "n1")
			n, _ = obj.(*v1.Node)
			return err == nil && done(n), err
		})
		if err != nil {
			t.Fatalf("waiting for node n1 %s: %v; last seen %+v", what, err, n)
		}
		return n.DeepCopy()
	}
	if class == "" {
		n := nodeUntil("to be initialized with the cloud-config's address", func(n *v1.Node) bool {
			return !slices.ContainsFunc(n.Spec.Taints, func(t v1.Taint) bool { return t.Key == cloudproviderapi.TaintExternalCloudProvider }) &&
				slices.Contains(n.Status.Addresses, v1.NodeAddress{Type: v1.NodeInternalIP, Address: "192.168.1.10"})
		})
		n.Labels[v1.LabelFailureDomainBetaZone] = "z2"
		if err := tr.Update(nodes, n, ""); err != nil {
			t.Fatal(err)
		}
		nodeUntil("to get the GA zone label", func(n *v1.Node) bool { return n.Labels[v1.LabelTopologyZone] == "z2" })
	}

	svc := cluster.Service("default", "web", cluster.Port("http", v1.ProtocolTCP, 8080, 30080),
		cluster.Annotation(loadbalancer.AnnotationLoadBalancerType, loadbalancer.AnnotationValue))
	if class != "" {
		svc.Spec.LoadBalancerClass = &class
	}
	if err := tr.Add(svc); err != nil {
		t.Fatal(err)
	}
	get := func() *v1.Service {
		obj, err := tr.Get(services, "default", "web")
		if err != nil {
			t.Fatal(err)
		}
		return obj.(*v1.Service)
	}
	until := func(what string, done func(*v1.Service) bool) {
		t.Helper()
		// A bound on a failure to converge, not a speed check.
		err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			return done(get()), nil
		})
		if err != nil {
			t.Fatalf("waiting for %s: %v; Service as last seen: %+v", what, err, get().Status)
		}
	}
	ports := func(n int, ip string) func(*v1.Service) bool {
		return func(s *v1.Service) bool {
			ing := s.Status.LoadBalancer.Ingress
			return len(ing) == 1 && ing[0].IP == ip && len(ing[0].Ports) == n
		}
	}
	until("the Service's address", ports(1, fake.DefaultExternalIP.String()))

	s := get()
	s.Spec.Ports = append(s.Spec.Ports, v1.ServicePort{Name: "alt", Protocol: v1.ProtocolTCP, Port: 8081, NodePort: 30081})
	if err := tr.Update(services, s, "default"); err != nil {
		t.Fatal(err)
	}
	until("the second port", ports(2, fake.DefaultExternalIP.String()))

	moved := netip.MustParseAddr("198.51.101.8") // public, as the fake router's default
	router.SetExternalIP(moved)
	ann.restarts <- struct{}{}
	until("the router's new address", ports(2, moved.String()))

	s = get()
	s.DeletionTimestamp = ptr.To(metav1.Now())
	if err := tr.Update(services, s, "default"); err != nil {
		t.Fatal(err)
	}
	until("no finalizer", func(s *v1.Service) bool { return len(s.Finalizers) == 0 })
	if err := tr.Delete(services, "default", "web"); err != nil {
		t.Fatal(err)
	}
	if ms := router.Mappings(); len(ms) != 0 {
		t.Errorf("router table after the delete: %v", ms)
	}
}

// rbacOf returns the rules of dir's roles (by "Kind/namespace/name"; a Role
// without a namespace is in ns, as kustomize puts it) and which of them are
// bound to the service account ns/sa.
func rbacOf(t *testing.T, dir, ns, sa string) (roles map[string][]rbacv1.PolicyRule, bound map[string]bool) {
	t.Helper()
	roles, bound = map[string][]rbacv1.PolicyRule{}, map[string]bool{}
	or := func(a, b string) string {
		if a != "" {
			return a
		}
		return b
	}
	for _, obj := range decodeManifests(t, dir) {
		var subjects []rbacv1.Subject
		var ref rbacv1.RoleRef
		refNS := ""
		switch o := obj.(type) {
		case *rbacv1.ClusterRole:
			roles["ClusterRole//"+o.Name] = o.Rules
		case *rbacv1.Role:
			roles["Role/"+or(o.Namespace, ns)+"/"+o.Name] = o.Rules
		case *rbacv1.ClusterRoleBinding:
			subjects, ref = o.Subjects, o.RoleRef
		case *rbacv1.RoleBinding:
			subjects, ref = o.Subjects, o.RoleRef
			if ref.Kind == "Role" {
				refNS = or(o.Namespace, ns)
			}
		}
		for _, s := range subjects {
			if s.Kind == "ServiceAccount" && s.Name == sa && or(s.Namespace, ns) == ns {
				bound[ref.Kind+"/"+refNS+"/"+ref.Name] = true
			}
		}
	}
	return roles, bound
}

// checkRBAC compares the calls recorded by client with the rules of the
// roles bound: every call allowed, every permission granted used or in
// elsewhere. It first waits, bounded, for calls made after the Service's
// life (events are recorded asynchronously).
func checkRBAC(t *testing.T, client *k8sfake.Clientset, roles map[string][]rbacv1.PolicyRule, bound map[string]bool, elsewhere map[permission]string) {
	t.Helper()
	var granted []permission
	for _, key := range slices.Sorted(maps.Keys(roles)) {
		if !bound[key] {
			continue
		}
		kind, rest, _ := strings.Cut(key, "/")
		ns, _, _ := strings.Cut(rest, "/")
		if kind == "ClusterRole" {
			ns = ""
		}
		for _, r := range roles[key] {
			if len(r.NonResourceURLs) > 0 || len(r.ResourceNames) > 0 {
				t.Errorf("%s: rule %+v: the test compares only whole resources", key, r)
			}
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					for _, v := range r.Verbs {
						granted = append(granted, permission{v, g, res, ns})
					}
				}
			}
		}
	}
	usedBy := func(p permission, calls []permission) bool {
		return slices.ContainsFunc(calls, func(c permission) bool {
			return c.verb == p.verb && c.group == p.group && c.resource == p.resource && (p.namespace == "" || c.namespace == p.namespace)
		})
	}
	unused := func(calls []permission) (out []permission) {
		for _, p := range granted {
			if _, ok := elsewhere[p]; !ok && !usedBy(p, calls) {
				out = append(out, p)
			}
		}
		return out
	}
	var calls []permission
	// A bound on a failure to converge, not a speed check.
	_ = wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		calls = recordedCalls(client.Actions())
		return len(unused(calls)) == 0, nil
	})
	for _, c := range calls {
		if !allowed(roles, bound, c.group, c.resource, c.verb, c.namespace) {
			t.Errorf("the code calls %s, which no rule allows", c)
		}
	}
	for _, p := range unused(calls) {
		t.Errorf("the RBAC grants %s, which the code never used", p)
	}
	for p, why := range elsewhere {
		if !slices.Contains(granted, p) {
			t.Errorf("the RBAC lacks %s (%s)", p, why)
		}
	}
	if t.Failed() {
		t.Logf("calls made: %v", calls)
	}
}

// recordedCalls returns the distinct permissions the actions needed, sorted.
func recordedCalls(actions []k8stesting.Action) []permission {
	seen := map[permission]bool{}
	for _, a := range actions {
		res := a.GetResource()
		p := permission{verb: a.GetVerb(), group: res.Group, resource: res.Resource, namespace: a.GetNamespace()}
		if sub := a.GetSubresource(); sub != "" {
			p.resource += "/" + sub
		}
		seen[p] = true
	}
	return slices.SortedFunc(maps.Keys(seen), func(a, b permission) int { return strings.Compare(a.String(), b.String()) })
}

// announcer is a loadbalancer.Announcer the test tells of router restarts.
type announcer struct{ restarts chan struct{} }

func newAnnouncer() *announcer { return &announcer{restarts: make(chan struct{}, 1)} }

func (a *announcer) ListenAnnounce(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

func (a *announcer) Restarts() <-chan struct{} { return a.restarts }
