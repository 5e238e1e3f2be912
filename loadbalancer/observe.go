package loadbalancer

import "time"

// ObservationTTL is how long the table read of a GetLoadBalancer stands in
// for the read that an EnsureLoadBalancerDeleted of the same Service would
// make.
//
// The service controller deletes a load balancer by calling GetLoadBalancer
// and then, when it exists, EnsureLoadBalancerDeleted, back to back. Both
// need the router's table (the only record of which mappings are the
// Service's), and on a router like miniupnpd one read costs about as much as
// one DeletePortMapping: reading twice would make deleting a 10-port Service
// cost 12 calls instead of 11. So the delete uses GetLoadBalancer's read when
// all of these hold, and reads the table itself otherwise:
//   - the read began at most ObservationTTL ago;
//   - this process has made no router write for the Service since (writes
//     for a Service happen under its gate, which the read held);
//   - every mapping of the Service in it has at least leaseMargin left beyond
//     the observation's age, by the lease the router reported and, for
//     mappings this process wrote, by the lease the router granted then
//     (some routers report the lease as granted, not what is left of it),
//     so none of them can expire meanwhile. A mapping an earlier process
//     wrote, on such a router, has no such record.
//
// UPnP has no conditional delete: every read-then-delete trusts its read
// for as long as the deletes take (tens of milliseconds on miniupnpd for 10
// ports). This widens that window by at most ObservationTTL. A mapping of
// ours that changes hands inside it would be deleted; that takes the port
// to be freed and taken by another host within the window: a router reboot
// or a router removing idle rules on its own (miniupnpd's clean_ruleset),
// another host deleting our mapping (routers not in secure mode allow it),
// another CCM instance (a previous leader) deleting it, or a write of ours
// whose call timed out landing late. An observation is used once.
const ObservationTTL = 250 * time.Millisecond

// leaseMargin is the lease a mapping must have left, beyond the observation's
// age, for the observation to stand in for a read.
const leaseMargin = 10 * time.Second

// observation is a table read made by GetLoadBalancer for one Service: the
// mappings whose description names it (ownership is decided when used, like
// for any read), and when the read began.
type observation struct {
	at       time.Time
	mappings table
}

// observe records t, read from start on, as o's observation, and drops
// observations too old to be used. It returns the part of t it keeps: the
// mappings whose description names o.
func (lb *LoadBalancer) observe(o owner, t table, start time.Time) table {
	mine := make(table)
	for k, m := range t {
		if p, ok := parseDescription(m.Description); ok && p.token == o.token {
			mine[k] = m
		}
	}
	lb.mu.Lock()
	defer lb.mu.Unlock()
	now := lb.cfg.Clock.Now()
	for token, obs := range lb.observed {
		if now.Sub(obs.at) > ObservationTTL {
			delete(lb.observed, token)
		}
	}
	lb.observed[o.token] = observation{at: start, mappings: mine}
	return mine
}

// forget drops o's observation: called before every router write for o.
func (lb *LoadBalancer) forget(o owner) {
	lb.mu.Lock()
	delete(lb.observed, o.token)
	lb.mu.Unlock()
}

// takeObservation returns o's observation, once, when it may stand in for a
// table read (see ObservationTTL). The caller holds o's gate.
func (lb *LoadBalancer) takeObservation(o owner) (table, bool) {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	obs, ok := lb.observed[o.token]
	if !ok {
		return nil, false
	}
	delete(lb.observed, o.token)
	now := lb.cfg.Clock.Now()
	age := now.Sub(obs.at)
	if age < 0 || age > ObservationTTL {
		return nil, false
	}
	for k, m := range obs.mappings {
		if m.Lease > 0 && m.Lease < age+leaseMargin {
			return nil, false
		}
		if exp, ok := lb.expires[k]; ok && exp.Sub(now) < leaseMargin {
			return nil, false
		}
	}
	lb.observationsUsed.Add(1)
	return obs.mappings, true
}
