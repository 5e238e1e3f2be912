package loadbalancer

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/internal/pcpwire"
)

// The invariants a quiet point waits for. Each message that concerns a port
// several Services want starts with "[arbitration]": the promise checked
// is that exactly one of them is served and every other is told the port
// is in use (issue 29).

// soakWant is one port a Service wants mapped.
type soakWant struct {
	svc  *v1.Service
	port v1.ServicePort
	key  igd.Key
}

func svcKey(s *v1.Service) string { return s.Namespace + "/" + s.Name }

// handled reports whether the soak's load balancer serves svc: its
// opted-in classless Services, and in the standalone deployment those of
// soakClass (in the ccm one, nothing serves those).
func (s *soak) handled(svc *v1.Service) bool {
	if svc.DeletionTimestamp != nil || svc.Spec.Type != v1.ServiceTypeLoadBalancer {
		return false
	}
	if svc.Spec.LoadBalancerClass != nil {
		return s.deploy == "standalone" && *svc.Spec.LoadBalancerClass == soakClass
	}
	return svc.Annotations[AnnotationLoadBalancerType] == AnnotationValue
}

// wants returns the ports s wants mapped: none unless it has the IPv4
// family.
func wants(s *v1.Service) []soakWant {
	var out []soakWant
	if !slices.Contains(soakFamiliesOf(s), v1.IPv4Protocol) {
		return nil
	}
	for _, p := range s.Spec.Ports {
		if p.NodePort == 0 || (p.Protocol != v1.ProtocolTCP && p.Protocol != v1.ProtocolUDP) {
			continue
		}
		out = append(out, soakWant{svc: s, port: p, key: igd.Key{Protocol: igd.Protocol(p.Protocol), ExternalPort: uint16(p.Port)}})
	}
	return out
}

// descriptions are the descriptions a mapping of w may carry in this mode.
func (s *soak) descriptions(w soakWant) []string {
	o := newOwner(testCluster, w.svc.Namespace, w.svc.Name)
	out := []string{o.description(w.port.Name)}
	if s.mode == "pcp" || s.mode == "pcp-only" {
		out = append(out, fake.PCPDescription(pcpwire.NonceFor(soakSecret, o.token, w.key)))
	}
	return out
}

// eligible returns the addresses of the nodes s's mappings may point at.
func (s *soak) eligible(svc *v1.Service, nodes []v1.Node, eps []discoveryv1.EndpointSlice) map[netip.Addr]string {
	withEndpoint := map[string]bool{}
	for _, es := range eps {
		if es.Namespace != svc.Namespace || es.Labels[discoveryv1.LabelServiceName] != svc.Name {
			continue
		}
		for _, e := range es.Endpoints {
			if e.NodeName != nil && (e.Conditions.Ready == nil || *e.Conditions.Ready) {
				withEndpoint[*e.NodeName] = true
			}
		}
	}
	out := map[netip.Addr]string{}
	for _, n := range nodes {
		if n.DeletionTimestamp != nil || n.Labels[v1.LabelNodeExcludeBalancers] != "" {
			continue
		}
		if !slices.ContainsFunc(n.Status.Conditions, func(c v1.NodeCondition) bool { return c.Type == v1.NodeReady && c.Status == v1.ConditionTrue }) {
			continue
		}
		if s.mode == "secure" && n.Name != soakSecureNode {
			continue
		}
		if svc.Spec.ExternalTrafficPolicy == v1.ServiceExternalTrafficPolicyLocal && !withEndpoint[n.Name] {
			continue
		}
		for _, a := range n.Status.Addresses {
			if a.Type != v1.NodeInternalIP {
				continue
			}
			if ip := netip.MustParseAddr(a.Address); ip.Is4() {
				out[ip] = n.Name
			}
		}
	}
	return out
}

// check returns what does not hold now, nil when every invariant does, and
// how many of the mappings it names are left to their lease: in pcp-only
// mode, where blind mode leaves to its lease what it cannot find (see the
// package documentation), and in both PCP modes a Service's MAP the router
// granted at another port than asked (see igd/pcp), a wrong mapping of ours that no one renewed since
// the quiet point began (its lease, on the router's clock, ends within
// soakLease of began). One whose lease ends later was written after began,
// and is named so.
func (s *soak) check(ctx context.Context, began time.Time) (_ []string, leftToLease int) {
	tab, err := s.world.table(ctx)
	if err != nil {
		return []string{"reading the router's table: " + err.Error()}, 0
	}
	svcList, err := s.client.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return []string{"listing Services: " + err.Error()}, 0
	}
	nodeList, err := s.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return []string{"listing nodes: " + err.Error()}, 0
	}
	epList, err := s.client.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return []string{"listing EndpointSlices: " + err.Error()}, 0
	}
	ext := s.world.externalIP()
	ours := map[netip.Addr]bool{}
	for i := range s.world.maxNodes() {
		ours[s.world.nodeAddr(i)] = true
	}
	var bad []string
	fail := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
	// failMapping is fail for a mapping of ours that should not be there
	// as it is.
	base, _ := s.bound()
	failMapping := func(m igd.Mapping, format string, args ...any) {
		if gone, ok := s.nodeGone[m.InternalClient]; ok && !s.liveAddr(m.InternalClient) && (s.procStart.Sub(gone)).Abs() < base {
			// The documented limit: a process started within a bound
			// of its node's deletion (before or after it) may not have
			// read the mapping while the node was a node, and once the
			// node is forgotten it cannot prove the mapping ours; it
			// ends with its lease.
			if m.Lease > 0 && !time.Now().Add(m.Lease).After(s.procStart.Add(soakLease+time.Second)) {
				leftToLease++
				fail(format+fmt.Sprintf(" (to node %s, deleted %s from process %d's start: left to its lease, %s left)",
					m.InternalClient, gone.Sub(s.procStart).Round(time.Millisecond), s.procID, m.Lease), args...)
				return
			}
		}
		if s.mode == "pcp-only" {
			// The router's lease left is rounded up to a whole second.
			if m.Lease > 0 && !time.Now().Add(m.Lease).After(began.Add(soakLease+time.Second)) {
				leftToLease++
				format += fmt.Sprintf(" (left to its lease: %s left)", m.Lease)
			} else {
				format += fmt.Sprintf(" (lease %s: renewed after the quiet point began)", m.Lease)
			}
		}
		fail(format, args...)
	}

	byKey := map[igd.Key]igd.Mapping{}
	for _, m := range tab {
		byKey[m.Key()] = m
	}
	// Who wants what, and who may be served.
	contenders := map[igd.Key][]soakWant{}
	servable := map[string]map[netip.Addr]string{}
	var svcs []*v1.Service
	for i := range svcList.Items {
		svc := &svcList.Items[i]
		if svc.DeletionTimestamp != nil {
			fail("Service %s is still being deleted (finalizers %v)", svcKey(svc), svc.Finalizers)
			continue
		}
		if !s.handled(svc) {
			continue
		}
		svcs = append(svcs, svc)
		el := s.eligible(svc, nodeList.Items, epList.Items)
		if len(el) > 0 && ext.IsValid() {
			servable[svcKey(svc)] = el
		}
		for _, w := range wants(svc) {
			contenders[w.key] = append(contenders[w.key], w)
		}
	}
	// owners maps a description to the want it belongs to.
	owners := map[string]soakWant{}
	for _, ws := range contenders {
		for _, w := range ws {
			for _, d := range s.descriptions(w) {
				owners[d] = w
			}
		}
	}

	// Every mapping of ours is wanted, by the Service whose description it
	// carries, at its nodePort, on an eligible node.
	served := map[string]map[igd.Key]bool{} // Service -> keys mapped for it
	targets := map[string]map[netip.Addr]bool{}
	for _, m := range tab {
		if !ours[m.InternalClient] {
			continue
		}
		w, ok := owners[m.Description]
		if ok && w.key != m.Key() && (s.mode == "pcp" || s.mode == "pcp-only") {
			// The documented limit (igd/pcp): miniupnpd grants the next
			// free port to a MAP with PREFER_FAILURE when another mapping
			// holds the one asked, and the client deletes it again; a MAP
			// whose answer was lost, or whose process ended before the
			// delete, leaves it at a port no process knows: its lease
			// ends it.
			why := fmt.Sprintf("mapping %s -> %s:%d %q, the Service's MAP of %s granted at another port", m.Key(), m.InternalClient, m.InternalPort, m.Description, w.key)
			if m.Lease > 0 && !time.Now().Add(m.Lease).After(began.Add(soakLease+time.Second)) {
				leftToLease++
				fail("%s (its answer lost: left to its lease, %s left)", why, m.Lease)
			} else {
				fail("%s (lease %s: written after the quiet point began)", why, m.Lease)
			}
			continue
		}
		if !ok || w.key != m.Key() {
			failMapping(m, "mapping %s -> %s:%d %q belongs to no live Service that wants it", m.Key(), m.InternalClient, m.InternalPort, m.Description)
			continue
		}
		k := svcKey(w.svc)
		if served[k] == nil {
			served[k], targets[k] = map[igd.Key]bool{}, map[netip.Addr]bool{}
		}
		served[k][m.Key()] = true
		targets[k][m.InternalClient] = true
		if m.InternalPort != uint16(w.port.NodePort) {
			failMapping(m, "mapping %s of %s forwards to nodePort %d, want %d", m.Key(), k, m.InternalPort, w.port.NodePort)
		}
		if el, ok := servable[k]; ok {
			if _, ok := el[m.InternalClient]; !ok {
				failMapping(m, "mapping %s of %s points at %s, not an eligible node (%v)", m.Key(), k, m.InternalClient, el)
			}
		}
	}
	for k, ts := range targets {
		if len(ts) > 1 {
			fail("the mappings of %s point at %d nodes: %v", k, len(ts), ts)
		}
	}

	// Every servable Service has each port it wants mapped, unless another
	// owner holds it; of several that want one port, exactly one.
	for key, ws := range contenders {
		if m, ok := byKey[key]; ok && !ours[m.InternalClient] {
			continue // another owner's: each is told so (status, below)
		}
		var able []string
		for _, w := range ws {
			if _, ok := servable[svcKey(w.svc)]; ok {
				able = append(able, svcKey(w.svc))
			}
		}
		if len(able) == 0 {
			continue
		}
		var holders []string
		for _, w := range ws {
			if served[svcKey(w.svc)][key] {
				holders = append(holders, svcKey(w.svc))
			}
		}
		switch {
		case len(ws) == 1 && len(holders) == 0:
			fail("%s: port %s is not mapped", able[0], key)
		case len(ws) > 1 && len(holders) == 0:
			fail("[arbitration] port %s is wanted by %v (servable: %v) and mapped for none", key, names(ws), able)
		}
	}

	// Statuses agree with the table; no two Services are told they hold
	// one port. Only their IPv4 ingress is the table's (checkPinholes
	// checks the IPv6 one).
	told := map[igd.Key][]string{}
	for _, svc := range svcs {
		if !slices.Contains(soakFamiliesOf(svc), v1.IPv4Protocol) {
			continue // no IPv4 ingress wanted: checkPinholes
		}
		k := svcKey(svc)
		st := ipv4Status(svc.Status.LoadBalancer)
		for _, ing := range st.Ingress {
			for _, p := range ing.Ports {
				if p.Error == nil {
					key := igd.Key{Protocol: igd.Protocol(p.Protocol), ExternalPort: uint16(p.Port)}
					told[key] = append(told[key], k)
				}
			}
		}
		if _, ok := servable[k]; !ok {
			continue
		}
		if len(served[k]) == 0 && len(st.Ingress) == 0 {
			continue // nothing served, nothing told
		}
		if len(st.Ingress) != 1 || st.Ingress[0].IP != ext.String() {
			fail("%s: status %s, want the router's external IP %s", k, describeStatus(st), ext)
			continue
		}
		for _, w := range wants(svc) {
			i := slices.IndexFunc(st.Ingress[0].Ports, func(p v1.PortStatus) bool {
				return p.Port == w.port.Port && p.Protocol == w.port.Protocol
			})
			tag := ""
			if len(contenders[w.key]) > 1 {
				tag = "[arbitration] "
			}
			switch {
			case i < 0:
				fail("%s%s: status %s lacks port %s", tag, k, describeStatus(st), w.key)
			case served[k][w.key] && st.Ingress[0].Ports[i].Error != nil:
				fail("%s%s: port %s is mapped, status says %q", tag, k, w.key, *st.Ingress[0].Ports[i].Error)
			case !served[k][w.key] && st.Ingress[0].Ports[i].Error == nil:
				fail("%s%s: status says port %s is served; the table has no mapping of it there", tag, k, w.key)
			}
		}
	}
	for key, who := range told {
		if len(who) > 1 {
			fail("[arbitration] %v are all told they hold %s", who, key)
		}
	}
	if s.dual {
		more, left := s.checkPinholes(ctx, began, svcs, servable, nodeList.Items, epList.Items)
		bad, leftToLease = append(bad, more...), leftToLease+left
	}
	slices.Sort(bad)
	return bad, leftToLease
}

// ipv4Status is st without its IPv6 ingress entries.
func ipv4Status(st v1.LoadBalancerStatus) v1.LoadBalancerStatus {
	var out v1.LoadBalancerStatus
	for _, ing := range st.Ingress {
		if ip, err := netip.ParseAddr(ing.IP); err == nil && ip.Is6() && !ip.Is4In6() {
			continue
		}
		out.Ingress = append(out.Ingress, ing)
	}
	return out
}

func names(ws []soakWant) []string {
	var out []string
	for _, w := range ws {
		out = append(out, svcKey(w.svc))
	}
	return out
}

func describeStatus(st v1.LoadBalancerStatus) string {
	var b strings.Builder
	for _, ing := range st.Ingress {
		fmt.Fprintf(&b, "%s[", ing.IP)
		for _, p := range ing.Ports {
			e := ""
			if p.Error != nil {
				e = "!" + *p.Error
			}
			fmt.Fprintf(&b, " %s/%d%s", p.Protocol, p.Port, e)
		}
		b.WriteString(" ]")
	}
	if b.Len() == 0 {
		return "(empty)"
	}
	return b.String()
}
