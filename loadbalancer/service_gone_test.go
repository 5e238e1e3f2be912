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

// A Service can leave the API without EnsureLoadBalancerDeleted (its
// finalizer removed by hand, as users do when a delete hangs). What this
// process held for it must not outlive its mappings: its keys are
// forgotten once no pass lists it, and neither block another Service nor
// make the probe report a lost mapping for ever.

// a is deleted from the API without EnsureLoadBalancerDeleted; nothing
// renews its mapping, which expires. A pass that no longer lists a forgets
// its keys (forgetGone): the probe reports no lost mapping of a, and b,
// wanting TCP/80, free on the router and wanted by no other Service, is
// served.
func TestKeysOfAServiceGoneFromTheAPIDoNotBlockOthersForever(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{}, fake.RouterConfig{})
	nodes := threeNodes()
	a := lbService("default", "a", withPorts(port("http", v1.ProtocolTCP, 80, 30080)))
	cluster := k8sfake.NewClientset(a)
	if err := e.lb.Initialize(ctx, fakecluster.ClientBuilder(cluster)); err != nil {
		t.Fatal(err)
	}
	recordStatus(t, cluster, a, e.mustEnsure(t, a, nodes))
	if err := cluster.CoreV1().Services("default").Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err) // finalizer removed by hand: no EnsureLoadBalancerDeleted
	}
	e.clock.Step(DefaultLease + time.Minute) // nothing renews a's mapping
	e.lb.forgetGone(ctx, nil)                // as a pass does, with a no longer listed
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

// a's EnsureLoadBalancerDeleted fails (the router is unreachable), so a is
// marked deleted and its keys stay held. The delete hangs and the user
// removes the finalizer by hand. Once a's lease has run out and its deleted
// mark has outlived deletedTTL, pruneDeleted and a pass's forgetGone drop
// its keys: the probe reports no lost mapping of a, and b, wanting TCP/80,
// is served.
func TestKeysOfAServiceWhoseDeleteFailedAndThatIsGoneDoNotBlockOthersForever(t *testing.T) {
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
