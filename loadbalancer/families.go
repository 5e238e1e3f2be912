// This file is the join of the family step (pipeline.go's serveFamilies,
// which plans each family from the Service): how the ingress entries of a
// Service's IP families join into one status, which family is not served
// (pipeline.go warns: familyNotServed), and whether one is down. IPv4 is
// the router's port mappings; IPv6 is pinholes (pinholes.go).

package loadbalancer

import (
	"errors"
	"slices"

	v1 "k8s.io/api/core/v1"
)

// EventReasonIPFamilyNotServed is a Warning's: one of a Service's IP families
// cannot be served (the message names it and why) while the other is.
const EventReasonIPFamilyNotServed = "IPFamilyNotServed"

// errNoPinholeClient is why IPv6 is not served without Config.Pinholes.
var errNoPinholeClient = errors.New("the router opens no IPv6 firewall pinholes (Config.Pinholes is nil)")

// joinFamilies returns the status and error of o, a Service of families
// fams, served on IPv4 as st4 and err4 (both zero when it has no IPv4) and
// on IPv6 as ing6 and err6. A family that failed while the other was served
// is not served: it is returned as unserved (the caller warns why:
// familyNotServed) and the Service is served; with none served, the
// Service fails with IPv4's error (as an IPv4-only one does) and IPv6's.
func (lb *LoadBalancer) joinFamilies(o owner, fams []v1.IPFamily, st4 *v1.LoadBalancerStatus, err4 error, ing6 *v1.LoadBalancerIngress, err6 error) (_ *v1.LoadBalancerStatus, unserved v1.IPFamily, _ error) {
	hasV4 := slices.Contains(fams, v1.IPv4Protocol)
	served4 := hasV4 && err4 == nil && st4 != nil
	served6 := err6 == nil && ing6 != nil
	switch {
	case !served4 && !served6:
		lb.update(o, func(s *serviceState) { s.familyDown = false }) // the caller retries
		if hasV4 {
			return st4, "", errors.Join(err4, err6)
		}
		return nil, "", err6
	case !served6:
		unserved = v1.IPv6Protocol
	case hasV4 && !served4:
		unserved = v1.IPv4Protocol
	}
	down := hasV4 && !served4 || !served6
	lb.update(o, func(s *serviceState) {
		s.familyDown = down
		for _, f := range fams {
			if f == v1.IPv4Protocol && served4 || f == v1.IPv6Protocol && served6 {
				delete(s.familyWarned, f)
			}
		}
	})
	if down {
		lb.bg.poke() // retried in the background
	}
	st := &v1.LoadBalancerStatus{}
	for _, f := range fams {
		switch {
		case f == v1.IPv4Protocol && served4:
			st.Ingress = append(st.Ingress, st4.Ingress...)
		case f == v1.IPv6Protocol && served6:
			st.Ingress = append(st.Ingress, *ing6)
		}
	}
	return st, unserved, nil
}

// familyDown reports whether o's last operation served one of its families
// and not the other (retried in the background as failed ports are).
func (lb *LoadBalancer) familyDown(o owner) bool {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	s := lb.services[o.token]
	return s != nil && s.familyDown
}
