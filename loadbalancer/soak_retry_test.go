package loadbalancer

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cloudprovider "k8s.io/cloud-provider"
)

// Both controllers of the soak (upstream's service controller and
// provider/lbclass) retry a Service whose sync failed k times in a row after
// soakRetryMin·2^(k−1), at most soakRetryMax, and forget the count when a
// sync succeeds. A Service whose last sync failed is served again only then:
// a quiet point waits for that retry before it counts against the Service.
const (
	soakRetryMin = 5 * time.Second
	soakRetryMax = 300 * time.Second
)

// soakRetries records, per Service, the load balancer calls of the
// controllers' syncs that failed in a row: Ensure and EnsureDeleted, and
// GetLoadBalancer, which upstream's controller asks before a clean-up (its
// failure fails the sync; its success is followed by the call that decides).
type soakRetries struct {
	mu sync.Mutex
	m  map[string]soakRetry // by namespace/name
}

type soakRetry struct {
	failed int       // calls failed in a row
	last   time.Time // when the last one failed
}

// failed records a call that failed the sync, whatever its error.
func (r *soakRetries) failed(svc *v1.Service) {
	key := svc.Namespace + "/" + svc.Name
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string]soakRetry{}
	}
	r.m[key] = soakRetry{failed: r.m[key].failed + 1, last: time.Now()}
}

// record records the call that ended a sync: err nil (or ImplementedElsewhere)
// forgets the failures.
func (r *soakRetries) record(svc *v1.Service, err error) {
	if err != nil && !errors.Is(err, cloudprovider.ImplementedElsewhere) {
		r.failed(svc)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.m, svc.Namespace+"/"+svc.Name)
}

// due returns when the controller retries the Service named key, if its
// last sync failed: at most that late.
func (r *soakRetries) due(key string) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.m[key]
	if !ok {
		return time.Time{}, false
	}
	d := soakRetryMax
	if e.failed < 8 {
		d = min(soakRetryMax, soakRetryMin<<(e.failed-1))
	}
	return e.last.Add(d), true
}

// latestDue returns the latest retry due of the Services the problems
// name (found as "namespace/name" followed by no further name character).
func (r *soakRetries) latestDue(problems []string) time.Time {
	r.mu.Lock()
	keys := make([]string, 0, len(r.m))
	for k := range r.m {
		keys = append(keys, k)
	}
	r.mu.Unlock()
	var latest time.Time
	for _, k := range keys {
		if !mentions(problems, k) {
			continue
		}
		if d, ok := r.due(k); ok && d.After(latest) {
			latest = d
		}
	}
	return latest
}

// mentions reports whether any of texts names key as a whole word.
func mentions(texts []string, key string) bool {
	for _, t := range texts {
		for rest := t; ; {
			i := strings.Index(rest, key)
			if i < 0 {
				break
			}
			rest = rest[i+len(key):]
			if rest == "" || !strings.ContainsAny(rest[:1], "abcdefghijklmnopqrstuvwxyz0123456789-.") {
				return true
			}
		}
	}
	return false
}

// soakLB is a process's LoadBalancer with its syncs' failures recorded.
type soakLB struct {
	*LoadBalancer
	retries *soakRetries
}

func (l soakLB) GetLoadBalancer(ctx context.Context, cluster string, svc *v1.Service) (*v1.LoadBalancerStatus, bool, error) {
	st, exists, err := l.LoadBalancer.GetLoadBalancer(ctx, cluster, svc)
	if err != nil {
		l.retries.failed(svc)
	}
	return st, exists, err
}

func (l soakLB) EnsureLoadBalancer(ctx context.Context, cluster string, svc *v1.Service, nodes []*v1.Node) (*v1.LoadBalancerStatus, error) {
	st, err := l.LoadBalancer.EnsureLoadBalancer(ctx, cluster, svc, nodes)
	l.retries.record(svc, err)
	return st, err
}

func (l soakLB) EnsureLoadBalancerDeleted(ctx context.Context, cluster string, svc *v1.Service) error {
	err := l.LoadBalancer.EnsureLoadBalancerDeleted(ctx, cluster, svc)
	l.retries.record(svc, err)
	return err
}

func TestSoakRetriesAreDueAsTheControllersBackOff(t *testing.T) {
	var r soakRetries
	svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns-a", Name: "svc-9"}}
	fail := errors.New("reply lost")
	for range 3 {
		r.record(svc, fail)
	}
	due, ok := r.due("ns-a/svc-9")
	if !ok {
		t.Fatal("no retry due after three failures in a row")
	}
	if want, off := time.Now().Add(20*time.Second), time.Second; due.Before(want.Add(-off)) || due.After(want.Add(off)) {
		t.Errorf("the third failure in a row waits 5 s·2²: due in %v, want 20s ± %v", time.Until(due).Round(time.Millisecond), off)
	}

	if got := r.latestDue([]string{"Service ns-a/svc-9 is still being deleted"}); !got.Equal(due) {
		t.Errorf("latestDue of a problem naming ns-a/svc-9 = %v, want its due %v", got, due)
	}
	if got := r.latestDue([]string{"Service ns-a/svc-90 is still being deleted"}); !got.IsZero() {
		t.Errorf("latestDue of a problem naming ns-a/svc-90 = %v, want zero: svc-90 is another Service", got)
	}

	r.record(svc, nil)
	if _, ok := r.due("ns-a/svc-9"); ok {
		t.Error("a retry is due after a sync that succeeded, want none: a sync that succeeds forgets the failures")
	}
	r.failed(svc) // a GetLoadBalancer before a clean-up
	if _, ok := r.due("ns-a/svc-9"); !ok {
		t.Error("no retry due after a failed GetLoadBalancer, want one: it fails the sync")
	}
	r.record(svc, cloudprovider.ImplementedElsewhere)
	if _, ok := r.due("ns-a/svc-9"); ok {
		t.Error("a retry is due after ImplementedElsewhere, want none: it ends a sync as a success")
	}
}
