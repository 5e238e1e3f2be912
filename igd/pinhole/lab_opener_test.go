package pinhole_test

import (
	"testing"
	"time"

	"github.com/ccmkit/ccmkit/igd/igdtest"
	"github.com/ccmkit/ccmkit/igd/pinhole"
	"github.com/ccmkit/ccmkit/loadbalancer"
)

// The UPnPClient is the load balancer's PinholeClient and PinholeProber as it is.
var (
	_ loadbalancer.PinholeClient = (*pinhole.UPnPClient)(nil)
	_ loadbalancer.PinholeProber = (*pinhole.UPnPClient)(nil)
)

// closedWithin bounds how long a closed pinhole may still let the internet
// through: ClosePinhole deletes it, and miniupnpd removes its rule before it
// answers. Generous for a busy machine; the test logs how long it took.
const closedWithin = 10 * time.Second

// TestLabClosePinholeClosesWhatAnotherProcessOpened: a client that never
// saw the pinhole's UniqueID (a restarted or failed-over process on the same
// node) closes it by what it opens, and the internet loses it within
// seconds. Closing it again, once gone, is nil.
func TestLabClosePinholeClosesWhatAnotherProcessOpened(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{IPv6: true})
	ctx := testContext(t)
	first := labClient(t, lab, 0, false)
	addr := listen(t, lab.Nodes[0], port)
	p := tcpPinhole(addr.Addr(), port)
	if err := first.OpenPinhole(ctx, p); err != nil {
		t.Fatalf("%v; miniupnpd log:\n%s", err, lab.Log())
	}
	if !reaches(ctx, lab, addr) {
		t.Fatalf("not reachable through the opened pinhole: the internet cannot connect to %s", addr)
	}

	second := labClient(t, lab, 0, false)
	closed := time.Now()
	if err := second.ClosePinhole(ctx, p); err != nil {
		t.Fatal(err)
	}
	for reaches(ctx, lab, addr) {
		if time.Since(closed) > closedWithin {
			t.Fatalf("still reachable %s after ClosePinhole: the internet connects to %s", time.Since(closed).Round(time.Millisecond), addr)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("the internet lost %s %s after ClosePinhole", addr, time.Since(closed).Round(time.Millisecond))

	if err := second.ClosePinhole(ctx, p); err != nil {
		t.Errorf("ClosePinhole of a pinhole already gone: %v, want nil", err)
	}
}

// TestLabPinholeHeldUntilTheRouterLosesIt: PinholeHeld reports a pinhole
// OpenPinhole opened as held, and not held once a reboot wiped it.
func TestLabPinholeHeldUntilTheRouterLosesIt(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{IPv6: true})
	ctx := testContext(t)
	c := labClient(t, lab, 0, false)
	p := tcpPinhole(lab.Nodes[0].GUA, port)
	if _, err := c.PinholeHeld(ctx, p); err == nil {
		t.Errorf("PinholeHeld of a pinhole this client never opened: nil error, want one")
	}
	if err := c.OpenPinhole(ctx, p); err != nil {
		t.Fatal(err)
	}
	held, err := c.PinholeHeld(ctx, p)
	if err != nil || !held {
		t.Fatalf("PinholeHeld after OpenPinhole = %t, %v; want true, nil", held, err)
	}
	lab.Reboot(t)
	held, err = c.PinholeHeld(ctx, p)
	if err != nil || held {
		t.Fatalf("PinholeHeld after a reboot = %t, %v; want false, nil", held, err)
	}
}
