package loadbalancer

import (
	"context"
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/ccmkit/ccmkit/igd/igdtest"
	"github.com/ccmkit/ccmkit/internal/pcplab"
)

// BenchmarkLabResync measures the service controller's resync after a CCM
// restart on a real miniupnpd: a fresh LoadBalancer (no memory) is asked to
// ensure every served Service in turn, each with one TCP and one UDP port and
// its status from before. It reports the router calls and the time per
// Service at 10, 50 and 200 Services, their growth from 10 to 200 (calls stay
// flat: a Service's reads cover its own keys, not the table) and the whole
// resync of 200. The daemon runs daemonised, as on a router: in the
// foreground it logs a line per rule on every request, a cost that grows with
// the table whatever the client does.
func BenchmarkLabResync(b *testing.B) {
	for _, tc := range []struct {
		name string
		opts igdtest.Options
	}{
		{"IGD2", igdtest.Options{Nodes: 1, Daemonize: true}},
		{"IGD1", igdtest.Options{Nodes: 1, ForceIGDv1: true, Daemonize: true}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			lab := igdtest.Start(b, tc.opts)
			ctx := context.Background()
			nodes := labNodes(lab)
			setup, err := New(Config{Client: pcplab.UPnPClient(b, lab, 0)})
			if err != nil {
				b.Fatal(err)
			}
			var svcs []*v1.Service
			perService := map[int]time.Duration{}
			callsPer := map[int]float64{}
			var whole time.Duration
			for _, n := range []int{10, 50, 200} {
				for i := len(svcs); i < n; i++ {
					svc := lbService("resync", fmt.Sprintf("s%03d", i), withPorts(
						port("web", v1.ProtocolTCP, int32(20000+i), int32(30000+i)),
						port("dns", v1.ProtocolUDP, int32(20000+i), int32(31000+i))))
					st, err := setup.EnsureLoadBalancer(ctx, testCluster, svc, nodes)
					if err != nil {
						b.Fatal(err)
					}
					svc.Status.LoadBalancer = *st
					svcs = append(svcs, svc)
				}
				var total time.Duration
				calls := tally{}
				for range b.N {
					cc := newCounting(pcplab.UPnPClient(b, lab, 0))
					lb, err := New(Config{Client: cc})
					if err != nil {
						b.Fatal(err)
					}
					if _, err := lb.refreshExternalIP(ctx); err != nil { // discovery, once per process
						b.Fatal(err)
					}
					cc.take()
					start := time.Now()
					for _, svc := range svcs {
						if _, err := lb.EnsureLoadBalancer(ctx, testCluster, svc, nodes); err != nil {
							b.Fatal(err)
						}
					}
					total += time.Since(start)
					calls.add(cc.take())
				}
				n64 := 0
				for _, c := range calls {
					n64 += c
				}
				callsPer[n] = float64(n64) / float64(b.N*n)
				b.ReportMetric(callsPer[n], fmt.Sprintf("calls/svc@%d", n))
				whole = total / time.Duration(b.N)
				perService[n] = whole / time.Duration(n)
				b.ReportMetric(float64(perService[n].Microseconds())/1000, fmt.Sprintf("ms/svc@%d", n))
			}
			b.ReportMetric(float64(perService[200])/float64(perService[10]), "time-growth-200/10")
			b.ReportMetric(callsPer[200]/callsPer[10], "calls-growth-200/10")
			b.ReportMetric(whole.Seconds(), "s/resync@200")
			// The router is still alive and holds every mapping.
			ms, err := setup.read(ctx, owner{}, specKeys(svcs[len(svcs)-1]))
			if err != nil || len(ms.mappings) != 2 {
				b.Fatalf("after the resync the router answers %v, %v", ms, err)
			}
		})
	}
}
