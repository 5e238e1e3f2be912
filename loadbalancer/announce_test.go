package loadbalancer

import (
	"context"
	"fmt"
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

// An announcement within the quiet time after the last announced restart,
// that the router does not confirm (the mapping this process wrote and
// reads again is still there: anyone on the LAN can send one), is repaired
// when the quiet time ends, not dropped: with a probe interval as long as
// the renewal interval (the edge provider's protocol "pcp") nothing else
// would find a restart before the renewal.
func TestUnconfirmedAnnouncementWithinTheQuietTimeIsRepairedAfterIt(t *testing.T) {
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

	e.clock.Step(minRestartCheckInterval)
	passes = e.lb.passes.Load()
	a.restarts <- struct{}{} // forged, within the quiet time: deferred
	a.restarts <- struct{}{} // taken once the one before is done
	if n := e.lb.passes.Load() - passes; n != 0 {
		t.Errorf("%d passes within the quiet time, want 0", n)
	}
	e.clock.Step(maxAnnouncedQuiet)
	eventually(t, "the deferred repair pass", func() bool { return e.lb.passes.Load() > passes })
	diffRows(t, "table after the deferred repair", e.table(), before)
	r.stop(t)
}

// A router that restarts twice within the quiet time (a power blip, a crash
// loop) is repaired at once both times: an announcement within the quiet
// time is checked against the router itself (one mapping this process
// wrote, read again; blind, asked after through PCP), and one the router
// confirms is not rate-limited. Forged ones after it still wait.
func TestRestartsAnnouncedWithinTheQuietTimeAreRepairedAtOnceWhenTheRouterConfirmsThem(t *testing.T) {
	for _, mode := range []string{"upnp", "pcp", "blind"} {
		t.Run(mode, func(t *testing.T) {
			a := &announcer{restarts: make(chan struct{})}
			cfg := Config{Lease: time.Hour, RenewInterval: 5 * time.Minute, ProbeInterval: ProbeAtRenewal, Announcer: a}
			var e *env
			switch mode {
			case "upnp":
				e = newEnv(t, cfg, fake.RouterConfig{})
			case "pcp":
				e, _ = pcpEnv(t, cfg)
			default:
				e, _ = blindEnv(t, cfg)
			}
			nodes := threeNodes()
			svc := lbService("default", "web", withPorts(port("a", v1.ProtocolTCP, 80, 30080)))
			e.mustEnsure(t, svc, nodes)
			before := e.table()
			r := startBackground(t, e, nodes[0], nodes[1], nodes[2], svc)
			eventually(t, "the announcement listener", func() bool { return a.listening.Load() == 1 })
			for i := range 3 {
				e.router.Reboot()
				passes := e.lb.passes.Load()
				a.restarts <- struct{}{}
				eventually(t, fmt.Sprintf("the repair pass of restart %d", i+1), func() bool { return e.lb.passes.Load() > passes })
				diffRows(t, fmt.Sprintf("table after restart %d", i+1), e.table(), before)
				e.clock.Step(10 * time.Second) // the next within the quiet time
			}
			passes := e.lb.passes.Load()
			for range 3 {
				a.restarts <- struct{}{} // forged: the router lost nothing
			}
			if n := e.lb.passes.Load() - passes; n != 0 {
				t.Errorf("%d passes from forged announcements within the quiet time, want 0", n)
			}
			r.stop(t)
		})
	}
}

// epochAnnouncer is an announcer that answers EpochLost as told.
type epochAnnouncer struct {
	announcer
	lost  atomic.Bool
	asked atomic.Int32
}

func (a *epochAnnouncer) EpochLost(context.Context) (bool, error) {
	a.asked.Add(1)
	return a.lost.Load(), nil
}

// With no mapping of its own to read again, an announcement within the
// quiet time is checked by asking the router's epoch: a restart it shows is
// repaired at once, else the repair waits for the quiet time to end.
func TestAnnouncementWithinTheQuietTimeIsCheckedByTheEpochWhenNothingIsMapped(t *testing.T) {
	a := &epochAnnouncer{announcer: announcer{restarts: make(chan struct{})}}
	e := newEnv(t, Config{Lease: time.Hour, RenewInterval: 5 * time.Minute, ProbeInterval: ProbeAtRenewal, Announcer: a}, fake.RouterConfig{})
	r := startBackground(t, e, threeNodes()[0])
	eventually(t, "the announcement listener", func() bool { return a.listening.Load() == 1 })
	passes := e.lb.passes.Load()
	a.restarts <- struct{}{}
	eventually(t, "the first repair pass", func() bool { return e.lb.passes.Load() > passes })
	e.clock.Step(10 * time.Second)
	a.lost.Store(true)
	passes = e.lb.passes.Load()
	a.restarts <- struct{}{}
	eventually(t, "the repair of the restart the epoch shows", func() bool { return e.lb.passes.Load() > passes })
	a.lost.Store(false)
	passes = e.lb.passes.Load()
	e.clock.Step(minRestartCheckInterval)
	a.restarts <- struct{}{} // forged
	a.restarts <- struct{}{} // within a second of the check before: not checked
	a.restarts <- struct{}{} // taken once the one before is done
	if n := e.lb.passes.Load() - passes; n != 0 {
		t.Errorf("%d passes from announcements the epoch does not confirm, want 0", n)
	}
	if n := a.asked.Load(); n != 2 {
		t.Errorf("epoch asked %d times, want 2 (once per announcement within the quiet time, at most once a second)", n)
	}
	r.stop(t)
}
