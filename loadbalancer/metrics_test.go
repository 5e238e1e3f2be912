package loadbalancer

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/testutil"

	"github.com/ccmkit/ccmkit/fake"
)

func TestMetricsRegisterIsIdempotent(t *testing.T) {
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(RegisterMetrics)
	}
	wg.Wait()
	RegisterMetrics()
}

// TestMetricsScrape runs the background work against a fake router and
// reads mappings held, passes and repairs back from the registered metrics.
func TestMetricsScrape(t *testing.T) {
	RegisterMetrics()
	// The metrics as registered: the gauge's source and the counters.
	held := func() float64 { return float64(heldKeys.Load()) }
	counter := func(m metrics.CounterMetric) func() float64 {
		return func() float64 {
			v, err := testutil.GetCounterMetricValue(m)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	ok, failed, repairs := counter(passesTotal.WithLabelValues("ok")), counter(passesTotal.WithLabelValues("error")), counter(repairsTotal)
	heldBefore, okBefore, failedBefore, repairsBefore := held(), ok(), failed(), repairs()
	check := func(what string, value func() float64, before, delta float64) {
		t.Helper()
		if got := value() - before; got != delta {
			t.Errorf("%s: went up by %v, want %v", what, got, delta)
		}
	}

	e := newEnv(t, Config{Lease: time.Hour, RenewInterval: 5 * time.Minute}, fake.RouterConfig{})
	nodes := threeNodes()
	var objs []k8sruntime.Object
	for _, n := range nodes {
		objs = append(objs, n)
	}
	web := lbService("default", "web", withPorts(port("a", v1.ProtocolTCP, 80, 30080), port("b", v1.ProtocolTCP, 443, 30443)))
	dns := lbService("default", "dns", withPorts(port("a", v1.ProtocolUDP, 53, 30053)))
	for _, s := range []*v1.Service{web, dns} {
		e.mustEnsure(t, s, nodes)
		objs = append(objs, s)
	}
	check("mappings held after two Ensures", held, heldBefore, 3)

	r := startBackground(t, e, objs...)
	check("ok passes after the first pass", ok, okBefore, 1)

	e.router.Reboot()
	n := e.lb.passes.Load()
	r.probe(t)
	eventually(t, "the repair pass", func() bool { return e.lb.passes.Load() > n })
	check("repairs after a reboot", repairs, repairsBefore, 1)
	check("ok passes after the repair pass", ok, okBefore, 2)
	check("mappings held after the repair pass", held, heldBefore, 3)

	e.router.Intercept(fake.RouterHooks{ExternalIP: func(context.Context, netip.Addr, fake.AddrFunc) (netip.Addr, error) {
		return netip.Addr{}, errors.New("router busy")
	}})
	r.tick(t)
	e.router.ClearHooks()
	check("failed passes after a pass that could not read the external IP", failed, failedBefore, 1)

	if err := e.lb.EnsureLoadBalancerDeleted(context.Background(), testCluster, web); err != nil {
		t.Fatal(err)
	}
	check("mappings held after deleting a Service", held, heldBefore, 1)
}
