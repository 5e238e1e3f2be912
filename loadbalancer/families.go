// This file is the family step of the pipeline (pipeline.go's serve and
// serveFamilies): which of a Service's IP families are served, how their
// ingress entries join into one status, and the Warning event of a family
// not served. IPv4 is the router's port mappings; IPv6 is pinholes
// (pinholes.go).

package loadbalancer

import (
	"errors"
	"net/netip"
	"slices"

	v1 "k8s.io/api/core/v1"
)

// EventReasonIPFamilyNotServed is a Warning's: one of a Service's IP families
// cannot be served (the message names it and why) while the other is.
const EventReasonIPFamilyNotServed = "IPFamilyNotServed"

// errNoPinholeClient is why IPv6 is not served without Config.Pinholes.
var errNoPinholeClient = errors.New("the router opens no IPv6 firewall pinholes (Config.Pinholes is nil)")

// families returns svc's IP families in the order of spec.ipFamilies; none
// (a Service the API server has not defaulted) is IPv4.
func families(svc *v1.Service) []v1.IPFamily {
	if len(svc.Spec.IPFamilies) == 0 {
		return []v1.IPFamily{v1.IPv4Protocol}
	}
	return svc.Spec.IPFamilies
}

// recordsIPv4 reports whether o may hold IPv4 mappings: this process holds
// keys of it, or its status has an IPv4 ingress with ports.
func (lb *LoadBalancer) recordsIPv4(o owner, svc *v1.Service) bool {
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		if ip, err := netip.ParseAddr(ing.IP); err == nil && ip.Unmap().Is4() && len(ing.Ports) > 0 {
			return true
		}
	}
	return len(lb.keysHeldBy(o)) > 0
}

// joinFamilies returns the status and error of a Service of families fams
// served on IPv4 as st4 and err4 (both zero when it has no IPv4) and on
// IPv6 as ing6 and err6. A family that failed while the other was served
// is not served (a Warning event says why) and the Service is served; with
// none served, the Service fails with IPv4's error (as an IPv4-only one
// does) and IPv6's.
func (lb *LoadBalancer) joinFamilies(o owner, svc *v1.Service, fams []v1.IPFamily, st4 *v1.LoadBalancerStatus, err4 error, ing6 *v1.LoadBalancerIngress, err6 error) (*v1.LoadBalancerStatus, error) {
	hasV4 := slices.Contains(fams, v1.IPv4Protocol)
	served4 := hasV4 && err4 == nil && st4 != nil
	served6 := err6 == nil && ing6 != nil
	switch {
	case !served4 && !served6:
		lb.update(o, func(s *serviceState) { s.familyDown = false }) // the caller retries
		if hasV4 {
			return st4, errors.Join(err4, err6)
		}
		return nil, err6
	case !served6:
		lb.familyNotServed(o, svc, v1.IPv6Protocol, err6)
	case hasV4 && !served4:
		lb.familyNotServed(o, svc, v1.IPv4Protocol, err4)
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
	return st, nil
}

// familyDown reports whether o's last operation served one of its families
// and not the other (retried in the background as failed ports are).
func (lb *LoadBalancer) familyDown(o owner) bool {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	s := lb.services[o.token]
	return s != nil && s.familyDown
}

// familyNotServed records on svc a Warning event that family fam is not
// served, and why: once per reason, while the background work runs.
func (lb *LoadBalancer) familyNotServed(o owner, svc *v1.Service, fam v1.IPFamily, why error) {
	if joined, ok := why.(interface{ Unwrap() []error }); ok && len(joined.Unwrap()) > 0 {
		why = joined.Unwrap()[0] // the reason, without the retry joined to it
	}
	msg := why.Error()
	var already bool
	lb.update(o, func(s *serviceState) { already = s.familyWarned[fam] == msg })
	if already {
		return
	}
	other := v1.IPv4Protocol
	if fam == v1.IPv4Protocol {
		other = v1.IPv6Protocol
	}
	if lb.tell(svc, v1.EventTypeWarning, EventReasonIPFamilyNotServed, "Not served on %s: %s; the Service is served on %s", fam, msg, other) {
		lb.update(o, func(s *serviceState) {
			if s.familyWarned == nil {
				s.familyWarned = make(map[v1.IPFamily]string)
			}
			s.familyWarned[fam] = msg
		})
	}
}
