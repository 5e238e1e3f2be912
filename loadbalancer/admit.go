package loadbalancer

import (
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"

	"github.com/ccmkit/ccmkit/igd"
)

// admit splits plans (sorted) into the ports Config.Admit lets svc map and
// the refused ones, each with its PortError.
func (lb *LoadBalancer) admit(o owner, svc *v1.Service, plans []portPlan) ([]portPlan, map[igd.Key]*PortError) {
	if lb.cfg.Admit == nil || len(plans) == 0 {
		return plans, nil
	}
	keys := make([]igd.Key, len(plans))
	for i, p := range plans {
		keys[i] = p.key
	}
	why := lb.cfg.Admit(svc, keys)
	var admitted []portPlan
	refused := make(map[igd.Key]*PortError)
	for _, p := range plans {
		if err := why[p.key]; err != nil {
			refused[p.key] = &PortError{Service: o.key(), Key: p.key, Err: fmt.Errorf("%w: %w", ErrNotAdmitted, err)}
		} else {
			admitted = append(admitted, p)
		}
	}
	return admitted, refused
}

// admitted reports whether Config.Admit lets svc map k, of its spec's keys.
func (lb *LoadBalancer) admitted(svc *v1.Service, k igd.Key) bool {
	if lb.cfg.Admit == nil {
		return true
	}
	keys := specKeys(svc)
	slices.SortFunc(keys, compareKeys)
	return lb.cfg.Admit(svc, keys)[k] == nil
}

// capReachedLocked returns why o may not take a key no Service holds, when
// the Services hold or are taking Config.MaxMappings keys already; else nil.
// The caller holds lb.mu.
func (lb *LoadBalancer) capReachedLocked(o owner, k igd.Key) error {
	if lb.cfg.MaxMappings <= 0 {
		return nil
	}
	n := 0
	for _, s := range lb.services {
		n += len(s.held)
	}
	if n < lb.cfg.MaxMappings {
		return nil
	}
	return &PortError{Service: o.key(), Key: k,
		Err: fmt.Errorf("%w: the cluster's cap on mappings, %d, is reached: another Service must give one up", ErrNotAdmitted, lb.cfg.MaxMappings)}
}
