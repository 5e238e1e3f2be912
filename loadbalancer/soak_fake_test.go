package loadbalancer

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/pcp"
)

// fakeWorld is the soak on fake.Router (and fake.PCPServer in the PCP
// modes), in memory. Every write of a CCM process through UPnP is checked,
// as it happens, against the mappings of other owners.
type fakeWorld struct {
	s      *soak
	router *fake.Router
	pcp    *fake.PCPServer // pcp and pcp-only

	lost, slow atomic.Int64
	slowFor    atomic.Int64 // nanoseconds
	checked    atomic.Int64
	// v6 is the IPv6 side (dual only, soak_dual_fake_test.go); planting
	// is set while other hosts open their pinholes, which no fault hits.
	v6       *fakePinholes6
	planting atomic.Bool

	// mu serialises the writes of other owners, reboots and wipes with the
	// CCM's UPnP writes, so a write can be judged on the table it met.
	mu      sync.Mutex
	foreign map[igd.Key]igd.Mapping // what other owners hold
}

var errReplyLost = errors.New("soak: the router's reply was lost")

// fakeNodeAddr is the address of node slot i on the fake.
func fakeNodeAddr(i int) netip.Addr { return netip.AddrFrom4([4]byte{192, 0, 2, byte(10 + i)}) }

func newFakeWorld(t *testing.T, s *soak) (*fakeWorld, error) {
	w := &fakeWorld{s: s, foreign: map[igd.Key]igd.Mapping{}}
	w.router = fake.NewRouter(fake.RouterConfig{SecureMode: s.mode == "secure", NoList: s.mode == "igd1"})
	if s.mode == "pcp" || s.mode == "pcp-only" {
		var err error
		// MinLifetime: the lease asked for is granted, as by the lab's
		// miniupnpd (min_lifetime = soakLease), so that what blind mode
		// leaves to its lease ends within the quiet point's wait.
		w.pcp, err = fake.NewPCPServer(fake.PCPConfig{Router: w.router, AllowThirdParty: true, MinLifetime: soakLease, OnAnswer: w.onPCPAnswer})
		if err != nil {
			return nil, err
		}
	}
	if s.dual {
		if err := w.startPinholes(); err != nil {
			w.close()
			return nil, err
		}
	}
	w.router.Intercept(fake.RouterHooks{
		SOAPAction: func(ctx context.Context, from netip.Addr, action string, next fake.ActionFunc) error {
			// Slow replies here; lost ones where the Server answers
			// (serveIPv6).
			if pinholes, _ := pinholeAction(action); pinholes && from == soakGUA(0, 1) && !w.planting.Load() {
				if err := w.delay(ctx); err != nil {
					return err
				}
			}
			return next(ctx)
		},
		AddPortMapping: func(ctx context.Context, from netip.Addr, m igd.Mapping, next fake.AddFunc) (igd.Mapping, error) {
			if !w.ccm(from) {
				return next(ctx, m)
			}
			if err := w.delay(ctx); err != nil {
				return igd.Mapping{}, err
			}
			got, err := w.judged(m.Key(), "add", func() error {
				var err error
				m, err = next(ctx, m)
				return err
			})
			if err == nil && w.lose() {
				return igd.Mapping{}, errReplyLost
			}
			return got, err
		},
		DeletePortMapping: func(ctx context.Context, from netip.Addr, k igd.Key, next fake.DeleteFunc) error {
			if !w.ccm(from) {
				return next(ctx, k)
			}
			if err := w.delay(ctx); err != nil {
				return err
			}
			_, err := w.judged(k, "delete", func() error { return next(ctx, k) })
			if err == nil && w.lose() {
				return errReplyLost
			}
			return err
		},
		GetPortMapping: func(ctx context.Context, from netip.Addr, k igd.Key, next fake.GetFunc) (igd.Mapping, error) {
			if w.ccm(from) {
				if err := w.delay(ctx); err != nil {
					return igd.Mapping{}, err
				}
			}
			return next(ctx, k)
		},
		ListPortMappings: func(ctx context.Context, from netip.Addr, proto igd.Protocol, ports igd.PortRange, next fake.ListFunc) ([]igd.Mapping, error) {
			if w.ccm(from) {
				if err := w.delay(ctx); err != nil {
					return nil, err
				}
			}
			return next(ctx, proto, ports)
		},
	})
	return w, nil
}

// judged runs a CCM write of key k under mu, and records a violation when
// it succeeded on a mapping of another owner.
func (w *fakeWorld) judged(k igd.Key, what string, write func() error) (igd.Mapping, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	before, theirs := w.foreign[k]
	err := write()
	w.checked.Add(1)
	if err == nil && theirs {
		w.s.violateNow("a CCM %s of %s succeeded on %s's mapping (to %s:%d %q)", what, k, before.InternalClient, before.InternalClient, before.InternalPort, before.Description)
	}
	return before, err
}

// ccm reports whether from is a CCM process's host.
func (w *fakeWorld) ccm(from netip.Addr) bool { return from == fakeNodeAddr(0) }

func (w *fakeWorld) delay(ctx context.Context) error {
	if w.slow.Load() <= 0 || w.slow.Add(-1) < 0 {
		return nil
	}
	return fake.Sleep(ctx, time.Duration(w.slowFor.Load()))
}

func (w *fakeWorld) lose() bool { return w.lost.Load() > 0 && w.lost.Add(-1) >= 0 }

// onPCPAnswer drops or delays the answers to MAP requests while those
// faults are armed (the mapping is made or deleted all the same).
func (w *fakeWorld) onPCPAnswer(call fake.PCPCall, answer []byte) []byte {
	if call.Version != 2 || w.planting.Load() {
		return answer
	}
	if w.slow.Load() > 0 && w.slow.Add(-1) >= 0 {
		time.Sleep(time.Duration(w.slowFor.Load()))
	}
	if w.lose() {
		return nil
	}
	return answer
}

func (w *fakeWorld) nodeAddr(i int) netip.Addr { return fakeNodeAddr(i) }
func (w *fakeWorld) maxNodes() int             { return soakMaxNode }

func (w *fakeWorld) ccmClient(t *testing.T) (igd.Client, Announcer) {
	upnp := w.router.Client(fakeNodeAddr(0))
	if w.pcp == nil {
		return upnp, nil
	}
	c, err := pcp.NewClient(pcp.Config{Server: w.pcp.Addr(), ListenPacket: w.pcp.ListenAnnounce})
	if err != nil {
		t.Fatal(err)
	}
	cfg := pcp.BackendConfig{UPnP: upnp, PCP: c, Secret: soakSecret}
	if w.s.mode == "pcp-only" {
		cfg.UPnP = nil
	}
	b, err := pcp.NewBackend(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b, c
}

func (w *fakeWorld) table(context.Context) ([]igd.Mapping, error) { return w.router.Mappings(), nil }

func (w *fakeWorld) externalIP() netip.Addr {
	a := w.router.ExternalIP()
	if a.IsUnspecified() {
		return netip.Addr{}
	}
	return a
}

// replaceForeignLocked puts the other owners' mappings back after the
// table was emptied: they map again as soon as the router answers.
func (w *fakeWorld) replaceForeignLocked() {
	for _, m := range w.foreign {
		w.router.Put(m)
	}
}

func (w *fakeWorld) reboot(ctx context.Context) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.pcp != nil {
		w.pcp.Reboot()
	} else {
		w.router.Reboot()
	}
	w.replaceForeignLocked()
	w.replantLocked(ctx)
}

func (w *fakeWorld) wipe(ctx context.Context) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.router.Reboot() // the table only: no announcement, the PCP epoch goes on
	w.replaceForeignLocked()
	w.replantLocked(ctx)
}

// replantLocked opens the other hosts' pinholes again after the router lost
// them (dual). The caller holds w.mu.
func (w *fakeWorld) replantLocked(ctx context.Context) {
	if w.v6 == nil || w.v6.planted == nil {
		return // not planted yet
	}
	if err := w.plantPinholesLocked(ctx); err != nil {
		w.s.violateNow("opening other hosts' pinholes again after a reboot: %v", err)
	}
}

func (w *fakeWorld) setWAN(_ context.Context, a netip.Addr) bool {
	if !a.IsValid() {
		a = netip.IPv4Unspecified()
	}
	if w.pcp != nil {
		w.pcp.ExternalAddressChanged(a)
		return true
	}
	w.router.SetExternalIP(a)
	return true
}

// fakeForeignHosts are the addresses of the hosts that are not nodes.
var fakeForeignHosts = map[string]netip.Addr{
	soakLAN:   netip.MustParseAddr("192.0.2.200"),
	soakOther: netip.MustParseAddr("192.0.2.210"),
}

func (w *fakeWorld) foreignAdd(ctx context.Context, who string, k igd.Key, desc string) error {
	m := igd.Mapping{Protocol: k.Protocol, ExternalPort: k.ExternalPort, InternalClient: fakeForeignHosts[who],
		InternalPort: k.ExternalPort, Description: desc, Enabled: true}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, err := w.router.Client(m.InternalClient).AddPortMapping(ctx, m); err != nil {
		return err
	}
	for _, got := range w.router.Mappings() {
		if got.Key() == m.Key() {
			got.Lease = 0
			w.foreign[m.Key()] = got
		}
	}
	return nil
}

func (w *fakeWorld) foreignDelete(ctx context.Context, who string, k igd.Key) error {
	host := fakeForeignHosts[who]
	w.mu.Lock()
	defer w.mu.Unlock()
	if m, ok := w.foreign[k]; !ok || m.InternalClient != host {
		return nil // its add was refused: nothing to give back
	}
	delete(w.foreign, k)
	return w.router.Client(host).DeletePortMapping(ctx, k.Protocol, k.ExternalPort)
}

func (w *fakeWorld) loseReplies(n int) { w.lost.Store(int64(n)) }

func (w *fakeWorld) slowReplies(n int, d time.Duration) {
	w.slowFor.Store(int64(d))
	w.slow.Store(int64(n))
}

// rogue: the fake world's CCM is handed its router, never discovers one.
func (w *fakeWorld) rogue(bool) string { return "" }

func (w *fakeWorld) calm() {
	w.lost.Store(0)
	w.slow.Store(0)
}

func (w *fakeWorld) crashed() bool { return w.router.Crashed() }

func (w *fakeWorld) writesChecked() int { return int(w.checked.Load()) }

// checkForeign records a violation for each mapping of another owner that
// is gone or changed.
func (w *fakeWorld) checkForeign() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.checkForeignPinholesLocked()
	if len(w.foreign) == 0 {
		return
	}
	now := map[igd.Key]igd.Mapping{}
	for _, m := range w.router.Mappings() {
		now[m.Key()] = m
	}
	for k, want := range w.foreign {
		w.checked.Add(1)
		got, ok := now[k]
		switch {
		case !ok:
			w.s.violateNow("%s's mapping at %s (to %s:%d %q) is gone", want.InternalClient, k, want.InternalClient, want.InternalPort, want.Description)
		case got.InternalClient != want.InternalClient || got.InternalPort != want.InternalPort || got.Description != want.Description:
			w.s.violateNow("%s's mapping at %s was rewritten: %s:%d %q, was %s:%d %q", want.InternalClient, k, got.InternalClient, got.InternalPort, got.Description, want.InternalClient, want.InternalPort, want.Description)
		default:
			continue
		}
		w.foreign[k] = got // report once
		if !ok {
			delete(w.foreign, k)
		}
	}
}

func (w *fakeWorld) close() {
	w.closePinholes()
	if w.pcp != nil {
		_ = w.pcp.Close()
	}
}
