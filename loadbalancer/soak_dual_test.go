package loadbalancer

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd/pinhole"
)

// The soak's dual-stack dimension (-soak.families=dual, with any mode but
// igd1): the schedule also creates IPv6-only and dual-stack Services (either
// order, PreferDualStack or RequireDualStack), adds and drops a Service's
// second family, and gives nodes a global IPv6 address, moves it to another
// prefix or takes it away; each process gets a pinhole client (UPnP's
// WANIPv6FirewallControl from node-0's global address in modes upnp and
// secure: the CCM's own node only; PCP with THIRD_PARTY in pcp and
// pcp-only: any node). Other hosts hold pinholes of their own, planted at
// the start and again after each reboot: the watch checks that none is ever
// closed or changed. A quiet point checks (checkPinholes) that each
// Service's status has one ingress per family served, in spec.ipFamilies
// order, its IPv6 one a global address of an eligible node; that every open
// pinhole is one a live Service's status says it holds, on a port it wants
// (none left open); and that a Service whose IPv6 can be served is.

// soakGUA is node slot i's global IPv6 address under prefix p (1 to 3).
func soakGUA(i, p int) netip.Addr {
	return netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0, byte(p), 14: 0, 15: byte(10 + i)})
}

// soakULA is node slot i's unique local address, which no pinhole may go to.
func soakULA(i int) netip.Addr {
	return netip.AddrFrom16([16]byte{0xfd, 0, 0, 0x01, 15: byte(10 + i)})
}

// Global IPv6 addresses of the hosts that are not nodes, and the port an
// app on node-0 holds a pinhole of (no Service of the soak wants it).
var (
	soakLANGUA   = netip.MustParseAddr("2001:db8:1::c8")
	soakOtherGUA = netip.MustParseAddr("2001:db8:1::d2")
)

const soakNodeAppPort = 7000

// soakPinholeWorld is a soakWorld whose router opens IPv6 pinholes.
type soakPinholeWorld interface {
	// pinholeClient returns the pinhole client of a new CCM process (on
	// node slot 0, whose global address under prefix 1 it sends from).
	pinholeClient(t *testing.T) PinholeClient
	// pinholes returns the pinholes the router holds.
	pinholes(ctx context.Context) ([]fake.OpenPinhole, error)
	// plantPinholes has other hosts open pinholes of their own (again
	// after every reboot or wipe): the LAN host at its address, on a port
	// Services want; an app on node-0, on a port none wants; in the PCP
	// modes the other cluster, under its own secret. foreignPinhole
	// reports whether p is one of them.
	plantPinholes(ctx context.Context) error
	foreignPinhole(p pinhole.Pinhole) bool
}

// pinholeProtocol is what opens the pinholes in s's mode.
func (s *soak) pinholeProtocol() string {
	if s.anyHostPinholes() {
		return "PCP (any node, THIRD_PARTY)"
	}
	return "UPnP WANIPv6FirewallControl (the CCM's own node, node-0)"
}

// anyHostPinholes reports whether pinholes may go to any node (PCP).
func (s *soak) anyHostPinholes() bool { return s.mode == "pcp" || s.mode == "pcp-only" }

// nodeObject is node n as the API server holds it: its IPv4 address and,
// dual, its unique local address and its global one (while it has one).
func (s *soak) nodeObject(n *soakNode) *v1.Node {
	o := soakNodeObject(n, s.world.nodeAddr(n.slot))
	if !s.dual {
		return o
	}
	o.Status.Addresses = append(o.Status.Addresses, v1.NodeAddress{Type: v1.NodeInternalIP, Address: soakULA(n.slot).String()})
	if n.prefix > 0 {
		o.Status.Addresses = append(o.Status.Addresses, v1.NodeAddress{Type: v1.NodeInternalIP, Address: soakGUA(n.slot, n.prefix).String()})
	}
	return o
}

func (s *soak) describeGUA(n *soakNode) string {
	if n.prefix == 0 {
		return "no global IPv6 address"
	}
	return "global IPv6 address " + soakGUA(n.slot, n.prefix).String()
}

// drawFamilies gives sv its IP families: IPv4 or IPv6 alone, or both in
// either order.
func (m *soakModel) drawFamilies(sv *soakSvc) {
	switch m.rng.IntN(5) {
	case 0:
		sv.families = []v1.IPFamily{v1.IPv4Protocol}
	case 1:
		sv.families = []v1.IPFamily{v1.IPv6Protocol}
	case 2, 3:
		sv.families = []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}
	case 4:
		sv.families = []v1.IPFamily{v1.IPv6Protocol, v1.IPv4Protocol}
	}
	m.drawPolicy(sv)
}

func (m *soakModel) drawPolicy(sv *soakSvc) {
	sv.policy = v1.IPFamilyPolicySingleStack
	if len(sv.families) == 2 {
		sv.policy = []v1.IPFamilyPolicy{v1.IPFamilyPolicyPreferDualStack, v1.IPFamilyPolicyRequireDualStack}[m.rng.IntN(2)]
	}
}

// dualOps are the schedule's operations of the dual-stack dimension.
func (s *soak) dualOps(ctx context.Context) []struct {
	weight int
	fault  bool
	do     func() string
} {
	return []struct {
		weight int
		fault  bool
		do     func() string
	}{
		{4, false, func() string { return s.changeFamilies(ctx) }},
		{3, false, func() string { return s.changeGUA(ctx) }},
	}
}

// changeFamilies adds a Service's second family, or drops it, as the API
// server allows (the first family never changes).
func (s *soak) changeFamilies(ctx context.Context) string {
	m := s.model
	if len(m.svcs) == 0 {
		return ""
	}
	sv := m.svcs[m.rng.IntN(len(m.svcs))]
	if sv.families == nil {
		return ""
	}
	if len(sv.families) == 2 {
		sv.families = sv.families[:1]
	} else {
		other := v1.IPv6Protocol
		if sv.families[0] == v1.IPv6Protocol {
			other = v1.IPv4Protocol
		}
		sv.families = append(sv.families, other)
	}
	m.drawPolicy(sv)
	err := s.apiUpdate(ctx, sv)
	return fmt.Sprintf("change %s/%s: ipFamilies %v %s => %s%s", sv.ns, sv.name, sv.families, sv.policy, sv, errSuffix(err))
}

// changeGUA gives a node a global IPv6 address, moves it to another
// prefix, or takes it away. Node-0's, through UPnP, is the address its
// processes send from: it is reported or not, never moved.
func (s *soak) changeGUA(ctx context.Context) string {
	m := s.model
	if len(m.nodes) == 0 {
		return ""
	}
	n := m.nodes[m.rng.IntN(len(m.nodes))]
	switch {
	case n.slot == 0 && !s.anyHostPinholes():
		n.prefix = 1 - n.prefix
	case n.prefix == 0:
		n.prefix = 1 + m.rng.IntN(3)
	case m.rng.IntN(3) == 0:
		n.prefix = 0
	default:
		n.prefix = n.prefix%3 + 1
	}
	nodes := s.client.CoreV1().Nodes()
	o, err := nodes.Get(ctx, n.name, metav1.GetOptions{})
	if err == nil {
		o.Status.Addresses = s.nodeObject(n).Status.Addresses
		_, err = nodes.Update(ctx, o, metav1.UpdateOptions{})
	}
	return fmt.Sprintf("node %s now has %s%s", n.name, s.describeGUA(n), errSuffix(err))
}

// soakFamiliesOf is svc's spec.ipFamilies; none is IPv4.
func soakFamiliesOf(svc *v1.Service) []v1.IPFamily {
	if len(svc.Spec.IPFamilies) == 0 {
		return []v1.IPFamily{v1.IPv4Protocol}
	}
	return svc.Spec.IPFamilies
}

// soakGlobal is the global IPv6 address node n reports, if any.
func soakGlobal(n *v1.Node) (netip.Addr, bool) {
	for _, a := range n.Status.Addresses {
		ip, err := netip.ParseAddr(a.Address)
		if a.Type == v1.NodeInternalIP && err == nil && ip.Is6() && !ip.Is4In6() && ip.IsGlobalUnicast() && !ip.IsPrivate() {
			return ip, true
		}
	}
	return netip.Addr{}, false
}

// eligible6 returns the global addresses of the nodes svc's pinholes may
// go to: its eligible nodes (as for IPv4), through UPnP node-0 only.
func (s *soak) eligible6(svc *v1.Service, nodes []v1.Node, eps []discoveryv1.EndpointSlice) map[netip.Addr]string {
	byName := map[string]v1.Node{}
	for _, n := range nodes {
		byName[n.Name] = n
	}
	out := map[netip.Addr]string{}
	for _, name := range s.eligible(svc, nodes, eps) { // by IPv4 address: one per node
		if !s.anyHostPinholes() && name != soakSecureNode {
			continue
		}
		if a, ok := soakGlobal(ptrTo(byName[name])); ok {
			out[a] = name
		}
	}
	return out
}

func ptrTo[T any](v T) *T { return &v }

// soakPinholeKey is a pinhole without its lease.
type soakPinholeKey struct {
	proto v1.Protocol
	addr  netip.Addr
	port  int32
}

func (k soakPinholeKey) String() string {
	return fmt.Sprintf("%s %s", k.proto, netip.AddrPortFrom(k.addr, uint16(k.port)))
}

// checkPinholes is check's IPv6 half: the statuses of svcs (the Services
// served, not being deleted; servable4 those servable on IPv4) against the
// router's pinholes. It returns what
// does not hold and how many of the pinholes it names are left to their
// lease: in the PCP modes a pinhole renewed once can no longer be closed
// (miniupnpd 2.3.1 drops its nonce; the fake does too) and ends with its
// lease, if no one renewed it since the quiet point began.
func (s *soak) checkPinholes(ctx context.Context, began time.Time, svcs []*v1.Service, servable4 map[string]map[netip.Addr]string, nodes []v1.Node, eps []discoveryv1.EndpointSlice) (bad []string, leftToLease int) {
	pw := s.world.(soakPinholeWorld)
	open, err := pw.pinholes(ctx)
	if err != nil {
		return []string{"reading the router's pinholes: " + err.Error()}, 0
	}
	fail := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
	isOpen := map[soakPinholeKey]fake.OpenPinhole{}
	for _, p := range open {
		if pw.foreignPinhole(p.Pinhole) {
			continue
		}
		isOpen[soakPinholeKey{v1.Protocol(p.Pinhole.Protocol), p.Pinhole.InternalClient, int32(p.Pinhole.InternalPort)}] = p
	}
	told := map[soakPinholeKey][]string{}    // who is told it holds each pinhole
	refused := map[soakPinholeKey][]string{} // who is told another holds it
	for _, svc := range svcs {
		k := svcKey(svc)
		fams := soakFamiliesOf(svc)
		st := svc.Status.LoadBalancer
		var v4, v6 []int // indexes of the IPv4 and IPv6 ingress entries
		for i, ing := range st.Ingress {
			if ip, err := netip.ParseAddr(ing.IP); err == nil && ip.Is6() && !ip.Is4In6() {
				v6 = append(v6, i)
			} else {
				v4 = append(v4, i)
			}
		}
		hasV4, hasV6 := slices.Contains(fams, v1.IPv4Protocol), slices.Contains(fams, v1.IPv6Protocol)
		el := s.eligible6(svc, nodes, eps)
		if hasV6 && len(el) == 0 {
			// Not servable on IPv6: its pinholes must go (below), and
			// its sync may fail, which writes no status (as for IPv4):
			// the status is not checked.
			continue
		}
		var ports []v1.ServicePort
		for _, p := range svc.Spec.Ports {
			if p.Protocol == v1.ProtocolTCP || p.Protocol == v1.ProtocolUDP {
				ports = append(ports, p)
			}
		}
		// freeAt is an eligible address where none of its ports is
		// open to another (invalid: none): where it can be served on
		// IPv6 (kube-proxy would give it another's traffic elsewhere).
		var freeAt netip.Addr
		for _, a := range slices.SortedFunc(maps.Keys(el), netip.Addr.Compare) {
			if !slices.ContainsFunc(ports, func(p v1.ServicePort) bool {
				_, open := isOpen[soakPinholeKey{p.Protocol, a, p.Port}]
				return open && !ownsPinhole(st, a, p)
			}) {
				freeAt = a
				break
			}
		}
		if !hasV4 && !freeAt.IsValid() {
			// IPv6 only, and not servable: its sync fails, which
			// writes no status (as for IPv4): the status is not checked.
			continue
		}
		if _, ok := servable4[k]; !hasV4 || ok {
			// Its status is fresh: one ingress per family served, in
			// the order of spec.ipFamilies.
			if !hasV4 && len(v4) > 0 {
				fail("%s (families %v): status %s has an IPv4 ingress", k, fams, describeStatus(st))
			}
			if len(v4) == 1 && len(v6) == 1 && (v4[0] < v6[0]) != (fams[0] == v1.IPv4Protocol) {
				fail("%s: status %s is not in the order of spec.ipFamilies %v", k, describeStatus(st), fams)
			}
		}
		if !hasV6 {
			if _, ok := servable4[k]; ok && len(v6) > 0 {
				fail("%s (families %v): status %s has an IPv6 ingress", k, fams, describeStatus(st))
			}
			continue
		}
		if len(v6) > 1 {
			fail("%s: status %s has %d IPv6 ingress entries", k, describeStatus(st), len(v6))
			continue
		}
		if len(v6) == 0 {
			// Liveness: a Service whose IPv6 can be served is: it is
			// served at an eligible node's address only where none of
			// its ports is open to another Service (kube-proxy would
			// give it that one's traffic), so it is owed service when
			// one such address exists.
			if freeAt.IsValid() {
				fail("%s: not served on IPv6 (status %s), and every port it wants is free at eligible node %s's address %s", k, describeStatus(st), el[freeAt], freeAt)
			}
			continue
		}
		ing := st.Ingress[v6[0]]
		a, err := netip.ParseAddr(ing.IP)
		if err != nil {
			fail("%s: IPv6 ingress %q: %v", k, ing.IP, err)
			continue
		}
		if _, ok := el[a]; !ok {
			fail("%s: IPv6 ingress %s is not the global address of an eligible node (%v)", k, a, el)
		}
		for _, ps := range ing.Ports {
			pk := soakPinholeKey{ps.Protocol, a, ps.Port}
			if !slices.ContainsFunc(ports, func(p v1.ServicePort) bool { return p.Protocol == ps.Protocol && p.Port == ps.Port }) {
				fail("%s: IPv6 status lists %s/%d, a port it does not have", k, ps.Protocol, ps.Port)
			}
			if ps.Error == nil {
				told[pk] = append(told[pk], k)
				if _, ok := isOpen[pk]; !ok {
					fail("%s: status says pinhole %s is open; the router has no such pinhole", k, pk)
				}
			} else {
				refused[pk] = append(refused[pk], k+" ("+*ps.Error+")")
			}
		}
		for _, p := range ports {
			if !slices.ContainsFunc(ing.Ports, func(ps v1.PortStatus) bool { return p.Protocol == ps.Protocol && p.Port == ps.Port }) {
				fail("%s: IPv6 status %s lacks port %s/%d", k, describeStatus(st), p.Protocol, p.Port)
			}
		}
	}
	// Every pinhole open is held by exactly one Service that says so;
	// every port refused is held by another.
	for pk, who := range told {
		if len(who) > 1 {
			fail("[arbitration] %v are all told they hold pinhole %s", who, pk)
		}
	}
	for pk, who := range refused {
		if len(told[pk]) == 0 {
			_, ok := isOpen[pk]
			fail("%v told pinhole %s is not theirs; no Service holds it (open: %t)", who, pk, ok)
		}
	}
	for pk, p := range isOpen {
		if len(told[pk]) > 0 {
			continue
		}
		msg := fmt.Sprintf("pinhole %s (lease %s left, description %q) is open and no live Service holds it", pk, p.Pinhole.Lease, p.Description)
		if s.anyHostPinholes() && p.Description == "" && !time.Now().Add(p.Pinhole.Lease).After(began.Add(soakLease+time.Second)) {
			// Renewed through PCP: miniupnpd 2.3.1 (and the fake) drop
			// its nonce, and no close is authorized until its lease ends.
			leftToLease++
			msg += " (renewed, so no longer closable: left to its lease)"
		}
		fail("%s", msg)
	}
	return bad, leftToLease
}

// ownsPinhole reports whether st records p's pinhole at a as its own (an
// IPv6 ingress at a listing p without an error).
func ownsPinhole(st v1.LoadBalancerStatus, a netip.Addr, p v1.ServicePort) bool {
	for _, ing := range st.Ingress {
		if ip, err := netip.ParseAddr(ing.IP); err != nil || ip.WithZone("") != a {
			continue
		}
		for _, ps := range ing.Ports {
			if ps.Protocol == p.Protocol && ps.Port == p.Port && ps.Error == nil {
				return true
			}
		}
	}
	return false
}
