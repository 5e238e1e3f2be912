package loadbalancer

import (
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
)

// TestBackgroundPassAfterOwnAddsDoesNotCrashRouter runs the load balancer
// on a fake miniupnpd 2.3.1 served over SOAP (fake.RouterConfig.
// CrashOnLongList), whose listing of a long table kills it: background work
// starts and its first pass lists the table (one mapping), 140 one-port
// Services are ensured, and the next pass lists the whole table again. That
// listing must not kill the router: the igd client counts the mappings it
// added itself.
func TestBackgroundPassAfterOwnAddsDoesNotCrashRouter(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	router := fake.NewRouter(fake.RouterConfig{CrashOnLongList: true, Clock: clk})
	srv := fake.NewServer(router, fake.ServerOptions{})
	t.Cleanup(srv.Close)
	client, err := igd.NewClient(igd.Config{RootDescURL: srv.RootDescURL})
	if err != nil {
		t.Fatal(err)
	}
	lb, err := New(Config{Client: client, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{lb: lb, router: router, clock: clk}
	nodes := threeNodes()
	objs := []k8sruntime.Object{nodes[0], nodes[1], nodes[2]}
	// One Service first, so that the background work knows the cluster's
	// name and its first pass lists the table.
	svc := lbService("default", "first", withPorts(port("a", v1.ProtocolTCP, 19999, 30000)))
	if _, err := e.ensure(t, svc, nodes); err != nil {
		t.Fatal(err)
	}
	before := router.CallCount(fake.MethodListPortMappings)
	r := startBackground(t, e, objs...)
	if router.Crashed() {
		t.Fatal("the first pass crashed the router")
	}
	if router.CallCount(fake.MethodListPortMappings) == before {
		t.Fatal("the first pass did not list the table")
	}
	for i := range 140 {
		svc := lbService("default", fmt.Sprintf("s%d", i), withPorts(port("a", v1.ProtocolTCP, int32(20000+i), 30000)))
		if _, err := e.ensure(t, svc, nodes); err != nil {
			t.Fatalf("Ensure %s: %v (crashed: %v)", svc.Name, err, router.Crashed())
		}
	}
	r.tick(t)
	if router.Crashed() {
		t.Fatal("the pass after 140 one-port Services crashed the router")
	}
	if n := len(router.Mappings()); n != 141 {
		t.Errorf("router holds %d mappings, want 141", n)
	}
}
