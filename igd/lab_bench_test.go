package igd_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/huin/goupnp"
	"github.com/huin/goupnp/dcps/internetgateway2"
	"k8s.io/klog/v2"

	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/igdtest"
)

// The benchmarks measure this package against its baseline in the same run,
// on the lab's real miniupnpd, and report medians (run with -benchtime=10x or
// more for stable ones):
//
//	go test -run XXX -bench Lab -benchtime 10x ./igd/
//
// They skip without root or without miniupnpd.

func median(ds []time.Duration) float64 {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return float64(s[len(s)/2]) / float64(time.Millisecond)
}

// withGoupnpHTTPClient points goupnp's global HTTP client (which its own
// discovery uses to fetch descriptions) into the node namespace for the
// baseline, and restores it afterwards. Only the benchmarks touch it.
func withGoupnpHTTPClient(b *testing.B, node *igdtest.Node) {
	saved := goupnp.HTTPClientDefault
	goupnp.HTTPClientDefault = node.HTTPClient()
	b.Cleanup(func() { goupnp.HTTPClientDefault = saved })
}

// BenchmarkLabDiscovery measures the time from nothing to a usable client:
// this package's SSDP discovery (which returns once a router answered, plus
// the settle window, with status and external IP already read) against
// goupnp's own NewWANIPConnection2ClientsCtx (which waits its 2 s window).
func BenchmarkLabDiscovery(b *testing.B) {
	lab := igdtest.Start(b, igdtest.Options{})
	ctx := klog.NewContext(context.Background(), logr.Discard())

	b.Run("ours-ssdp", func(b *testing.B) {
		var ds []time.Duration
		for range b.N {
			c := labClient(b, lab, 0, false)
			start := time.Now()
			if _, err := c.Discover(ctx); err != nil {
				b.Fatal(err)
			}
			ds = append(ds, time.Since(start))
		}
		b.ReportMetric(median(ds), "median-ms")
	})
	b.Run("ours-url", func(b *testing.B) {
		var ds []time.Duration
		for range b.N {
			c := labClient(b, lab, 0, true)
			start := time.Now()
			if _, err := c.Discover(ctx); err != nil {
				b.Fatal(err)
			}
			ds = append(ds, time.Since(start))
		}
		b.ReportMetric(median(ds), "median-ms")
	})
	b.Run("goupnp-ssdp", func(b *testing.B) {
		node := lab.Nodes[0]
		withGoupnpHTTPClient(b, node)
		var ds []time.Duration
		for range b.N {
			start := time.Now()
			// goupnp opens its SSDP sockets on the calling thread, which Do
			// has switched into the node's namespace.
			err := node.Do(func() error {
				clients, _, err := internetgateway2.NewWANIPConnection2ClientsCtx(ctx)
				if err == nil && len(clients) == 0 {
					err = errors.New("no WANIPConnection2 client")
				}
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
			ds = append(ds, time.Since(start))
		}
		b.ReportMetric(median(ds), "median-ms")
	})
}

// BenchmarkLabListTable reads a table of 60 mappings (30 TCP, 30 UDP):
// ListPortMappings (GetListOfPortMappings, one call per protocol) against the
// bare calls it needs, measured alternately in the same loop, and the
// entry-by-entry walk with GetGenericPortMappingEntry.
func BenchmarkLabListTable(b *testing.B) {
	lab := igdtest.Start(b, igdtest.Options{})
	ctx := klog.NewContext(context.Background(), logr.Discard())
	node := lab.Nodes[0]
	c := labClient(b, lab, 0, true)
	const perProto = 30
	for _, proto := range []igd.Protocol{igd.TCP, igd.UDP} {
		for i := range perProto {
			m := igd.Mapping{Protocol: proto, ExternalPort: uint16(20000 + i), InternalClient: node.Addr, InternalPort: uint16(30000 + i), Description: fmt.Sprintf("ccmkit bench %d", i)}
			if _, err := c.AddPortMapping(ctx, m); err != nil {
				b.Fatal(err)
			}
		}
	}
	loc, err := url.Parse(lab.RootDescURL)
	if err != nil {
		b.Fatal(err)
	}
	withGoupnpHTTPClient(b, node)
	bare, err := internetgateway2.NewWANIPConnection2ClientsByURLCtx(ctx, loc)
	if err != nil || len(bare) != 1 {
		b.Fatalf("goupnp client: %v (%d)", err, len(bare))
	}
	wan := bare[0]
	wan.SOAPClient.HTTPClient = *node.HTTPClient()

	b.Run("list-vs-bare", func(b *testing.B) {
		var ours, bareDs []time.Duration
		for range b.N {
			start := time.Now()
			ms, err := igd.ReadTable(ctx, c)
			if err != nil || len(ms) != 2*perProto {
				b.Fatalf("ListPortMappings() = %d mappings, %v", len(ms), err)
			}
			ours = append(ours, time.Since(start))

			start = time.Now()
			for _, proto := range []string{"TCP", "UDP"} {
				if _, err := wan.GetListOfPortMappingsCtx(ctx, 0, 65535, proto, true, 1000); err != nil {
					b.Fatal(err)
				}
			}
			bareDs = append(bareDs, time.Since(start))
		}
		o, r := median(ours), median(bareDs)
		b.ReportMetric(o, "ours-median-ms")
		b.ReportMetric(r, "bare-median-ms")
		b.ReportMetric(o/r, "ours/bare")
	})
	b.Run("walk", func(b *testing.B) {
		var ds []time.Duration
		for range b.N {
			start := time.Now()
			n := 0
			for ; ; n++ {
				_, _, _, _, _, _, _, _, err := wan.GetGenericPortMappingEntryCtx(ctx, uint16(n))
				if err != nil {
					break
				}
			}
			if n != 2*perProto {
				b.Fatalf("walk read %d entries, want %d", n, 2*perProto)
			}
			ds = append(ds, time.Since(start))
		}
		b.ReportMetric(median(ds), "median-ms")
	})
}
