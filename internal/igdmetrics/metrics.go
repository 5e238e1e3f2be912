// Package igdmetrics holds the router request metrics that igd and
// internal/pcpwire record and igd.RegisterMetrics registers: one set of
// series for every protocol ccmkit speaks to the router.
package igdmetrics

import (
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// Metrics are named as upstream cloud providers name theirs
// (cloudprovider_aws_api_request_duration_seconds{request}): the router's
// SOAP control interface is this provider's API. See igd.RegisterMetrics.
const (
	metricsNamespace = "cloudprovider"
	metricsSubsystem = "ccmkit"
)

var (
	requestDuration = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Namespace: metricsNamespace,
		Subsystem: metricsSubsystem,
		Name:      "api_request_duration_seconds",
		Help:      "Latency of SOAP calls to the router by action, including failed ones.",
		// 1ms (miniupnpd on the LAN) to 16s (a listing, bounded by 5×CallTimeout).
		Buckets:        metrics.ExponentialBuckets(0.001, 2, 15),
		StabilityLevel: metrics.ALPHA,
	}, []string{"request"})

	requestErrors = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "api_request_errors",
		Help:           "Failed SOAP calls to the router by action and UPnP error code (a known code, or other; or timeout, canceled, too_large, transport).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"request", "code"})

	discoveries = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "discoveries_total",
		Help:           "Router discoveries by outcome: found, none (no usable router), error, canceled.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"outcome"})

	// known counts the clients of this process that have a router cached
	// (RouterKnown). It is kept whether or not the metrics are registered,
	// and read at scrape time.
	known atomic.Int64

	routersKnown = metrics.NewGaugeFunc(&metrics.GaugeOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "routers_known",
		Help:           "UPnP clients in this process that currently know a router (1 or 0 in the edge CCM).",
		StabilityLevel: metrics.ALPHA,
	}, func() float64 { return float64(known.Load()) })

	registerOnce sync.Once
)

// Register registers the metrics in the component-base legacy registry
// (see igd.RegisterMetrics, which documents them). It is safe to call more
// than once and from several goroutines.
func Register() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(requestDuration, requestErrors, discoveries)
		legacyregistry.RawMustRegister(routersKnown)
	})
}

// ObserveRequest records, in the request metrics, one call to the router
// (igd: request is the SOAP action; internal/pcpwire: the PCP opcode,
// "MAP") that started at start; code is "" for a success, else the
// error label, from a fixed set the caller keeps small.
func ObserveRequest(request string, start time.Time, code string) {
	requestDuration.WithLabelValues(request).Observe(time.Since(start).Seconds())
	if code != "" {
		requestErrors.WithLabelValues(request, code).Inc()
	}
}

// ObserveDiscovery counts one router discovery by outcome: found, none,
// error or canceled.
func ObserveDiscovery(outcome string) {
	discoveries.WithLabelValues(outcome).Inc()
}

// RouterKnown adds delta (1 or -1) to the clients of this process that have
// a router cached, read by the routers_known gauge.
func RouterKnown(delta int64) { known.Add(delta) }
