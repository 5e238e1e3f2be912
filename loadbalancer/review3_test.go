package loadbalancer

import (
	"context"
	"net/netip"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sfake "k8s.io/client-go/kubernetes/fake"

	"github.com/ccmkit/ccmkit/fake"
	fakecluster "github.com/ccmkit/ccmkit/fake/cluster"
	"github.com/ccmkit/ccmkit/igd"
)

// Third adversarial review: the "lost" take-back, forgetGone, the per-port retry.

// W1 (lost take-back, fail-over overlap): p1 served a on TCP/80, then p2
// took over. Under p2, a gives up 80, b takes it, a wants 80 again and is
// refused. The router reboots. p1 (the old leader, still running during
// the overlap) still remembers a holding 80, so takes it back without
// arbitration; p2 remembers b holding it and does the same. Both
// Ensures succeed on one node: two processes of one cluster both took a key.
func TestReview3LostTakeBackByAnOldLeaderAndTheNewOneNeverBothSucceed(t *testing.T) {
	ctx := context.Background()
	r := fake.NewRouter(fake.RouterConfig{})
	node := newNode("node-a", addrA)
	nodes := []*v1.Node{node}
	a := lbService("default", "a", withPorts(port("http", v1.ProtocolTCP, 80, 30080)))
	cluster := k8sfake.NewClientset(node, a)
	p1, p2 := twoProcesses(t, r, cluster)
	st, err := p1.EnsureLoadBalancer(ctx, testCluster, a, nodes)
	if err != nil {
		t.Fatal(err)
	}
	recordStatus(t, cluster, a, st)
	// p2 leads now: a moves to 8080, b takes 80, a wants 80 again (refused).
	a.Spec.Ports[0].Port = 8080
	updateSpec(t, cluster, a)
	if st, err = p2.EnsureLoadBalancer(ctx, testCluster, a, nodes); err != nil {
		t.Fatal(err)
	}
	recordStatus(t, cluster, a, st)
	b := lbService("default", "b", withPorts(port("http", v1.ProtocolTCP, 80, 30081)))
	createService(t, cluster, b)
	if st, err = p2.EnsureLoadBalancer(ctx, testCluster, b, nodes); err != nil {
		t.Fatal(err)
	}
	recordStatus(t, cluster, b, st)
	a.Spec.Ports[0].Port = 80
	updateSpec(t, cluster, a)
	if _, err := p2.EnsureLoadBalancer(ctx, testCluster, a, nodes); err == nil {
		t.Fatal("a wanting 80 while b holds it: want an error")
	}
	r.Reboot()
	var errB error
	fired := false
	r.Intercept(fake.RouterHooks{AddPortMapping: func(ctx context.Context, from netip.Addr, m igd.Mapping, next fake.AddFunc) (igd.Mapping, error) {
		if from == addrB && !fired { // p1 read TCP/80 free and is about to add
			fired = true
			_, errB = p2.EnsureLoadBalancer(ctx, testCluster, b, nodes)
		}
		return next(ctx, m)
	}})
	_, errA := p1.EnsureLoadBalancer(ctx, testCluster, a, nodes)
	if errA == nil && errB == nil {
		t.Errorf("after a reboot both a (old leader) and b (new leader) were served TCP/80; table %q", e2eTable(r))
	}
}

// W2 (forgetGone skips deleted Services): a's EnsureLoadBalancerDeleted
// fails (the router is unreachable), so the deleted mark is set and a's
// keys stay held. The delete hangs; the user removes the finalizer by hand
// (as V9). forgetGone skips deleted Services and pruneDeleted keeps those
// with held keys, and no pass serves a deleted Service: a's keys are held
// for as long as the process runs. b is refused TCP/80 forever, and the
// probe "finds a lost mapping" every ProbeInterval, forever.
func TestReview3KeysOfAServiceWhoseDeleteFailedAndThatIsGoneDoNotBlockOthersForever(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{}, fake.RouterConfig{})
	nodes := threeNodes()
	a := lbService("default", "a", withPorts(port("http", v1.ProtocolTCP, 80, 30080)))
	cluster := k8sfake.NewClientset(a)
	if err := e.lb.Initialize(ctx, fakecluster.ClientBuilder(cluster)); err != nil {
		t.Fatal(err)
	}
	recordStatus(t, cluster, a, e.mustEnsure(t, a, nodes))
	e.lb.bg.setPhase(phaseStopped, nil) // the node cache was synced (Run's passes are not needed here)
	e.router.Intercept(fake.RouterHooks{
		ListPortMappings: func(ctx context.Context, _ netip.Addr, _ igd.Protocol, _ igd.PortRange, _ fake.ListFunc) ([]igd.Mapping, error) {
			return nil, context.DeadlineExceeded
		},
		GetPortMapping: func(ctx context.Context, _ netip.Addr, _ igd.Key, _ fake.GetFunc) (igd.Mapping, error) {
			return igd.Mapping{}, context.DeadlineExceeded
		},
	})
	if err := e.lb.EnsureLoadBalancerDeleted(ctx, testCluster, a); err == nil {
		t.Fatal("EnsureLoadBalancerDeleted with the router unreachable: want an error")
	}
	e.router.ClearHooks()
	if err := cluster.CoreV1().Services("default").Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err) // finalizer removed by hand: no further EnsureLoadBalancerDeleted
	}
	e.clock.Step(DefaultLease + 2*time.Hour) // nothing renews a's mapping; past deletedTTL
	e.lb.pruneDeleted()
	e.lb.forgetGone(ctx, nil) // as a pass does, with a no longer listed
	diffRows(t, "table after a's lease ran out", e.table(), nil)
	if e.lb.probe(ctx) {
		t.Errorf("probe reports a lost mapping of a Service gone from the API: a repair pass every ProbeInterval, forever")
	}
	b := lbService("default", "b", withPorts(port("http", v1.ProtocolTCP, 80, 30081)))
	createService(t, cluster, b)
	if _, err := e.ensure(t, b, nodes); err != nil {
		t.Errorf("b wanting TCP/80, free on the router and wanted by no other Service: %v", err)
	}
}
