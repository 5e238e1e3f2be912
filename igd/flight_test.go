package igd

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// waitWaiters waits until the discovery in flight has n callers waiting on
// it (they are then committed to sharing it).
func waitWaiters(t *testing.T, c *UPnPClient, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c.mu.Lock()
		got := 0
		if c.flight != nil {
			got = c.flight.waiters
		}
		c.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d callers waiting on a discovery, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// clientGoroutines counts the live goroutines a UPnPClient started: the
// discovery itself, the SSDP reader and the probes. No other test in this
// package runs in parallel with the one that calls it.
func clientGoroutines() int {
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	n := 0
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, "created by github.com/ccmkit/ccmkit/igd.(*UPnPClient)") {
			n++
		}
	}
	return n
}

func TestConcurrentCallersShareOneDiscovery(t *testing.T) {
	n := &ssdpNet{t: t} // nothing answers: each discovery lasts DiscoveryTimeout
	c, err := NewClient(Config{ListenPacket: n.ListenPacket, DiscoveryTimeout: 300 * time.Millisecond, Host: fakeHost{}})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if _, err := c.ExternalIP(testCtx(t)); !errors.Is(err, ErrNoGateway) {
				t.Errorf("ExternalIP() = %v, want ErrNoGateway", err)
			}
		})
	}
	wg.Wait()
	n.mu.Lock()
	searches := len(n.conns)
	n.mu.Unlock()
	if searches != 1 {
		t.Errorf("8 concurrent calls ran %d discoveries, want 1 shared", searches)
	}
	assertReadersDone(t, n)
}

func TestOneWaiterGivingUpDoesNotCancelTheOthers(t *testing.T) {
	// The router answers the search late, so that both callers are waiting
	// on the discovery when the first gives up.
	d := newSSDPDevice(t, igd2Device, "127.0.0.2", 300*time.Millisecond)
	n := &ssdpNet{t: t, devices: []*ssdpDevice{d}}
	c := newSSDPClient(t, n, d.addr())

	ctxA, cancelA := context.WithCancel(testCtx(t))
	defer cancelA()
	errA := make(chan error, 1)
	go func() {
		_, err := c.ExternalIP(ctxA)
		errA <- err
	}()
	waitWaiters(t, c, 1) // A started the discovery
	errB := make(chan error, 1)
	go func() {
		_, err := c.ExternalIP(testCtx(t))
		errB <- err
	}()
	waitWaiters(t, c, 2)
	cancelA()
	if err := <-errA; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled caller's ExternalIP() = %v, want context.Canceled", err)
	}
	if err := <-errB; err != nil {
		t.Fatalf("other caller's ExternalIP() = %v, want the shared discovery's router", err)
	}
	n.mu.Lock()
	searches := len(n.conns)
	n.mu.Unlock()
	if searches != 1 || d.DescFetches() != 1 {
		t.Errorf("ran %d discoveries and %d description fetches, want 1 and 1", searches, d.DescFetches())
	}
}

func TestDiscoveryStopsWhenEveryWaiterGivesUp(t *testing.T) {
	n := &ssdpNet{t: t} // nothing answers
	c, err := NewClient(Config{ListenPacket: n.ListenPacket, DiscoveryTimeout: time.Hour, Host: fakeHost{}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testCtx(t))
	errs := make(chan error, 3)
	for range 3 {
		go func() {
			_, err := c.ExternalIP(ctx)
			errs <- err
		}()
	}
	waitWaiters(t, c, 3)
	cancel()
	for range 3 {
		if err := <-errs; !errors.Is(err, context.Canceled) {
			t.Errorf("ExternalIP() = %v, want context.Canceled", err)
		}
	}
	// The discovery's goroutines all exit, long before DiscoveryTimeout.
	deadline := time.Now().Add(30 * time.Second)
	for clientGoroutines() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines of the client still running after every caller gave up", clientGoroutines())
		}
		time.Sleep(time.Millisecond)
	}
	assertReadersDone(t, n)

	// Giving up says nothing about the router: no back-off, the next call
	// discovers again.
	short, cancelShort := context.WithTimeout(testCtx(t), 50*time.Millisecond)
	defer cancelShort()
	if _, err := c.ExternalIP(short); !errors.Is(err, ErrNoGateway) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("ExternalIP() after an abandoned discovery = %v, want ErrNoGateway and the caller's deadline", err)
	}
	n.mu.Lock()
	searches := len(n.conns)
	n.mu.Unlock()
	if searches != 2 {
		t.Errorf("discoveries = %d, want 2 (the abandoned one did not start a back-off)", searches)
	}
}

func TestFailedDiscoveryBackoff(t *testing.T) {
	down := func(t *testing.T, backoff time.Duration) (*testIGD, *UPnPClient) {
		t.Helper()
		g := newTestIGD(t, igd2Device, "")
		g.SetDescDown(true)
		c := newTestClient(t, g, func(cfg *Config) {
			cfg.DiscoveryBackoff = backoff
			cfg.CallTimeout = 200 * time.Millisecond
		})
		if _, err := c.ExternalIP(testCtx(t)); !errors.Is(err, ErrNoGateway) || g.DescFetches() != 1 {
			t.Fatalf("ExternalIP() with the router down = %v after %d fetches, want ErrNoGateway after 1", err, g.DescFetches())
		}
		return g, c
	}

	t.Run("calls reuse the failure", func(t *testing.T) {
		g, c := down(t, time.Hour)
		g.SetDescDown(false)
		_, err := c.ExternalIP(testCtx(t))
		var nge *noGatewayError
		if !errors.As(err, &nge) || !strings.Contains(err.Error(), "not discovering again for") {
			t.Errorf("ExternalIP() during the back-off = %v, want the earlier noGatewayError saying so", err)
		}
		if n := g.DescFetches(); n != 1 {
			t.Errorf("description fetches = %d, want 1 (no discovery during the back-off)", n)
		}
	})
	t.Run("Discover ignores it", func(t *testing.T) {
		g, c := down(t, time.Hour)
		g.SetDescDown(false)
		if _, err := c.Discover(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		if _, err := c.ExternalIP(testCtx(t)); err != nil {
			t.Errorf("ExternalIP() after Discover = %v", err)
		}
	})
	t.Run("it expires", func(t *testing.T) {
		g, c := down(t, time.Hour)
		g.SetDescDown(false)
		c.mu.Lock()
		c.failedAt = c.failedAt.Add(-time.Hour)
		c.mu.Unlock()
		if _, err := c.ExternalIP(testCtx(t)); err != nil {
			t.Errorf("ExternalIP() after the back-off = %v", err)
		}
		if n := g.DescFetches(); n != 2 {
			t.Errorf("description fetches = %d, want 2", n)
		}
	})
	t.Run("negative turns it off", func(t *testing.T) {
		g, c := down(t, -1)
		if _, err := c.ExternalIP(testCtx(t)); !errors.Is(err, ErrNoGateway) {
			t.Errorf("ExternalIP() = %v, want ErrNoGateway", err)
		}
		if n := g.DescFetches(); n != 2 {
			t.Errorf("description fetches = %d, want 2 (one per call)", n)
		}
	})
	t.Run("a failed Discover with a router cached does not delay rediscovery", func(t *testing.T) {
		g := newTestIGD(t, igd2Device, "")
		c := newTestClient(t, g, func(cfg *Config) {
			cfg.DiscoveryBackoff = time.Hour
			cfg.CallTimeout = 200 * time.Millisecond
		})
		ctx := testCtx(t)
		if _, err := c.Discover(ctx); err != nil {
			t.Fatal(err)
		}
		g.SetDescDown(true)
		if _, err := c.Discover(ctx); !errors.Is(err, ErrNoGateway) {
			t.Fatalf("Discover() with the description down = %v, want ErrNoGateway", err)
		}
		g.SetDescDown(false)
		// The router stops answering: the client forgets it ...
		block := make(chan struct{})
		g.SetBlock(block)
		if _, err := c.ExternalIP(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("ExternalIP() = %v, want a timeout", err)
		}
		g.SetBlock(nil)
		close(block)
		// ... and the next call finds it again at once.
		if _, err := c.ExternalIP(ctx); err != nil {
			t.Errorf("ExternalIP() after the router came back = %v", err)
		}
		if n := g.DescFetches(); n != 3 {
			t.Errorf("description fetches = %d, want 3", n)
		}
	})
}
