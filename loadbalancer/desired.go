package loadbalancer

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/cloud-provider/api"

	"github.com/ccmkit/ccmkit/igd"
)

const (
	// annotationSourceRanges is the older form of spec.loadBalancerSourceRanges.
	annotationSourceRanges = "service.beta.kubernetes.io/load-balancer-source-ranges"
	noSourceRanges         = "a router port mapping cannot restrict source addresses; refusing rather than exposing the Service to every address"
)

// request is the desired state of one Service on the router.
type request struct {
	owner      owner
	svc        *v1.Service     // nil when removing all its mappings
	ports      []portPlan      // none: remove all of the Service's mappings
	candidates []target        // the nodes the mappings may target, by name
	noTarget   error           // why candidates is empty
	self       string          // this process's node on a secure-mode router
	eligible   map[string]bool // the nodes any Service's mappings may target, by name
}

// portPlan is one mapping a Service wants.
type portPlan struct {
	key         igd.Key
	nodePort    uint16
	description string
}

// compareKeys orders keys by protocol, then external port.
func compareKeys(a, b igd.Key) int {
	return cmp.Or(strings.Compare(string(a.Protocol), string(b.Protocol)), cmp.Compare(a.ExternalPort, b.ExternalPort))
}

// selfOnly reports whether the router maps only to this process's node:
// Config.SecureMode, or a client that says so (igd.SelfOnlyReporter:
// igd/pcp.Backend once the router refused THIRD_PARTY).
func (lb *LoadBalancer) selfOnly() bool {
	return lb.cfg.SecureMode || lb.mode.selfOnly()
}

// describeReasons lists why each node is not eligible, sorted by node name.
func describeReasons(reasons map[string]string) string {
	if len(reasons) == 0 {
		return "the cluster has no nodes"
	}
	parts := make([]string, 0, len(reasons))
	for n, why := range reasons {
		parts = append(parts, "node "+n+" "+why)
	}
	slices.Sort(parts) // by name: no node name holds a character below " "
	return strings.Join(parts, "; ")
}

// retry joins err with an api.RetryError after Config.RetryAfter.
func (lb *LoadBalancer) retry(err error) error {
	return errors.Join(err, api.NewRetryError(fmt.Sprintf("loadbalancer: retrying in %s", lb.cfg.RetryAfter), lb.cfg.RetryAfter))
}
