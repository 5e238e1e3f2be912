package pinholeconformance

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/pinhole"
)

// Router is one fresh router as a case sees it: two LAN hosts talking to it.
type Router struct {
	// A and B are clients acting from two different LAN hosts, each sending
	// from its global address.
	A, B pinhole.Client
	// AddrA and AddrB are those global addresses.
	AddrA, AddrB netip.Addr
	// Reboot simulates a router reboot (every pinhole lost). Nil when the
	// backend cannot reboot; the cases that need it are skipped.
	Reboot func(t testing.TB)
	// Step advances the clock the router's leases run on. Nil when the
	// router runs on real time: the lease cases then wait for the router.
	Step func(d time.Duration)
	// Reaches reports whether a host on the internet connects to host A at
	// [AddrA]:port over TCP; the backend listens on PortA and PortB. Nil
	// when the backend has no data path; the cases then check the router's
	// answers only.
	Reaches func(t testing.TB, port uint16) bool
}

// Backend is a router implementation under test.
type Backend struct {
	// Start returns a fresh router with no pinholes. The suite calls it
	// once per case, from the case's own t; Start registers its cleanup
	// with t.Cleanup and fails (or skips) t if it cannot start.
	Start func(t *testing.T) Router
}

// Ports the cases use: at least 1024, which miniupnpd requires.
const (
	PortA = 40001
	PortB = 40002
)

// CallTimeout bounds each client call the suite makes; the router answers
// in milliseconds, the bound only stops a hung backend.
const CallTimeout = 10 * time.Second

// expiryTimeout bounds the wait for a real router to remove a pinhole whose
// lease ended: it checks when it wakes, within a second or two.
const expiryTimeout = 30 * time.Second

// Run runs every case of the suite against b, each as a subtest with its
// own router.
func Run(t *testing.T, b Backend) {
	t.Helper()
	if b.Start == nil {
		t.Fatal("pinholeconformance: Backend.Start is nil")
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := b.Start(t)
			if tc.reboot && r.Reboot == nil {
				t.Skip("backend cannot reboot the router")
			}
			tc.run(t, r)
		})
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(t.Context(), CallTimeout)
	t.Cleanup(cancel)
	return c
}

func tcp(a netip.Addr, port uint16, lease time.Duration) pinhole.Pinhole {
	return pinhole.Pinhole{InternalClient: a, InternalPort: port, Protocol: igd.TCP, Lease: lease}
}

func add(t *testing.T, c pinhole.Client, p pinhole.Pinhole) uint16 {
	t.Helper()
	id, err := c.Add(ctx(t), p)
	if err != nil {
		t.Fatalf("Add(%v): %v", p, err)
	}
	return id
}

// held reports whether the client's router holds pinhole id; any answer but
// "held" or ErrNoSuchPinhole fails the test.
func held(t *testing.T, c pinhole.Client, id uint16) bool {
	t.Helper()
	_, err := c.Packets(ctx(t), id)
	switch {
	case err == nil:
		return true
	case errors.Is(err, pinhole.ErrNoSuchPinhole):
		return false
	}
	t.Fatalf("Packets(%d): %v", id, err)
	return false
}

// reaches checks the data path when the backend has one.
func reaches(t *testing.T, r Router, port uint16, want bool, when string) {
	t.Helper()
	if r.Reaches == nil {
		return
	}
	if got := r.Reaches(t, port); got != want {
		t.Errorf("%s: internet reaches [%s]:%d = %v, want %v", when, r.AddrA, port, got, want)
	}
}

// waitLease lets d of lease time pass: Step on a controlled clock; on real
// time, it waits until pinhole gone is gone and then one more second, the
// daemon's whole-second clock.
func waitLease(t *testing.T, r Router, d time.Duration, gone uint16) {
	t.Helper()
	if r.Step != nil {
		r.Step(d)
		return
	}
	deadline := time.Now().Add(expiryTimeout)
	for held(t, r.A, gone) {
		if time.Now().After(deadline) {
			t.Fatalf("pinhole %d still held %v after its %v lease", gone, expiryTimeout, d)
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(1500 * time.Millisecond)
}

type testCase struct {
	name   string
	reboot bool
	run    func(t *testing.T, r Router)
}

var cases = []testCase{
	{name: "a pinhole opens the way in until it is deleted", run: func(t *testing.T, r Router) {
		reaches(t, r, PortA, false, "before any pinhole")
		id := add(t, r.A, tcp(r.AddrA, PortA, time.Hour))
		reaches(t, r, PortA, true, "with the pinhole")
		reaches(t, r, PortB, false, "another port")
		if !held(t, r.A, id) {
			t.Fatalf("pinhole %d not held after Add", id)
		}
		if err := r.A.Delete(ctx(t), id); err != nil {
			t.Fatalf("Delete(%d): %v", id, err)
		}
		reaches(t, r, PortA, false, "after Delete")
		if held(t, r.A, id) {
			t.Errorf("pinhole %d held after Delete", id)
		}
	}},
	{name: "re-adding a pinhole returns its ID; IDs are not reused", run: func(t *testing.T, r Router) {
		id := add(t, r.A, tcp(r.AddrA, PortA, time.Hour))
		if again := add(t, r.A, tcp(r.AddrA, PortA, 2*time.Hour)); again != id {
			t.Errorf("re-add: ID %d, want %d", again, id)
		}
		udp := add(t, r.A, pinhole.Pinhole{InternalClient: r.AddrA, InternalPort: PortA, Protocol: igd.UDP, Lease: time.Hour})
		if udp == id {
			t.Errorf("the same port over UDP got the TCP pinhole's ID %d", id)
		}
		if err := r.A.Delete(ctx(t), id); err != nil {
			t.Fatal(err)
		}
		if readded := add(t, r.A, tcp(r.AddrA, PortA, time.Hour)); readded == id || readded == udp {
			t.Errorf("re-add after Delete: ID %d, want a new one (not %d or %d)", readded, id, udp)
		}
	}},
	{name: "a pinhole to another host is refused (606)", run: func(t *testing.T, r Router) {
		_, err := r.A.Add(ctx(t), tcp(r.AddrB, PortA, time.Hour))
		if !errors.Is(err, igd.ErrNotAuthorized) {
			t.Errorf("Add to another host: %v, want igd.ErrNotAuthorized", err)
		}
	}},
	{name: "a port below 1024 is refused (606)", run: func(t *testing.T, r Router) {
		for _, port := range []uint16{443, 1023} {
			_, err := r.A.Add(ctx(t), tcp(r.AddrA, port, time.Hour))
			if !errors.Is(err, igd.ErrNotAuthorized) {
				t.Errorf("Add port %d: %v, want igd.ErrNotAuthorized", port, err)
			}
		}
		add(t, r.A, tcp(r.AddrA, 1024, time.Hour))
	}},
	{name: "deleting a gone or unknown ID succeeds", run: func(t *testing.T, r Router) {
		id := add(t, r.A, tcp(r.AddrA, PortA, time.Hour))
		for i, del := range []uint16{id, id, id + 100} {
			if err := r.A.Delete(ctx(t), del); err != nil {
				t.Errorf("Delete #%d of %d: %v", i+1, del, err)
			}
		}
	}},
	{name: "another host can neither read, renew nor delete a pinhole (606)", run: func(t *testing.T, r Router) {
		id := add(t, r.A, tcp(r.AddrA, PortA, time.Hour))
		if _, err := r.B.Packets(ctx(t), id); !errors.Is(err, igd.ErrNotAuthorized) {
			t.Errorf("B Packets: %v, want igd.ErrNotAuthorized", err)
		}
		if err := r.B.Update(ctx(t), id, time.Hour); !errors.Is(err, igd.ErrNotAuthorized) {
			t.Errorf("B Update: %v, want igd.ErrNotAuthorized", err)
		}
		if err := r.B.Delete(ctx(t), id); !errors.Is(err, igd.ErrNotAuthorized) {
			t.Errorf("B Delete: %v, want igd.ErrNotAuthorized", err)
		}
		if !held(t, r.A, id) {
			t.Errorf("A's pinhole %d gone after B's calls", id)
		}
		reaches(t, r, PortA, true, "after B's calls")
	}},
	{name: "a lease ends unless renewed; renewing a gone pinhole is ErrNoSuchPinhole", run: func(t *testing.T, r Router) {
		renewed := add(t, r.A, tcp(r.AddrA, PortA, 2*time.Second))
		left := add(t, r.A, tcp(r.AddrA, PortB, 2*time.Second))
		if err := r.A.Update(ctx(t), renewed, time.Hour); err != nil {
			t.Fatalf("Update(%d): %v", renewed, err)
		}
		waitLease(t, r, 2*time.Second, left)
		if held(t, r.A, left) {
			t.Errorf("pinhole %d held after its lease", left)
		}
		if !held(t, r.A, renewed) {
			t.Errorf("renewed pinhole %d gone after its first lease", renewed)
		}
		reaches(t, r, PortA, true, "renewed")
		reaches(t, r, PortB, false, "expired")
		if err := r.A.Update(ctx(t), left, time.Hour); !errors.Is(err, pinhole.ErrNoSuchPinhole) {
			t.Errorf("Update of an expired pinhole: %v, want pinhole.ErrNoSuchPinhole", err)
		}
	}},
	{name: "a reboot loses every pinhole and numbers them from 1 again", reboot: true, run: func(t *testing.T, r Router) {
		old := add(t, r.A, tcp(r.AddrA, PortA, time.Hour))
		r.Reboot(t)
		reaches(t, r, PortA, false, "after a reboot")
		if held(t, r.A, old) {
			t.Fatalf("pinhole %d held after a reboot", old)
		}
		if other := add(t, r.A, tcp(r.AddrA, PortB, time.Hour)); other != old {
			t.Errorf("first pinhole after a reboot: ID %d, want %d again", other, old)
		}
		add(t, r.A, tcp(r.AddrA, PortA, time.Hour))
		reaches(t, r, PortA, true, "re-added after a reboot")
	}},
}
