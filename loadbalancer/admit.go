package loadbalancer

import (
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"

	"github.com/ccmkit/ccmkit/igd"
)

// admitted reports whether Config.Admit lets svc map k, of its spec's keys.
func (lb *LoadBalancer) admitted(svc *v1.Service, k igd.Key) bool {
	if lb.cfg.Admit == nil {
		return true
	}
	keys := specKeys(svc)
	slices.SortFunc(keys, compareKeys)
	return lb.cfg.Admit(svc, keys)[k] == nil
}

// recordedKeys returns the keys the statuses of svcs (the cluster's
// Services, listed) record for Services that want them: mappings they hold
// by the API server, which this process may not have served yet (it
// restarted, or another process serves them). Nil without a cap.
func (lb *LoadBalancer) recordedKeys(cluster string, svcs []*v1.Service) []igd.Key {
	if lb.cfg.MaxMappings <= 0 {
		return nil
	}
	var out []igd.Key
	for _, s := range svcs {
		for _, k := range specKeys(s) {
			if recordsKey(s, k) && lb.wants(cluster, s, k, nil) {
				out = append(out, k)
			}
		}
	}
	return out
}

// capReachedLocked returns why o may not take k, a key no Service holds,
// when the keys the Services hold or are taking, with those recorded (the
// statuses' keys, see recordedKeys), other than k, number
// Config.MaxMappings already; else nil. The caller holds lb.mu.
func (lb *LoadBalancer) capReachedLocked(o owner, k igd.Key, recorded []igd.Key) error {
	if lb.cfg.MaxMappings <= 0 {
		return nil
	}
	keys := make(map[igd.Key]bool)
	for _, s := range lb.services {
		for hk := range s.held {
			keys[hk] = true
		}
	}
	for _, rk := range recorded {
		keys[rk] = true
	}
	delete(keys, k)
	if len(keys) < lb.cfg.MaxMappings {
		return nil
	}
	return &PortError{Service: o.key(), Key: k,
		Err: fmt.Errorf("%w: the cluster's cap on mappings, %d, is reached: another Service must give one up", ErrNotAdmitted, lb.cfg.MaxMappings)}
}
