package igd

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/ccmkit/ccmkit/internal/igdmetrics"
	"github.com/ccmkit/ccmkit/internal/upnp"
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
//	cloudprovider_ccmkit_api_request_errors{request,code}       failed calls: code is the UPnP error code ("718") if it is one igd gives meaning to or another of WANIPConnection's, else other; or timeout, canceled, too_large or transport
//	cloudprovider_ccmkit_discoveries_total{outcome}             discoveries: found, none (no usable router), error, canceled (every caller gave up)
//	cloudprovider_ccmkit_routers_known                          clients that currently have a router cached
//
// api_request_errors keeps upstream providers' name, without _total.
func RegisterMetrics() {
	igdmetrics.Register()
}

// observeCall records one SOAP call to the router that started at start and
// ended with err.
func observeCall(action string, start time.Time, err error) {
	code := ""
	if err != nil {
		code = errorCode(err)
	}
	igdmetrics.ObserveRequest(action, start, code)
}

// codeLabels are the UPnP codes the code label names, each as itself: the
// codes this package gives meaning to and the rest of WANIPConnection's. Any other code a router answers is
// "other", so that a router cannot make series at will.
var codeLabels = func() map[int]string {
	out := map[int]string{}
	for _, c := range []int{
		upnp.CodeInvalidAction, upnp.CodeInvalidArgs, upnp.CodeActionFailed, upnp.CodeOptionalActionNotImpl, upnp.CodeNotAuthorized,
		upnp.CodeInvalidArrayIndex, upnp.CodeNoSuchEntry, upnp.CodeWildCardNotPermittedInExt,
		upnp.CodeConflict, upnp.CodeSamePortValuesRequired, upnp.CodeOnlyPermanentLeases,
		upnp.CodeNoPortMapsAvailable, upnp.CodePortMappingNotFound,
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
	igdmetrics.ObserveDiscovery(outcome)
}
