package igd

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// Metrics are named as upstream cloud providers name theirs
// (cloudprovider_aws_api_request_duration_seconds{request}): the router's
// SOAP control interface is this provider's API. See RegisterMetrics.
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

	// known counts the clients of this process that have a router cached.
	// It is kept whether or not the metrics are registered, and read at
	// scrape time.
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

// RegisterMetrics registers this package's metrics in the component-base
// legacy registry, which the cloud-controller-manager serves on /metrics.
// It is safe to call more than once and from several goroutines. Until it is
// called, calls are counted nowhere (the gauge excepted, which is computed at
// scrape time).
//
// The metrics:
//
//	cloudprovider_ccmkit_api_request_duration_seconds{request}  histogram of SOAP call latency by action (GetSpecificPortMappingEntry, AddPortMapping, ...)
//	cloudprovider_ccmkit_api_request_errors{request,code}       failed calls: code is the UPnP error code ("718") if it is one of the Code constants, else other; or timeout, canceled, too_large or transport
//	cloudprovider_ccmkit_discoveries_total{outcome}             discoveries: found, none (no usable router), error, canceled (every caller gave up)
//	cloudprovider_ccmkit_routers_known                          clients that currently have a router cached
//
// api_request_errors keeps upstream providers' name, without _total.
func RegisterMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(requestDuration, requestErrors, discoveries)
		legacyregistry.RawMustRegister(routersKnown)
	})
}

// ObserveRequest records, in this package's request metrics, one call to the
// router by another protocol of this module (igd/pcp: request is the PCP
// opcode, "MAP") that started at start; code is "" for a success, else the
// error label, from a fixed set the caller keeps small.
func ObserveRequest(request string, start time.Time, code string) {
	requestDuration.WithLabelValues(request).Observe(time.Since(start).Seconds())
	if code != "" {
		requestErrors.WithLabelValues(request, code).Inc()
	}
}

// observeCall records one SOAP call to the router that started at start and
// ended with err.
func observeCall(action string, start time.Time, err error) {
	requestDuration.WithLabelValues(action).Observe(time.Since(start).Seconds())
	if err != nil {
		requestErrors.WithLabelValues(action, errorCode(err)).Inc()
	}
}

// codeLabels are the UPnP codes the code label names, each as itself: the
// codes this package gives meaning to and the rest of WANIPConnection's. Any other code a router answers is
// "other", so that a router cannot make series at will.
var codeLabels = func() map[int]string {
	out := map[int]string{}
	for _, c := range []int{
		CodeInvalidAction, CodeInvalidArgs, CodeActionFailed, CodeOptionalActionNotImpl, CodeNotAuthorized,
		CodeInvalidArrayIndex, CodeNoSuchEntry, CodeWildCardNotPermittedInExt,
		CodeConflict, CodeSamePortValuesRequired, CodeOnlyPermanentLeases,
		CodeNoPortMapsAvailable, CodePortMappingNotFound,
		// The other WANIPConnection codes: 715 WildCardNotPermittedInSrcIP,
		// 726 RemoteHostOnlySupportsWildcard, 727 ExternalPortOnlySupportsWildcard,
		// 729 ConflictWithOtherMechanisms, 732 WildCardNotPermittedInIntPort.
		715, 726, 727, 729, 732,
	} {
		out[c] = strconv.Itoa(c)
	}
	return out
}()

// errorCode is the code label of a failed call: one of a fixed set.
func errorCode(err error) string {
	if c := Code(err); c != 0 {
		if label, ok := codeLabels[c]; ok {
			return label
		}
		return "other"
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, ErrAnswerTooLarge):
		return "too_large"
	}
	return "transport"
}

// observeDiscovery records the outcome of one discovery; ctx is the
// discovery's own context.
func observeDiscovery(ctx context.Context, err error) {
	outcome := "found"
	switch {
	case err == nil:
	case ctx.Err() != nil:
		outcome = "canceled"
	case errors.Is(err, ErrNoGateway):
		outcome = "none"
	default:
		outcome = "error"
	}
	discoveries.WithLabelValues(outcome).Inc()
}
