package loadbalancer

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/pinhole"
)

// lostOpenAnswers is a router that opens every pinhole asked and whose
// answer never arrives: the caller sees a timeout.
type lostOpenAnswers struct{ anyHostPinholes }

func (l lostOpenAnswers) OpenPinhole(ctx context.Context, p pinhole.Pinhole) error {
	if err := l.anyHostPinholes.OpenPinhole(ctx, p); err != nil {
		return err
	}
	return fmt.Errorf("open pinhole %s: the answer was lost: %w", pinholeRow(p), context.DeadlineExceeded)
}

// leaseLeft returns how long the router keeps p's pinhole open from now
// (zero: not open).
func (f *fakePinholes) leaseLeft(proto igd.Protocol, p pinholeKey) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	end, ok := f.open[pinholeKey{Protocol: proto, Addr: p.Addr, Port: p.Port}]
	if !ok {
		return 0
	}
	return max(end.Sub(f.clock.Now()), 0)
}

// firstLeaseProcess is a LoadBalancer on e's router and clock through
// pinholes p, with an hour's lease renewed every five minutes, so a first
// lease of four renewal intervals (20 minutes) is shorter than a lease.
func firstLeaseProcess(t *testing.T, e *env, p PinholeClient) *LoadBalancer {
	t.Helper()
	lb, err := New(Config{ClusterName: testCluster, Lease: time.Hour, RenewInterval: 5 * time.Minute,
		Client: e.router.Client(addrA), Clock: e.clock, Pinholes: p})
	if err != nil {
		t.Fatal(err)
	}
	return lb
}

// A pinhole whose opening answer was lost, by a process that then stopped
// before any status recorded it, is known to no process: when its Service
// is served elsewhere afterwards (here its node's prefix changed, and the
// next process serves it at the new address only), nothing closes it. It
// was opened for a first lease, not a whole one: it ends within four
// renewal intervals, not an hour.
func TestUnrecordedPinholeOfAStoppedProcessEndsWithItsFirstLease(t *testing.T) {
	e, f := newDualEnv(t, Config{}, fake.RouterConfig{}, anyHostPinhole)
	lbA := firstLeaseProcess(t, e, lostOpenAnswers{anyHostPinholes{f}})
	e.lb = lbA
	nodes := dualNodes()
	svc := lbService("default", "web", withFamilies(v1.IPv6Protocol))
	rA := startBackground(t, e, nodes[0], nodes[1], nodes[2], svc)
	diffStrings(t, "pinholes open after the first process's pass", []string{pin(igd.TCP, guaA, 8080)}, f.Open())
	rA.stop(t)
	live, err := rA.client.CoreV1().Services(svc.Namespace).Get(context.Background(), svc.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(recordedPinholes(live)) != 0 {
		t.Fatalf("the status records %v after the lost answer; the test needs it to record none", recordedPinholes(live))
	}

	lbB := firstLeaseProcess(t, e, anyHostPinholes{f})
	eB := &env{lb: lbB, router: e.router, clock: e.clock}
	renumbered := newNode("node-a", addrA, withIPv6(guaA2))
	rB := startBackground(t, eB, renumbered, nodes[1], nodes[2], live)
	for range 4 { // 20 minutes: four renewal intervals
		rB.tick(t)
	}
	rB.clock.Step(time.Second)
	diffStrings(t, "pinholes open four renewal intervals later", []string{pin(igd.TCP, guaA2, 8080)}, f.Open())
}

// pinholeRows is ks as pin rows.
func pinholeRows(ks []pinholeKey) []string {
	out := []string{}
	for _, k := range ks {
		out = append(out, pin(k.Protocol, k.Addr, k.Port))
	}
	return out
}

// A family whose router call fails while the other family is served keeps
// its part of the status as it was: for IPv6 the status is the only record
// of the Service's pinholes, and a renewal whose answer was lost may have
// opened them again, so a status written without them would leave them to a
// whole lease once this process stops. The family is still reported down
// (a Warning event, retried in the background).
func TestFailingFamilyKeepsItsRecordedIngressWhileTheOtherIsServed(t *testing.T) {
	e, f := newDualEnv(t, Config{}, fake.RouterConfig{}, anyHostPinhole)
	nodes := dualNodes()
	svc := dualService("web")
	before := e.mustEnsure(t, svc, nodes)
	svc.Status.LoadBalancer = *before
	e.clock.Step(e.lb.cfg.pinholeLease() / 2) // the pinholes are due for renewal
	f.Fail(fmt.Errorf("open pinhole: %w", context.DeadlineExceeded))
	got, err := e.ensure(t, svc, nodes)
	if err != nil {
		t.Fatalf("Ensure with the IPv6 router failing and IPv4 served: %v", err)
	}
	if diff := cmp.Diff(before, got); diff != "" {
		t.Errorf("status while IPv6 renewals fail (-want +got):\n%s", diff)
	}
	if !e.lb.familyDown(newOwner(testCluster, svc.Namespace, svc.Name)) {
		t.Errorf("IPv6 not reported down while its renewals fail")
	}
}

// A pinhole a pass opened while no status recorded it gets a first lease
// (four renewal intervals at most), and is lengthened to the lease by the
// first pass that sees its status record it, not only when it is due for
// renewal (an interval and a half after it opened): a process that stops
// in between with no other taking over for a while (a crash loop, an
// upgrade, a router whose control point stopped answering) leaves the
// pinhole its status records, which its Service still wants, open for the
// lease, as it leaves every mapping, and not for the rest of its first
// lease.
func TestPinholeLengthenedByTheFirstPassThatSeesItsRecord(t *testing.T) {
	e, f := newDualEnv(t, Config{}, fake.RouterConfig{}, anyHostPinhole)
	lb := firstLeaseProcess(t, e, anyHostPinholes{f})
	e.lb = lb
	nodes := dualNodes()
	svc := lbService("default", "web", withFamilies(v1.IPv6Protocol))
	r := startBackground(t, e, nodes[0], nodes[1], nodes[2], svc)
	k := pinholeKey{Protocol: igd.TCP, Addr: guaA, Port: 8080}
	if got, most := f.leaseLeft(igd.TCP, k), 4*lb.cfg.RenewInterval; got == 0 || got > most {
		t.Errorf("lease of the pinhole the first pass opened: %s, want at most four renewal intervals (%s)", got, most)
	}
	diffStrings(t, "pinholes the status records after the first pass", []string{pin(igd.TCP, guaA, 8080)},
		pinholeRows(recordedPinholes(r.service(t, svc.Namespace, svc.Name))))
	r.tick(t) // the first pass that sees the record
	if got, least := f.leaseLeft(igd.TCP, k), time.Hour-lb.cfg.RenewInterval; got < least {
		t.Errorf("lease of the pinhole after the pass that saw its record: %s, want the lease (%s) renewed by that pass", got, time.Hour)
	}
	r.stop(t)
	r.clock.Step(4 * lb.cfg.RenewInterval)
	diffStrings(t, "pinholes open four renewal intervals after the process stopped", []string{pin(igd.TCP, guaA, 8080)}, f.Open())
}

// An Ensure whose Service is stale (its status does not record the
// pinhole yet) renews a pinhole that is due for its first lease, and the
// router shortens it to that; the next pass, which reads the status that
// records it, opens it for the lease again.
func TestPinholeShortenedByAStaleEnsureLengthenedByTheNextPass(t *testing.T) {
	e, f := newDualEnv(t, Config{}, fake.RouterConfig{}, anyHostPinhole)
	lb := firstLeaseProcess(t, e, anyHostPinholes{f})
	e.lb = lb
	nodes := dualNodes()
	svc := lbService("default", "web", withFamilies(v1.IPv6Protocol))
	stale := svc.DeepCopy() // as the service controller's cache had it, before any status
	r := startBackground(t, e, nodes[0], nodes[1], nodes[2], svc)
	for range 2 {
		r.tick(t)
	}
	k := pinholeKey{Protocol: igd.TCP, Addr: guaA, Port: 8080}
	lb.expirePinholes() // due: as after a router restart
	e.mustEnsure(t, stale, nodes)
	if got, most := f.leaseLeft(igd.TCP, k), lb.cfg.firstPinholeLease(); got > most {
		t.Fatalf("lease of the pinhole the stale Ensure renewed: %s, want its first lease (%s) at most; the test needs it shortened", got, most)
	}
	r.tick(t)
	if got, least := f.leaseLeft(igd.TCP, k), time.Hour-lb.cfg.RenewInterval; got < least {
		t.Errorf("lease of the pinhole after the next pass: %s, want the lease (%s) renewed by that pass", got, time.Hour)
	}
	r.stop(t)
	r.clock.Step(4 * lb.cfg.RenewInterval)
	diffStrings(t, "pinholes open four renewal intervals after the process stopped", []string{pin(igd.TCP, guaA, 8080)}, f.Open())
}

// losingAnswers is a router that, once lose is set, opens every pinhole
// asked and loses the answer (the caller sees a timeout).
type losingAnswers struct {
	anyHostPinholes
	lose *atomic.Bool
}

func (l losingAnswers) OpenPinhole(ctx context.Context, p pinhole.Pinhole) error {
	if l.lose.Load() {
		return lostOpenAnswers{l.anyHostPinholes}.OpenPinhole(ctx, p)
	}
	return l.anyHostPinholes.OpenPinhole(ctx, p)
}

// A dual-stack Service whose IPv6 family fails in a pass (here the
// renewal's answers are lost; the router renewed the pinholes for the
// lease) goes on recording its pinholes in its status, as they were, while
// they may be open: when its process then stops and the Service is served
// elsewhere afterwards (its node's prefix changed), the next process closes
// them from that record at once.
func TestPinholesOfAFailedFamilyClosedByTheNextProcessFromTheirRecord(t *testing.T) {
	e, f := newDualEnv(t, Config{}, fake.RouterConfig{}, anyHostPinhole)
	var lose atomic.Bool
	lbA := firstLeaseProcess(t, e, losingAnswers{anyHostPinholes{f}, &lose})
	e.lb = lbA
	nodes := dualNodes()
	svc := dualService("web")
	rA := startBackground(t, e, nodes[0], nodes[1], nodes[2], svc)
	rA.tick(t) // lengthened to the lease
	lose.Store(true)
	for range 6 { // 35 minutes: the renewal, its answers lost
		rA.tick(t)
	}
	rA.stop(t)
	live := rA.service(t, svc.Namespace, svc.Name)
	diffStrings(t, "pinholes the status records after the failed renewal", []string{pin(igd.TCP, guaA, 8080), pin(igd.UDP, guaA, 5353)}, pinholeRows(recordedPinholes(live)))
	diffStrings(t, "pinholes open when the first process stopped", []string{pin(igd.TCP, guaA, 8080), pin(igd.UDP, guaA, 5353)}, f.Open())

	lbB := firstLeaseProcess(t, e, anyHostPinholes{f})
	eB := &env{lb: lbB, router: e.router, clock: e.clock}
	renumbered := newNode("node-a", addrA, withIPv6(guaA2))
	startBackground(t, eB, renumbered, nodes[1], nodes[2], live)
	diffStrings(t, "pinholes open after the next process's first pass", []string{pin(igd.TCP, guaA2, 8080), pin(igd.UDP, guaA2, 5353)}, f.Open())
}

// A pinhole whose status is never written (here every patch of it fails)
// stays open while its Service is served: each renewal opens it for the
// first lease again, due after a renewal interval and a half.
func TestPinholeNoStatusRecordsStaysOpenRenewedForItsFirstLease(t *testing.T) {
	e, f := newDualEnv(t, Config{}, fake.RouterConfig{}, anyHostPinhole)
	lb := firstLeaseProcess(t, e, anyHostPinholes{f})
	e.lb = lb
	nodes := dualNodes()
	svc := lbService("default", "web", withFamilies(v1.IPv6Protocol))
	client := k8sfake.NewClientset(nodes[0], nodes[1], nodes[2], svc)
	client.PrependReactor("patch", "services", func(k8stesting.Action) (bool, k8sruntime.Object, error) {
		return true, nil, errors.New("services/status: forbidden")
	})
	r := startBackgroundOn(t, e, client)
	k := pinholeKey{Protocol: igd.TCP, Addr: guaA, Port: 8080}
	f.Calls()
	for range 24 { // two hours
		r.tick(t)
		if got := f.leaseLeft(igd.TCP, k); got == 0 {
			t.Fatalf("pinhole closed at %s (calls %v)", r.clock.Now(), f.Calls())
		}
	}
	t.Logf("opens in two hours: %d", len(f.Calls()))
}

// grantingAtMost is a router whose lifetimes end at most: a longer lease
// asked is granted for most, and the call fails, as igd/pcp's OpenPinhole
// does when the router's max_lifetime cut it.
type grantingAtMost struct {
	anyHostPinholes
	most time.Duration
}

func (g grantingAtMost) OpenPinhole(ctx context.Context, p pinhole.Pinhole) error {
	asked := p.Lease
	p.Lease = min(p.Lease, g.most)
	if err := g.anyHostPinholes.OpenPinhole(ctx, p); err != nil {
		return err
	}
	if p.Lease < asked {
		return fmt.Errorf("open pinhole %s: the router granted %v of the %v asked (its max_lifetime)", pinholeRow(p), p.Lease, asked)
	}
	return nil
}

// A router that grants a pinhole less than the lease (a PCP max_lifetime
// below it) fails every open for the lease. The first lease, shorter, is
// granted: a dual-stack Service's status must not then list its IPv6
// ingress after one pass and drop it after the next (each time a patch,
// and a Warning that IPv6 is not served), for as long as it is served.
func TestDualStackStatusSteadyWhenTheRouterGrantsOnlyTheFirstLease(t *testing.T) {
	e, f := newDualEnv(t, Config{}, fake.RouterConfig{}, anyHostPinhole)
	lb := firstLeaseProcess(t, e, grantingAtMost{anyHostPinholes{f}, 30 * time.Minute})
	e.lb = lb
	nodes := dualNodes()
	svc := dualService("web")
	r := startBackground(t, e, nodes[0], nodes[1], nodes[2], svc)
	var got []string
	for range 6 {
		r.tick(t)
		got = append(got, fmt.Sprint(pinholeRows(recordedPinholes(r.service(t, svc.Namespace, svc.Name)))))
	}
	for i := 1; i < len(got); i++ {
		if got[i] != got[i-1] {
			t.Errorf("pinholes the status records after each of six passes: %q, want the same after each", got)
			break
		}
	}
}
