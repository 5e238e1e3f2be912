package edge

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/ccmkit/ccmkit/igd"
)

// portRange reads an allowedExternalPorts entry: "443" or "1024-65535",
// within 1-65535, from no greater than to.
func portRange(s string) (from, to uint16, ok bool) {
	lo, hi, isRange := strings.Cut(s, "-")
	if !isRange {
		hi = lo
	}
	a, errA := strconv.ParseUint(lo, 10, 16)
	b, errB := strconv.ParseUint(hi, 10, 16)
	if errA != nil || errB != nil || a < 1 || a > b {
		return 0, 0, false
	}
	return uint16(a), uint16(b), true
}

// admit returns the loadbalancer.Config.Admit of the section's limits on
// namespaces, external ports and mappings per Service (nil: none set). Each
// refusal names the key that refuses it.
func (l LoadBalancerConfig) admit() func(*v1.Service, []igd.Key) map[igd.Key]error {
	if len(l.AllowedNamespaces) == 0 && len(l.AllowedExternalPorts) == 0 && l.MaxMappingsPerService == 0 {
		return nil
	}
	type span struct{ from, to uint16 }
	var spans []span
	for _, r := range l.AllowedExternalPorts {
		from, to, _ := portRange(r) // validated
		spans = append(spans, span{from, to})
	}
	allowedPorts := strings.Join(l.AllowedExternalPorts, ", ")
	return func(svc *v1.Service, keys []igd.Key) map[igd.Key]error {
		refused := make(map[igd.Key]error)
		if len(l.AllowedNamespaces) > 0 && !slices.Contains(l.AllowedNamespaces, svc.Namespace) {
			for _, k := range keys {
				refused[k] = fmt.Errorf("namespace %s is not in loadBalancer.allowedNamespaces", svc.Namespace)
			}
			return refused
		}
		var admitted []igd.Key
		for _, k := range keys {
			if len(spans) > 0 && !slices.ContainsFunc(spans, func(s span) bool { return s.from <= k.ExternalPort && k.ExternalPort <= s.to }) {
				refused[k] = fmt.Errorf("external port %d is not in loadBalancer.allowedExternalPorts (%s)", k.ExternalPort, allowedPorts)
			} else {
				admitted = append(admitted, k)
			}
		}
		if n := l.MaxMappingsPerService; n > 0 && len(admitted) > n {
			for _, k := range admitted[n:] {
				refused[k] = fmt.Errorf("the Service asks for %d mappings, loadBalancer.maxMappingsPerService allows %d: its first %d by protocol and port are mapped", len(admitted), n, n)
			}
		}
		return refused
	}
}
