package main

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// failingLock is a Lease lock held in memory that can be taken once and
// then fails every renewal, as when the API server stops answering.
type failingLock struct {
	mu     sync.Mutex
	record *resourcelock.LeaderElectionRecord
}

var _ resourcelock.Interface = (*failingLock)(nil)

var errLockUnreachable = errors.New("API server unreachable")

func (l *failingLock) Get(context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.record == nil {
		return nil, nil, apierrors.NewNotFound(coordinationv1.Resource("leases"), "edge-load-balancer")
	}
	r := *l.record
	raw, _ := json.Marshal(r)
	return &r, raw, nil
}

func (l *failingLock) Create(_ context.Context, r resourcelock.LeaderElectionRecord) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.record = &r
	return nil
}

func (l *failingLock) Update(context.Context, resourcelock.LeaderElectionRecord) error {
	return errLockUnreachable
}

func (l *failingLock) RecordEvent(string) {}
func (l *failingLock) Identity() string   { return "replica-a" }
func (l *failingLock) Describe() string   { return "failing-lock" }

// When a renewal fails the standalone mode stops serving before it returns:
// serve has returned (so the controller no longer acts on the router) and
// its error is read only after that (run with -race).
func TestLeaderStopsServingBeforeReturning(t *testing.T) {
	_, o := standaloneCmd()
	o.leaseDuration, o.renewDeadline, o.retryPeriod = 400*time.Millisecond, 200*time.Millisecond, 50*time.Millisecond

	errServe := errors.New("serve stopped")
	var mu sync.Mutex
	served, returned := false, false
	serve := func(ctx context.Context) error {
		mu.Lock()
		served = true
		mu.Unlock()
		<-ctx.Done()
		// Stopping takes a while: workers finish their router calls.
		time.Sleep(100 * time.Millisecond)
		mu.Lock()
		returned = true
		mu.Unlock()
		return errServe
	}

	err := o.lead(t.Context(), &failingLock{}, serve)

	mu.Lock()
	defer mu.Unlock()
	if !served {
		t.Fatal("serve never ran: the lock was not taken")
	}
	if !returned {
		t.Error("lead returned while serve was still running after leadership was lost")
	}
	if !errors.Is(err, errServe) {
		t.Errorf("lead = %v, want serve's error %v", err, errServe)
	}
}
