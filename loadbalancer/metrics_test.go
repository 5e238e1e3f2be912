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
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/component-base/metrics/testutil"

	"github.com/ccmkit/ccmkit/fake"
)

// scrape returns the value of the counter or gauge name whose labels include
// labels, as /metrics serves it; 0 when there is none.
func scrape(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if !testutil.LabelsMatch(m, labels) {
				continue
			}
			if m.Gauge != nil {
				return m.Gauge.GetValue()
			}
			return m.Counter.GetValue()
		}
	}
	return 0
}

func TestMetricsRegisterIsIdempotent(t *testing.T) {
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(RegisterMetrics)
	}
	wg.Wait()
	RegisterMetrics()
}

// TestMetricsScrape runs the background work against a fake router and
// reads mappings held, passes and repairs back from the legacy registry.
func TestMetricsScrape(t *testing.T) {
	RegisterMetrics()
	const (
		held    = "cloudprovider_ccmkit_mappings_held"
		passes  = "cloudprovider_ccmkit_background_passes_total"
		repairs = "cloudprovider_ccmkit_repairs_total"
	)
	ok := map[string]string{"result": "ok"}
	failed := map[string]string{"result": "error"}
	heldBefore, okBefore, failedBefore, repairsBefore := scrape(t, held, nil), scrape(t, passes, ok), scrape(t, passes, failed), scrape(t, repairs, nil)
	check := func(what string, name string, labels map[string]string, before, delta float64) {
		t.Helper()
		if got := scrape(t, name, labels) - before; got != delta {
			t.Errorf("%s: %s%v went up by %v, want %v", what, name, labels, got, delta)
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
	check("after two Ensures", held, nil, heldBefore, 3)

	r := startBackground(t, e, objs...)
	check("after the first pass", passes, ok, okBefore, 1)

	e.router.Reboot()
	n := e.lb.passes.Load()
	r.probe(t)
	eventually(t, "the repair pass", func() bool { return e.lb.passes.Load() > n })
	check("after a reboot", repairs, nil, repairsBefore, 1)
	check("after the repair pass", passes, ok, okBefore, 2)
	check("after the repair pass", held, nil, heldBefore, 3)

	e.router.Intercept(fake.RouterHooks{ExternalIP: func(context.Context, netip.Addr, fake.AddrFunc) (netip.Addr, error) {
		return netip.Addr{}, errors.New("router busy")
	}})
	r.tick(t)
	e.router.ClearHooks()
	check("after a pass that could not read the external IP", passes, failed, failedBefore, 1)

	if err := e.lb.EnsureLoadBalancerDeleted(context.Background(), testCluster, web); err != nil {
		t.Fatal(err)
	}
	check("after deleting a Service", held, nil, heldBefore, 1)
}
