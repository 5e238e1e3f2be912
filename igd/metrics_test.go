package igd_test

import (
	"context"
	"errors"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/component-base/metrics/testutil"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
)

// scrape returns the value of the sample of metric name whose labels include
// labels: a counter's or gauge's value, a histogram's sample count; 0 when
// there is none.
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
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return 0
}

// TestMetricsRegisterIsIdempotent calls RegisterMetrics concurrently and
// again: registering twice in the legacy registry would panic.
func TestMetricsRegisterIsIdempotent(t *testing.T) {
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(igd.RegisterMetrics)
	}
	wg.Wait()
	igd.RegisterMetrics()
}

// TestMetricsScrape makes calls to a fake router over HTTP and reads the
// metrics back from the legacy registry, as /metrics serves them.
func TestMetricsScrape(t *testing.T) {
	igd.RegisterMetrics()
	r := fake.NewRouter(fake.RouterConfig{})
	srv := fake.NewServer(r, fake.ServerOptions{})
	t.Cleanup(srv.Close)
	c, err := igd.NewClient(igd.Config{RootDescURL: srv.RootDescURL, CallTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	const (
		duration    = "cloudprovider_ccmkit_api_request_duration_seconds"
		errs        = "cloudprovider_ccmkit_api_request_errors"
		discoveries = "cloudprovider_ccmkit_discoveries_total"
		known       = "cloudprovider_ccmkit_routers_known"
	)
	type sample struct {
		name   string
		labels map[string]string
		delta  float64
	}
	samples := []sample{
		{duration, map[string]string{"request": "GetExternalIPAddress"}, 2},
		{duration, map[string]string{"request": "GetSpecificPortMappingEntry"}, 1},
		{errs, map[string]string{"request": "GetSpecificPortMappingEntry", "code": "714"}, 1},
		{errs, map[string]string{"request": "GetExternalIPAddress", "code": "timeout"}, 1},
		{errs, map[string]string{"request": "GetExternalIPAddress", "code": "transport"}, 0},
		{discoveries, map[string]string{"outcome": "found"}, 1},
		{known, nil, 0}, // known after the discovery, forgotten after the timeout
	}
	before := make([]float64, len(samples))
	for i, s := range samples {
		before[i] = scrape(t, s.name, s.labels)
	}

	ctx := context.Background()
	if _, err := c.ExternalIP(ctx); err != nil { // discovers, then calls
		t.Fatal(err)
	}
	if got := scrape(t, known, nil) - before[len(samples)-1]; got != 1 {
		t.Errorf("%s went up by %v after a discovery, want 1", known, got)
	}
	if _, err := c.GetPortMapping(ctx, igd.TCP, 8080); !errors.Is(err, igd.ErrNoSuchEntry) {
		t.Fatalf("GetPortMapping of a free port: err = %v, want ErrNoSuchEntry", err)
	}
	r.Intercept(fake.RouterHooks{ExternalIP: func(ctx context.Context, _ netip.Addr, next fake.AddrFunc) (netip.Addr, error) {
		if err := fake.Sleep(ctx, time.Second); err != nil {
			return netip.Addr{}, err
		}
		return next(ctx)
	}})
	if _, err := c.ExternalIP(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ExternalIP of a router that does not answer: err = %v, want a timeout", err)
	}

	for i, s := range samples {
		if got := scrape(t, s.name, s.labels) - before[i]; got != s.delta {
			t.Errorf("%s%v went up by %v, want %v", s.name, s.labels, got, s.delta)
		}
	}
}

// TestMetricsCodeLabelIsBounded has a hostile router answer 300 made-up UPnP
// error codes: the code label must keep to a fixed set (the codes the
// client knows, and "other"), or each answer would make a new series.
func TestMetricsCodeLabelIsBounded(t *testing.T) {
	igd.RegisterMetrics()
	const errs = "cloudprovider_ccmkit_api_request_errors"
	r := fake.NewRouter(fake.RouterConfig{})
	srv := fake.NewServer(r, fake.ServerOptions{})
	t.Cleanup(srv.Close)
	c, err := igd.NewClient(igd.Config{RootDescURL: srv.RootDescURL})
	if err != nil {
		t.Fatal(err)
	}
	var code atomic.Int64
	code.Store(1000)
	r.Intercept(fake.RouterHooks{GetPortMapping: func(context.Context, netip.Addr, igd.Key, fake.GetFunc) (igd.Mapping, error) {
		return igd.Mapping{}, &igd.UPnPError{Action: "GetSpecificPortMappingEntry", Code: int(code.Add(1)), Description: "made up"}
	}})
	other := map[string]string{"request": "GetSpecificPortMappingEntry", "code": "other"}
	before := scrape(t, errs, other)
	ctx := t.Context()
	for range 300 {
		if _, err := c.GetPortMapping(ctx, igd.TCP, 8080); igd.Code(err) <= 1000 {
			t.Fatalf("GetPortMapping = %v, want a made-up code", err)
		}
	}
	if got := scrape(t, errs, other) - before; got != 300 {
		t.Errorf("%s%v went up by %v, want 300", errs, other, got)
	}
	allowed := map[string]bool{"other": true, "timeout": true, "canceled": true, "too_large": true, "transport": true}
	for _, c := range []int{401, 402, 501, 602, 606, 713, 714, 715, 716, 718, 724, 725, 726, 727, 728, 729, 730, 732} {
		allowed[strconv.Itoa(c)] = true
	}
	mfs, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var series int
	for _, mf := range mfs {
		if mf.GetName() != errs {
			continue
		}
		for _, m := range mf.GetMetric() {
			series++
			for _, l := range m.GetLabel() {
				if l.GetName() == "code" && !allowed[l.GetValue()] {
					t.Errorf("%s has a series with code=%q, outside the fixed set", errs, l.GetValue())
				}
			}
		}
	}
	t.Logf("%d series of %s", series, errs)
}
