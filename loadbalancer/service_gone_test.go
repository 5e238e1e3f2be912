package loadbalancer

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sfake "k8s.io/client-go/kubernetes/fake"

	"github.com/ccmkit/ccmkit/fake"
	fakecluster "github.com/ccmkit/ccmkit/fake/cluster"
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
