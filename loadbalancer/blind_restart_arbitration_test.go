package loadbalancer

import (
	"context"
	"errors"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sfake "k8s.io/client-go/kubernetes/fake"

	fakecluster "github.com/ccmkit/ccmkit/fake/cluster"
	"github.com/ccmkit/ccmkit/igd"
)

// Unfixed (see the report): a holds TCP/80; b asks for 80 later and waits.
// The CCM restarts (an upgrade, a fail-over), the router keeps a's mapping.
// Reading, the new process finds it a's and renews it. Blind, it finds
// nothing: a key it does not hold is arbitrated, and b wants it too, so a
// waits beside b, never renews its mapping, and loses TCP/80 when the lease
// ends, for as long as b wants it. A CCM restart must not cost a Service a
// port the router still forwards for it.
func TestBlindRestartKeepsAContendedPort(t *testing.T) {
	ctx := context.Background()
	e, _ := blindEnv(t, Config{})
	nodes := threeNodes()
	created := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	a := lbService("default", "a", withPorts(port("http", v1.ProtocolTCP, 80, 30080)))
	b := lbService("default", "b", withPorts(port("http", v1.ProtocolTCP, 80, 30081)))
	a.CreationTimestamp, b.CreationTimestamp = created, created
	a.Status.LoadBalancer = *e.mustEnsure(t, a, nodes) // before b exists
	cluster := k8sfake.NewClientset(a, b)
	if err := e.lb.Initialize(ctx, fakecluster.ClientBuilder(cluster)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ensure(t, b, nodes); !errors.Is(err, ErrPortInUse) {
		t.Fatalf("b asking for a's port: %v, want ErrPortInUse", err)
	}

	// The restart.
	fresh, err := New(Config{Client: e.lb.cfg.Client, Clock: e.clock})
	if err != nil {
		t.Fatal(err)
	}
	if err := fresh.Initialize(ctx, fakecluster.ClientBuilder(cluster)); err != nil {
		t.Fatal(err)
	}
	if _, err := fresh.EnsureLoadBalancer(ctx, testCluster, a, nodes); err != nil {
		t.Errorf("a, served by a fresh process while the router still forwards TCP/80 for it: %v", err)
	}
	// Past the lease of the first process's mapping: a must still have it.
	for range 13 {
		e.clock.Step(5 * time.Minute)
		fresh.EnsureLoadBalancer(ctx, testCluster, a, nodes) // as the passes do
	}
	k := igd.Key{Protocol: igd.TCP, ExternalPort: 80}
	if ms := e.router.Mappings(); len(ms) != 1 || ms[0].Description != pcpDesc("default", "a", k) {
		t.Errorf("table an hour after the restart: %q, want a's mapping at TCP/80", e.table())
	}
}
