package loadbalancer

import (
	"sync"
	"sync/atomic"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// The metrics share igd's prefix, cloudprovider_ccmkit.
const (
	metricsNamespace = "cloudprovider"
	metricsSubsystem = "ccmkit"
)

var (
	// heldKeys counts the keys in every serviceState.held of this process,
	// registered or not; read at scrape time.
	heldKeys atomic.Int64

	mappingsHeld = metrics.NewGaugeFunc((*metrics.GaugeOpts)(opts("mappings_held",
		"Port mappings this process holds for its Services, or is adding.")),
		func() float64 { return float64(heldKeys.Load()) })
	passesTotal = metrics.NewCounterVec((*metrics.CounterOpts)(opts("background_passes_total",
		"Background passes over every Service by result: ok, error (the pass or a Service in it failed), skipped (cluster name not known yet).")),
		[]string{"result"})
	repairsTotal = metrics.NewCounter((*metrics.CounterOpts)(opts("repairs_total",
		"Probes that found a mapping of this process lost or changed on the router, each triggering a repairing pass.")))

	registerOnce sync.Once
)

// opts are the options of a metric of this package.
func opts(name, help string) *metrics.KubeOpts {
	return &metrics.KubeOpts{Namespace: metricsNamespace, Subsystem: metricsSubsystem, Name: name, Help: help, StabilityLevel: metrics.ALPHA}
}

// RegisterMetrics registers this package's metrics in the component-base
// legacy registry, which the cloud-controller-manager serves on /metrics.
// It is safe to call more than once, concurrently. Until then passes and
// repairs are not counted (the gauge is computed at scrape time). igd's
// metrics are igd.RegisterMetrics':
//
//	cloudprovider_ccmkit_mappings_held                   port mappings (keys) this process holds for its Services, or is adding
//	cloudprovider_ccmkit_background_passes_total{result} background passes: ok, error (the pass or one of its Services failed), skipped (cluster name not known yet)
//	cloudprovider_ccmkit_repairs_total                   probes that found a mapping lost or changed on the router (a reboot, a wiped table), each starting a pass
func RegisterMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(passesTotal, repairsTotal)
		legacyregistry.RawMustRegister(mappingsHeld)
	})
}
