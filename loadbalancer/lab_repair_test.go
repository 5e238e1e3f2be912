package loadbalancer

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	k8sfake "k8s.io/client-go/kubernetes/fake"

	"github.com/ccmkit/ccmkit/fake/cluster"
	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/igdtest"
	"github.com/ccmkit/ccmkit/igd/pcp"
	"github.com/ccmkit/ccmkit/internal/pcplab"
)

// BenchmarkLabRepairInSeconds runs the background work with the default
// configuration (lease 1h, renewal every 5 min, probe every 5 s) on the real
// clock against miniupnpd, reboots the router (its table is gone), and
// reports how long until every mapping is back (repair-s) and, before the
// reboot, how many router calls the idle background work makes per 5 s;
// repair-max-s is the longest repair of the run.
//
// Sub-benchmark announce adds an Announcer (igd/pcp's Client, listening on
// the node for the ANNOUNCE miniupnpd multicasts when it starts): the
// repair then starts on the announcement, not at the next probe.
// Sub-benchmark pcp serves through a pcp.Backend with the probe interval
// set to the renewal interval, as the edge provider's protocol "pcp" does:
// no idle call; idle-calls/5s counts UPnP calls and PCP requests.
// Sub-benchmark blind does the same through a backend that never reads.
func BenchmarkLabRepairInSeconds(b *testing.B) {
	b.Run("probe", func(b *testing.B) { benchRepair(b, "probe") })
	b.Run("announce", func(b *testing.B) { benchRepair(b, "announce") })
	b.Run("pcp", func(b *testing.B) { benchRepair(b, "pcp") })
	b.Run("blind", func(b *testing.B) { benchRepair(b, "blind") })
}

func benchRepair(b *testing.B, mode string) {
	lab := igdtest.Start(b, igdtest.Options{Nodes: 1, PCPAllowThirdParty: true})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cc := newCounting(pcplab.UPnPClient(b, lab, 0))
	cfg := Config{Client: cc}
	var dials atomic.Int64
	if mode != "probe" {
		a := labPCP(b, lab, 0, &dials)
		cfg.Announcer = a
		switch mode {
		case "pcp":
			cfg.Client = labBackend(b, cc, a, pcpSecret)
			cfg.ProbeInterval = ProbeAtRenewal
		case "blind":
			blind, err := pcp.NewBackend(pcp.BackendConfig{PCP: a, Secret: pcpSecret})
			if err != nil {
				b.Fatal(err)
			}
			cfg.Client = blind
			cfg.ProbeInterval = ProbeAtRenewal
		}
	}
	lb, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	nodes := labNodes(lab)
	objs := []k8sruntime.Object{nodes[0]}
	for i := range 10 {
		svc := lbService("repair", fmt.Sprintf("s%d", i), withPorts(
			port("a", v1.ProtocolTCP, int32(25000+i), int32(30000+i)),
			port("b", v1.ProtocolUDP, int32(25000+i), int32(30000+i))))
		st, err := lb.EnsureLoadBalancer(ctx, testCluster, svc, nodes)
		if err != nil {
			b.Fatal(err)
		}
		svc.Status.LoadBalancer = *st
		objs = append(objs, svc)
	}
	if err := lb.Initialize(ctx, cluster.ClientBuilder(k8sfake.NewClientset(objs...))); err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); lb.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitFor := func(what string, limit time.Duration, cond func() bool) time.Duration {
		start := time.Now()
		for !cond() {
			if time.Since(start) > limit {
				b.Fatalf("%s: not within %s", what, limit)
			}
			time.Sleep(50 * time.Millisecond)
		}
		return time.Since(start)
	}
	waitFor("first pass", time.Minute, func() bool { return lb.passes.Load() > 0 })
	peer := pcplab.UPnPClient(b, lab, 0) // counts nothing of the LoadBalancer's
	restored := func() bool {
		ms, err := igd.ReadTable(ctx, peer)
		return err == nil && len(ms) == 20
	}
	var repair []time.Duration
	idleCalls := 0
	for range b.N {
		cc.take()
		before := dials.Load()
		time.Sleep(10 * time.Second)
		for _, n := range cc.take() {
			idleCalls += n
		}
		idleCalls += int(dials.Load() - before)
		lab.Reboot(b)
		repair = append(repair, waitFor("repair", time.Minute, restored))
	}
	b.Logf("%s: repairs %v", mode, repair)
	b.ReportMetric(median(repair).Seconds(), "repair-s")
	b.ReportMetric(slices.Max(repair).Seconds(), "repair-max-s")
	b.ReportMetric(float64(idleCalls)/(float64(b.N)*2), "idle-calls/5s")
}
