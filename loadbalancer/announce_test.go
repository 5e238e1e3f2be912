package loadbalancer

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/ccmkit/ccmkit/fake"
)

// announcer is an Announcer whose restarts a test sends.
type announcer struct {
	restarts  chan struct{}
	listening atomic.Int32
}

func (a *announcer) Restarts() <-chan struct{} { return a.restarts }

func (a *announcer) ListenAnnounce(ctx context.Context) error {
	a.listening.Add(1)
	defer a.listening.Add(-1)
	<-ctx.Done()
	return nil
}

// A router that announces its restart is repaired at once: a pass starts
// on the announcement, not at the next probe or renewal, and the listener
// stops with the background work.
func TestAnnouncedRestartIsRepairedAtOnce(t *testing.T) {
	// Unbuffered: a send returns once the background work took it, after
	// it finished with the one before.
	a := &announcer{restarts: make(chan struct{})}
	e := newEnv(t, Config{Lease: time.Hour, RenewInterval: 5 * time.Minute, Announcer: a}, fake.RouterConfig{})
	nodes := threeNodes()
	svc := lbService("default", "web", withPorts(port("a", v1.ProtocolTCP, 80, 30080)))
	e.mustEnsure(t, svc, nodes)
	before := e.table()
	r := startBackground(t, e, nodes[0], nodes[1], nodes[2], svc)
	eventually(t, "the announcement listener", func() bool { return a.listening.Load() == 1 })
	e.router.Reboot()
	passes, probes := e.lb.passes.Load(), e.lb.probes.Load()
	a.restarts <- struct{}{}
	eventually(t, "the repair pass", func() bool { return e.lb.passes.Load() > passes })
	diffRows(t, "table after the announced restart", e.table(), before)
	if n := e.lb.probes.Load(); n != probes {
		t.Errorf("%d probes ran; the clock never moved, so the announcement alone must repair", n-probes)
	}
	// Announcements come over UDP, from anyone on the LAN who claims the
	// router's address: a flood of them repairs once per probe interval.
	passes = e.lb.passes.Load()
	for range 3 {
		a.restarts <- struct{}{}
	}
	e.clock.Step(e.lb.cfg.ProbeInterval / 2) // no probe is due yet
	a.restarts <- struct{}{}                 // still within the quiet time
	a.restarts <- struct{}{}                 // taken once the one before is done
	if n := e.lb.passes.Load() - passes; n != 0 {
		t.Errorf("%d passes from announcements within one probe interval of the last, want 0", n)
	}
	r.stop(t)
	if a.listening.Load() != 0 {
		t.Error("the listener outlived the background work")
	}
}

// A restart announced within the quiet time after the last announced one is
// repaired when the quiet time ends, not dropped: with a probe interval as
// long as the renewal interval (the edge provider's protocol "pcp") nothing
// else would find it before the renewal.
func TestAnnouncementWithinTheQuietTimeIsRepairedAfterIt(t *testing.T) {
	a := &announcer{restarts: make(chan struct{})}
	e := newEnv(t, Config{Lease: time.Hour, RenewInterval: 5 * time.Minute, ProbeInterval: 5 * time.Minute, Announcer: a}, fake.RouterConfig{})
	nodes := threeNodes()
	svc := lbService("default", "web", withPorts(port("a", v1.ProtocolTCP, 80, 30080)))
	e.mustEnsure(t, svc, nodes)
	before := e.table()
	r := startBackground(t, e, nodes[0], nodes[1], nodes[2], svc)
	eventually(t, "the announcement listener", func() bool { return a.listening.Load() == 1 })
	e.router.Reboot()
	passes := e.lb.passes.Load()
	a.restarts <- struct{}{}
	eventually(t, "the first repair pass", func() bool { return e.lb.passes.Load() > passes })
	diffRows(t, "table after the first announced restart", e.table(), before)

	e.router.Reboot() // again, a second later
	e.clock.Step(time.Second)
	passes = e.lb.passes.Load()
	a.restarts <- struct{}{} // within the quiet time: deferred
	a.restarts <- struct{}{} // taken once the one before is done
	if n := e.lb.passes.Load() - passes; n != 0 {
		t.Errorf("%d passes within the quiet time, want 0", n)
	}
	e.clock.Step(maxAnnouncedQuiet)
	eventually(t, "the deferred repair pass", func() bool { return e.lb.passes.Load() > passes })
	diffRows(t, "table after the second announced restart", e.table(), before)
	r.stop(t)
}
