package loadbalancer

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ccmkit/ccmkit/igd"
)

// serviceState is what this process knows of one Service: which keys to
// read and reserve, and what it wrote. Never proof of ownership.
type serviceState struct {
	name string           // "namespace/name"
	gate chan struct{}    // closed when the operation in flight ends
	held map[igd.Key]held // the keys the Service holds or is taking
	// deleted (EnsureLoadBalancerDeleted) keeps passes off until an Ensure.
	deleted    bool
	deletedUID types.UID
	deletedAt  time.Time
	warned     netip.Addr // the external IP last warned about
	// failed holds the ports of the last Ensure or pass that could not be
	// forwarded, with why; told, the PortStatus error value each was last
	// warned about with (a subset: warnings need the background work).
	failed map[igd.Key]*PortError
	told   map[igd.Key]string
	// swept records, on a blind client, when the Service's mappings at a
	// key to a nodePort were swept off the other nodes (a refused add):
	// what a sweep finds was written before it, so one a lease is enough.
	swept map[igd.Key]sweep
	// pinholes holds the IPv6 pinholes this process opened for the Service
	// (or is opening, or failed to close); familyWarned, the reason each IP
	// family was last warned as not served with.
	pinholes     map[pinholeKey]heldPinhole
	familyWarned map[v1.IPFamily]string
	// closed holds the pinholes this process closed for the Service since
	// it last held them, with when: its status may go on recording them (a
	// failing sync writes none), and a failing Service's retries close each
	// at most once per renewal interval.
	closed map[pinholeKey]time.Time
	// familyDown says the last operation served one family of the Service
	// and not the other: retried in the background as failed ports are.
	familyDown bool
}

// sweep is a sweep of a key's mappings to nodePort, made at at.
type sweep struct {
	nodePort uint16
	at       time.Time
}

// held is what this process last wrote at a key (zero: it only found the
// Service's mapping there), when that lease ends at the latest, counted from
// when the add was sent (zero: never or unknown), whether the router
// confirmed the write (an add whose reply was lost may or may not be there),
// whether the key, taken, is still to be confirmed by a list of the
// Services (the one after the add failed, or named another Service and the
// mapping could not be removed), and the node address where a read of this
// process last found the Service's mapping (zero: none).
type held struct {
	written     igd.Mapping
	expires     time.Time // when written is due for renewal (expireAll: at once)
	granted     time.Time // when the lease the router granted written ends (zero: none)
	unconfirmed bool
	contested   bool
	found       netip.Addr
}

// hold records that s holds k, keeping what was written there.
func (s *serviceState) hold(k igd.Key) {
	if _, ok := s.held[k]; !ok {
		s.held[k] = held{}
	}
}

// holdFound is hold, and records that a read found the Service's mapping at
// k at node address at (zero: not at a node's).
func (s *serviceState) holdFound(k igd.Key, at netip.Addr) {
	s.hold(k)
	if at.IsValid() {
		h := s.held[k]
		h.found = at
		s.held[k] = h
	}
}

// stateLocked returns the state of o, creating it. The caller holds lb.mu.
func (lb *LoadBalancer) stateLocked(o owner) *serviceState {
	s := lb.services[o.token]
	if s == nil {
		s = &serviceState{name: o.key(), held: make(map[igd.Key]held)}
		lb.services[o.token] = s
	}
	return s
}

// turn is an operation's exclusive turn on one Service: functions that take
// a *turn run inside it, and only one turn per Service is open at a time.
type turn struct {
	owner   owner
	release func() // ends the turn; call once
}

// acquire waits until no other operation on o is in flight and opens a turn
// on it. No lock is held while waiting.
func (lb *LoadBalancer) acquire(ctx context.Context, o owner) (*turn, error) {
	for {
		lb.mu.Lock()
		t, busy := lb.openTurnLocked(o)
		lb.mu.Unlock()
		if t != nil {
			return t, nil
		}
		select {
		case <-busy:
		case <-ctx.Done():
			return nil, fmt.Errorf("loadbalancer: service %s: waiting for another operation: %w", o.key(), ctx.Err())
		}
	}
}

// tryAcquire is acquire for background passes: it gives up (nil) at once
// when o is busy, or when EnsureLoadBalancerDeleted removed svc's mappings
// since (the deleted mark keeps passes off until an Ensure).
func (lb *LoadBalancer) tryAcquire(o owner, svc *v1.Service) *turn {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	if s := lb.stateLocked(o); s.deleted && s.deletedUID == svc.UID {
		return nil
	}
	t, _ := lb.openTurnLocked(o)
	return t
}

// openTurnLocked opens a turn on o, or, when one is open, returns the channel
// closed when it ends. The caller holds lb.mu.
func (lb *LoadBalancer) openTurnLocked(o owner) (t *turn, busy <-chan struct{}) {
	s := lb.stateLocked(o)
	if s.gate != nil {
		return nil, s.gate
	}
	ch := make(chan struct{})
	s.gate = ch
	return &turn{owner: o, release: func() {
		lb.mu.Lock()
		defer lb.mu.Unlock()
		s.gate = nil // s stays in lb.services while its gate is set
		close(ch)
		maps.DeleteFunc(s.swept, func(_ igd.Key, w sweep) bool { return lb.cfg.Clock.Since(w.at) >= lb.cfg.effectiveLease() })
		if len(s.held) == 0 && !s.deleted && !s.warned.IsValid() && len(s.failed) == 0 && len(s.swept) == 0 &&
			len(s.pinholes) == 0 && len(s.closed) == 0 && len(s.familyWarned) == 0 && !s.familyDown {
			delete(lb.services, o.token) // nothing worth keeping
		}
	}}, nil
}

// update runs f on o's state under lb.mu.
func (lb *LoadBalancer) update(o owner, f func(s *serviceState)) {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	lb.updateLocked(o, f)
}

// updateLocked runs f on o's state, keeping the held-keys metric in step
// with what f holds. lb.mu must be held.
func (lb *LoadBalancer) updateLocked(o owner, f func(s *serviceState)) {
	s := lb.stateLocked(o)
	n := len(s.held)
	f(s)
	heldKeys.Add(int64(len(s.held) - n))
}

// heldAt returns what o holds at k, without creating o's state.
func (lb *LoadBalancer) heldAt(o owner, k igd.Key) held {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	if s := lb.services[o.token]; s != nil {
		return s.held[k]
	}
	return held{}
}

// writtenKeys returns the keys at which o holds a mapping this process
// wrote, without creating o's state.
func (lb *LoadBalancer) writtenKeys(o owner) map[igd.Key]bool {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	out := make(map[igd.Key]bool)
	if s := lb.services[o.token]; s != nil {
		for k, h := range s.held {
			if h.written.InternalClient.IsValid() {
				out[k] = true
			}
		}
	}
	return out
}

// deletedTTL bounds how long a deleted Service is remembered: far longer
// than a pass works from its list of Services.
const deletedTTL = time.Hour

// pruneDeleted drops deleted Services remembered for longer than deletedTTL.
func (lb *LoadBalancer) pruneDeleted() {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	now := lb.cfg.Clock.Now()
	maps.DeleteFunc(lb.services, func(_ string, s *serviceState) bool {
		return s.deleted && s.gate == nil && len(s.held) == 0 && now.Sub(s.deletedAt) > deletedTTL
	})
}

// forgetGone drops the state of Services that are not in svcs (the pass's
// list) and, read live, not in the API server either: deleted with their
// finalizer removed by hand, so no EnsureLoadBalancerDeleted came. Their held
// keys would otherwise reserve ports and be probed forever; their mappings
// run out with their leases. A deleted mark that holds nothing more stays
// (pruneDeleted drops it): a stale UpdateLoadBalancer of the Service, from a
// list taken before its delete, is checked against it (goneSinceDelete).
func (lb *LoadBalancer) forgetGone(ctx context.Context, svcs []*v1.Service) {
	client := lb.bg.apiClient()
	if client == nil {
		return
	}
	listed := make(map[string]bool, len(svcs))
	for _, s := range svcs {
		listed[s.Namespace+"/"+s.Name] = true
	}
	lb.mu.Lock()
	var names []string
	for _, s := range lb.services {
		if s.gate == nil && !listed[s.name] && !(s.deleted && len(s.held) == 0 && len(s.pinholes) == 0) {
			names = append(names, s.name)
		}
	}
	cluster := lb.cluster
	lb.mu.Unlock()
	for _, name := range names {
		ns, n, _ := strings.Cut(name, "/")
		if _, err := client.CoreV1().Services(ns).Get(ctx, n, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			continue
		}
		o := newOwner(cluster, ns, n)
		lb.mu.Lock()
		if s := lb.services[o.token]; s != nil && s.gate == nil {
			heldKeys.Add(-int64(len(s.held)))
			delete(lb.services, o.token)
		}
		lb.mu.Unlock()
	}
}

// keysHeldBy returns the keys o holds or is taking in this process, in no
// particular order.
func (lb *LoadBalancer) keysHeldBy(o owner) []igd.Key {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	s := lb.services[o.token]
	if s == nil {
		return nil
	}
	keys := make([]igd.Key, 0, len(s.held))
	for k := range s.held {
		keys = append(keys, k)
	}
	return keys
}

// reserve makes o the holder of k in this process before the router call,
// unless another Service of this process holds or is taking k, or the
// Services hold Config.MaxMappings keys already, recorded ones (see
// recordedKeys) counted.
func (lb *LoadBalancer) reserve(o owner, k igd.Key, recorded []igd.Key) error {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	for token, s := range lb.services {
		if _, ok := s.held[k]; ok && token != o.token {
			return &PortError{Service: o.key(), Key: k, Claimant: s.name, Err: ErrPortInUse}
		}
	}
	if err := lb.capReachedLocked(o, k, recorded); err != nil {
		return err
	}
	lb.updateLocked(o, func(s *serviceState) { s.hold(k) })
	return nil
}

// protocols maps the Service port protocols a router can map.
var protocols = map[v1.Protocol]igd.Protocol{"": igd.TCP, v1.ProtocolTCP: igd.TCP, v1.ProtocolUDP: igd.UDP}

// heldPinhole is a pinhole a Service holds in this process.
type heldPinhole struct {
	renewAt time.Time // when it is due for renewal (zero: at once)
	// first: last opened for the first lease (firstPinholeLease), so due
	// as soon as its status records it, to be opened for the lease.
	first bool
}

// holdPinhole records that s holds k as h.
func (s *serviceState) holdPinhole(k pinholeKey, h heldPinhole) {
	if s.pinholes == nil {
		s.pinholes = make(map[pinholeKey]heldPinhole)
	}
	s.pinholes[k] = h
	delete(s.closed, k)
}

// closePinhole records that s closed k at now.
func (s *serviceState) closePinhole(k pinholeKey, now time.Time) {
	delete(s.pinholes, k)
	if s.closed == nil {
		s.closed = make(map[pinholeKey]time.Time)
	}
	s.closed[k] = now
}

// familyDown reports whether o's last operation served one of its families
// and not the other (retried in the background as failed ports are).
func (lb *LoadBalancer) familyDown(o owner) bool {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	s := lb.services[o.token]
	return s != nil && s.familyDown
}
