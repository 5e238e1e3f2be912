package edge

import (
	"testing"

	"k8s.io/component-base/metrics/legacyregistry"
)

// TestFactoryRegistersMetrics builds the provider twice, as a restarted
// factory call would, and finds igd's and loadbalancer's gauges (reported
// even before any call) on the legacy registry the CCM serves on /metrics.
func TestFactoryRegistersMetrics(t *testing.T) {
	for range 2 { // a second registration would panic
		if _, err := factory(func(string) string { return "" })(nil); err != nil {
			t.Fatalf("factory: %v", err)
		}
	}
	mfs, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"cloudprovider_ccmkit_routers_known": false, "cloudprovider_ccmkit_mappings_held": false}
	for _, mf := range mfs {
		if _, ok := want[mf.GetName()]; ok {
			want[mf.GetName()] = true
		}
	}
	for name, found := range want {
		if !found {
			t.Errorf("%s not on the legacy registry", name)
		}
	}
}
