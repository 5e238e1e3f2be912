package fake_test

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/internal/upnp"
)

func tcp(port uint16, client netip.Addr) igd.Mapping {
	return igd.Mapping{Protocol: igd.TCP, ExternalPort: port, InternalClient: client, InternalPort: 30080, Description: "test", Lease: time.Hour}
}

func TestNthFailsOnlyTheNthCall(t *testing.T) {
	r, _ := newRouter(igdconformanceConfig(false))
	boom := errors.New("boom")
	third := fake.Nth(3)
	r.Intercept(fake.RouterHooks{AddPortMapping: func(ctx context.Context, _ netip.Addr, m igd.Mapping, next fake.AddFunc) (igd.Mapping, error) {
		if third() {
			return igd.Mapping{}, boom
		}
		return next(ctx, m)
	}})
	c := r.Client(hostA)
	for i := 1; i <= 5; i++ {
		_, err := c.AddPortMapping(t.Context(), tcp(uint16(40000+i), hostA))
		if got, want := err != nil, i == 3; got != want {
			t.Fatalf("call %d: err = %v, want failure %v", i, err, want)
		}
		if i == 3 && !errors.Is(err, boom) {
			t.Errorf("call 3: error %v does not wrap the injected error", err)
		}
	}
	if got := len(r.Mappings()); got != 4 {
		t.Errorf("table holds %d mappings, want 4 (the failed call must not store)", got)
	}
	if got := r.CallCount(fake.MethodAddPortMapping); got != 5 {
		t.Errorf("CallCount = %d, want 5", got)
	}
}

func TestHooksRunNewestFirstAndCanPassOn(t *testing.T) {
	r, _ := newRouter(igdconformanceConfig(false))
	var order []string
	logAs := func(name string) fake.RouterHooks {
		return fake.RouterHooks{GetPortMapping: func(ctx context.Context, _ netip.Addr, k igd.Key, next fake.GetFunc) (igd.Mapping, error) {
			order = append(order, name)
			return next(ctx, k)
		}}
	}
	r.Intercept(logAs("first added"))
	r.Intercept(fake.RouterHooks{}) // no fields: passes everything through
	r.Intercept(logAs("last added"))
	_, err := r.Client(hostA).GetPortMapping(t.Context(), igd.TCP, 40000)
	if !errors.Is(err, igd.ErrNoSuchEntry) {
		t.Errorf("GetPortMapping after pass-through hooks: %v, want ErrNoSuchEntry from the table", err)
	}
	if diff := cmp.Diff([]string{"last added", "first added"}, order); diff != "" {
		t.Errorf("hook order (-want +got):\n%s", diff)
	}
}

// answeringHooks answer GetPortMapping, ExternalIP and the listing with
// want and ip, instead of the table.
func answeringHooks(want igd.Mapping, ip netip.Addr) fake.RouterHooks {
	return fake.RouterHooks{
		GetPortMapping: func(context.Context, netip.Addr, igd.Key, fake.GetFunc) (igd.Mapping, error) {
			return want, nil
		},
		ExternalIP: func(context.Context, netip.Addr, fake.AddrFunc) (netip.Addr, error) { return ip, nil },
		ListPortMappings: func(_ context.Context, _ netip.Addr, proto igd.Protocol, _ igd.PortRange, _ fake.ListFunc) ([]igd.Mapping, error) {
			if proto != want.Protocol { // the table is listed one protocol at a time
				return nil, nil
			}
			return []igd.Mapping{want}, nil
		},
	}
}

// TestHookAnswersInsteadOfTheTable checks that one set of typed hooks
// steers a Client and a Server alike: the same answers come back whichever
// way the call travels.
func TestHookAnswersInsteadOfTheTable(t *testing.T) {
	want := tcp(40000, hostB)
	want.Enabled = true
	ip := netip.MustParseAddr("198.51.101.9")
	for _, path := range []string{"client", "server"} {
		t.Run(path, func(t *testing.T) {
			r, _ := newRouter(igdconformanceConfig(false))
			r.Intercept(answeringHooks(want, ip))
			var c igd.Client = r.Client(hostA)
			if path == "server" {
				c = serverClient(t, r, fake.WANIPConnection2, hostA)
			}
			got, err := c.GetPortMapping(t.Context(), igd.TCP, 40000)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got, cmpopts.EquateComparable(netip.Addr{})); diff != "" {
				t.Errorf("GetPortMapping (-want +got):\n%s", diff)
			}
			gotIP, err := c.ExternalIP(t.Context())
			if err != nil || gotIP != ip {
				t.Errorf("ExternalIP = %v, %v; want %v from the hook", gotIP, err, ip)
			}
			list, err := igd.ReadTable(t.Context(), c)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]igd.Mapping{want}, list, cmpopts.EquateComparable(netip.Addr{})); diff != "" {
				t.Errorf("ReadTable (-want +got):\n%s", diff)
			}
			if n := len(r.Mappings()); n != 0 {
				t.Errorf("the table holds %d mappings; hooks that answer must not reach it", n)
			}
		})
	}
}

func TestAddHookMayRewriteTheMapping(t *testing.T) {
	for _, path := range []string{"client", "server"} {
		t.Run(path, func(t *testing.T) {
			r, _ := newRouter(igdconformanceConfig(false))
			r.Intercept(fake.RouterHooks{AddPortMapping: func(ctx context.Context, _ netip.Addr, m igd.Mapping, next fake.AddFunc) (igd.Mapping, error) {
				m.Description = "rewritten"
				return next(ctx, m)
			}})
			var c igd.Client = r.Client(hostA)
			if path == "server" {
				c = serverClient(t, r, fake.WANIPConnection2, hostA)
			}
			if _, err := c.AddPortMapping(t.Context(), tcp(40000, hostA)); err != nil {
				t.Fatal(err)
			}
			if got := r.Mappings()[0].Description; got != "rewritten" {
				t.Errorf("stored description %q, want the hook's %q", got, "rewritten")
			}
		})
	}
}

func TestSleepHonoursContext(t *testing.T) {
	r, _ := newRouter(igdconformanceConfig(false))
	r.Intercept(fake.RouterHooks{AddPortMapping: func(ctx context.Context, _ netip.Addr, m igd.Mapping, next fake.AddFunc) (igd.Mapping, error) {
		if err := fake.Sleep(ctx, time.Hour); err != nil {
			return igd.Mapping{}, err
		}
		return next(ctx, m)
	}})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	_, err := r.Client(hostA).AddPortMapping(ctx, tcp(40000, hostA))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("AddPortMapping delayed past its deadline: %v, want context.DeadlineExceeded", err)
	}
	if len(r.Mappings()) != 0 {
		t.Errorf("a call that timed out stored a mapping: %v", r.Mappings())
	}
}

func TestHoldKeepsCallUntilReleased(t *testing.T) {
	r, _ := newRouter(igdconformanceConfig(false))
	release := make(chan struct{})
	r.Intercept(fake.RouterHooks{AddPortMapping: func(ctx context.Context, _ netip.Addr, m igd.Mapping, next fake.AddFunc) (igd.Mapping, error) {
		if err := fake.Hold(ctx, release); err != nil {
			return igd.Mapping{}, err
		}
		return next(ctx, m)
	}})
	done := make(chan error, 1)
	go func() {
		_, err := r.Client(hostA).AddPortMapping(t.Context(), tcp(40000, hostA))
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("held call returned early: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	if n := len(r.Mappings()); n != 0 {
		t.Fatalf("table holds %d mappings while the call is held", n)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("released call: %v", err)
	}
	if n := len(r.Mappings()); n != 1 {
		t.Errorf("table holds %d mappings after release, want 1", n)
	}
}

func TestCancelledContextReachesNothing(t *testing.T) {
	r, _ := newRouter(igdconformanceConfig(false))
	hookRan := false
	r.Intercept(fake.RouterHooks{AddPortMapping: func(ctx context.Context, _ netip.Addr, m igd.Mapping, next fake.AddFunc) (igd.Mapping, error) {
		hookRan = true
		return next(ctx, m)
	}})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := r.Client(hostA).AddPortMapping(ctx, tcp(40000, hostA))
	if !errors.Is(err, context.Canceled) {
		t.Errorf("AddPortMapping with a cancelled context: %v, want context.Canceled", err)
	}
	if hookRan {
		t.Error("a hook ran for a call whose context had ended")
	}
	if n := len(r.Mappings()); n != 0 {
		t.Errorf("a cancelled call stored %d mappings", n)
	}
}

func TestRebootKeepsHooksAndLog(t *testing.T) {
	r, _ := newRouter(igdconformanceConfig(false))
	c := r.Client(hostA)
	r.Intercept(fake.RouterHooks{DeletePortMapping: func(context.Context, netip.Addr, igd.Key, fake.DeleteFunc) error {
		return igd.ErrNotAuthorized
	}})
	if _, err := c.AddPortMapping(t.Context(), tcp(40000, hostA)); err != nil {
		t.Fatal(err)
	}
	r.Reboot()
	if n := len(r.Mappings()); n != 0 {
		t.Errorf("after Reboot the table holds %d mappings", n)
	}
	if n := r.CallCount(fake.MethodAddPortMapping); n != 1 {
		t.Errorf("after Reboot the log holds %d adds, want 1", n)
	}
	if err := c.DeletePortMapping(t.Context(), igd.TCP, 40000); !errors.Is(err, igd.ErrNotAuthorized) {
		t.Errorf("hook lost across Reboot: DeletePortMapping = %v", err)
	}
	r.ClearHooks()
	if err := c.DeletePortMapping(t.Context(), igd.TCP, 40000); err != nil {
		t.Errorf("after ClearHooks: DeletePortMapping = %v", err)
	}
}

func TestHookSeesOnlyItsOperation(t *testing.T) {
	r, _ := newRouter(igdconformanceConfig(false))
	second := fake.Nth(2)
	r.Intercept(fake.RouterHooks{GetPortMapping: func(ctx context.Context, _ netip.Addr, k igd.Key, next fake.GetFunc) (igd.Mapping, error) {
		if second() {
			return igd.Mapping{}, igd.ErrNoGateway
		}
		return next(ctx, k)
	}})
	c := r.Client(hostA)
	// Calls of other operations do not count.
	for range 3 {
		if _, err := igd.ReadTable(t.Context(), c); err != nil {
			t.Fatal(err)
		}
	}
	var errs []error
	for range 3 {
		_, err := c.GetPortMapping(t.Context(), igd.TCP, 1)
		errs = append(errs, err)
	}
	if errors.Is(errs[0], igd.ErrNoGateway) || !errors.Is(errs[1], igd.ErrNoGateway) || errors.Is(errs[2], igd.ErrNoGateway) {
		t.Errorf("errors %v, want only the second to be ErrNoGateway", errs)
	}
}

// TestConcurrentUse exercises every entry point at once; run with -race.
func TestConcurrentUse(t *testing.T) {
	r, clk := newRouter(igdconformanceConfig(false))
	fifth := fake.Nth(5)
	r.Intercept(fake.RouterHooks{AddPortMapping: func(ctx context.Context, _ netip.Addr, m igd.Mapping, next fake.AddFunc) (igd.Mapping, error) {
		if fifth() {
			return igd.Mapping{}, igd.ErrConflict
		}
		return next(ctx, m)
	}})
	var wg sync.WaitGroup
	for i := range 8 {
		host := netip.AddrFrom4([4]byte{192, 0, 2, byte(10 + i)})
		c := r.Client(host)
		wg.Go(func() {
			for j := range 20 {
				port := uint16(40000 + i*100 + j)
				_, _ = c.AddPortMapping(t.Context(), tcp(port, host))
				_, _ = c.GetPortMapping(t.Context(), igd.TCP, port)
				_, _ = igd.ReadTable(t.Context(), c)
				if j%3 == 0 {
					_ = c.DeletePortMapping(t.Context(), igd.TCP, port)
				}
			}
		})
	}
	wg.Go(func() {
		for range 20 {
			_ = r.Mappings()
			_ = r.Calls()
			_ = r.CallCount(fake.MethodAddPortMapping)
			clk.Step(time.Second)
			r.SetExternalIP(netip.Addr{})
		}
	})
	wg.Wait()
	// 8 hosts x 20 adds, one injected failure, every third deleted (7 per host).
	if got, want := len(r.Mappings()), 8*20-8*7-1; got != want && got != want+1 {
		t.Errorf("table holds %d mappings, want %d (or %d if the failed add was a deleted one)", got, want, want+1)
	}
}

// bothPaths runs f once with an in-memory Client and once with the real
// client over a Server, each on a fresh router built from cfg that test
// hooks are added to.
func bothPaths(t *testing.T, cfg fake.RouterConfig, f func(t *testing.T, r *fake.Router, c igd.Client)) {
	for _, path := range []string{"client", "server"} {
		t.Run(path, func(t *testing.T) {
			r := fake.NewRouter(cfg)
			var c igd.Client = r.Client(hostA)
			if path == "server" {
				c = serverClient(t, r, fake.WANIPConnection2, hostA)
			}
			f(t, r, c)
		})
	}
}

// An igd sentinel error from a hook reaches the caller as that sentinel
// whichever way the call travels (through a Server, as its UPnP code).
func TestHookErrorsAreAlikeOnBothPaths(t *testing.T) {
	for _, tt := range []struct {
		name  string
		hooks fake.RouterHooks
		call  func(context.Context, igd.Client) error
		want  error
	}{
		{
			name: "add conflict",
			hooks: fake.RouterHooks{AddPortMapping: func(context.Context, netip.Addr, igd.Mapping, fake.AddFunc) (igd.Mapping, error) {
				return igd.Mapping{}, igd.ErrConflict
			}},
			call: func(ctx context.Context, c igd.Client) error {
				_, err := c.AddPortMapping(ctx, tcp(40000, hostA))
				return err
			},
			want: igd.ErrConflict,
		},
		{
			name: "delete not authorized",
			hooks: fake.RouterHooks{DeletePortMapping: func(context.Context, netip.Addr, igd.Key, fake.DeleteFunc) error {
				return igd.ErrNotAuthorized
			}},
			call: func(ctx context.Context, c igd.Client) error { return c.DeletePortMapping(ctx, igd.TCP, 40000) },
			want: igd.ErrNotAuthorized,
		},
		{
			name: "list not supported",
			hooks: fake.RouterHooks{ListPortMappings: func(context.Context, netip.Addr, igd.Protocol, igd.PortRange, fake.ListFunc) ([]igd.Mapping, error) {
				return nil, igd.ErrNotSupported
			}},
			call: func(ctx context.Context, c igd.Client) error {
				_, err := c.(igd.Lister).ListPortMappings(ctx, igd.TCP, igd.AllPorts)
				return err
			},
			want: igd.ErrNotSupported,
		},
		{
			name:  "list refused with 402",
			hooks: refuseList(upnp.CodeInvalidArgs),
			call: func(ctx context.Context, c igd.Client) error {
				_, err := c.(igd.Lister).ListPortMappings(ctx, igd.TCP, igd.PortRange{First: 80, Last: 80})
				return err
			},
			want: igd.ErrNotSupported,
		},
		{
			name:  "list refused with 501",
			hooks: refuseList(upnp.CodeActionFailed),
			call: func(ctx context.Context, c igd.Client) error {
				_, err := c.(igd.Lister).ListPortMappings(ctx, igd.TCP, igd.PortRange{First: 80, Last: 80})
				return err
			},
			want: igd.ErrNotSupported,
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			bothPaths(t, fake.RouterConfig{}, func(t *testing.T, r *fake.Router, c igd.Client) {
				r.Intercept(tt.hooks)
				if err := tt.call(t.Context(), c); !errors.Is(err, tt.want) {
					t.Errorf("error %v, want one matching %v", err, tt.want)
				}
			})
		})
	}
}

// refuseList answers every list call with code, as routers that refuse
// GetListOfPortMappings' arguments do.
func refuseList(code int) fake.RouterHooks {
	return fake.RouterHooks{ListPortMappings: func(context.Context, netip.Addr, igd.Protocol, igd.PortRange, fake.ListFunc) ([]igd.Mapping, error) {
		return nil, &igd.UPnPError{Action: "GetListOfPortMappings", Code: code, Description: "refused"}
	}}
}

// The client's retry with a permanent lease after 725 is a second call on
// both paths: hooks see it and the log holds it.
func TestPermanentLeaseRetryIsASecondCall(t *testing.T) {
	bothPaths(t, fake.RouterConfig{OnlyPermanentLeases: true}, func(t *testing.T, r *fake.Router, c igd.Client) {
		var leases []time.Duration
		r.Intercept(fake.RouterHooks{AddPortMapping: func(ctx context.Context, _ netip.Addr, m igd.Mapping, next fake.AddFunc) (igd.Mapping, error) {
			leases = append(leases, m.Lease)
			return next(ctx, m)
		}})
		got, err := c.AddPortMapping(t.Context(), tcp(40000, hostA))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]time.Duration{time.Hour, 0}, leases); diff != "" {
			t.Errorf("leases the hook saw (-want +got):\n%s", diff)
		}
		if n := r.CallCount(fake.MethodAddPortMapping); n != 2 {
			t.Errorf("%d AddPortMapping calls logged, want 2", n)
		}
		if got.Lease != 0 {
			t.Errorf("lease returned %v, want 0 (permanent)", got.Lease)
		}
	})
}

// A client returns the mapping it was given, whatever a hook changed on the
// way to the table, as the real client does.
func TestAddReturnsTheMappingAsGiven(t *testing.T) {
	bothPaths(t, fake.RouterConfig{}, func(t *testing.T, r *fake.Router, c igd.Client) {
		r.Intercept(fake.RouterHooks{AddPortMapping: func(ctx context.Context, _ netip.Addr, m igd.Mapping, next fake.AddFunc) (igd.Mapping, error) {
			m.InternalPort, m.Lease = 9999, 5*time.Minute
			return next(ctx, m)
		}})
		want := tcp(40000, hostA)
		got, err := c.AddPortMapping(t.Context(), want)
		if err != nil {
			t.Fatal(err)
		}
		want.Enabled = true
		if diff := cmp.Diff(want, got, cmpopts.EquateComparable(netip.Addr{})); diff != "" {
			t.Errorf("AddPortMapping's result (-want +got):\n%s", diff)
		}
		if got := r.Mappings()[0].InternalPort; got != 9999 {
			t.Errorf("stored internal port %d, want 9999 (the hook's)", got)
		}
	})
}

// Invalid arguments are refused before any hook runs.
func TestInvalidListReachesNoHook(t *testing.T) {
	r := fake.NewRouter(fake.RouterConfig{})
	ran := false
	r.Intercept(fake.RouterHooks{ListPortMappings: func(context.Context, netip.Addr, igd.Protocol, igd.PortRange, fake.ListFunc) ([]igd.Mapping, error) {
		ran = true
		return nil, nil
	}})
	_, err := r.Client(hostA).ListPortMappings(t.Context(), "SCTP", igd.PortRange{First: 10, Last: 1})
	if !errors.Is(err, igd.ErrInvalidMapping) {
		t.Errorf("ListPortMappings(SCTP, 10-1) = %v, want an igd.ErrInvalidMapping", err)
	}
	if ran {
		t.Error("a hook ran for invalid arguments")
	}
}

// A call is logged under the same Method whichever way it comes, so that
// CallCount counts it alike: a GetPortMapping through a Client and a
// GetSpecificPortMappingEntry through a Server are both MethodGetPortMapping
// (the Server's log also names the SOAP action).
func TestCallCountIsAlikeOnBothPaths(t *testing.T) {
	bothPaths(t, fake.RouterConfig{}, func(t *testing.T, r *fake.Router, c igd.Client) {
		ctx := t.Context()
		if _, err := c.ExternalIP(ctx); err != nil { // the Server path discovers first
			t.Fatal(err)
		}
		r.ResetCalls()
		if _, err := c.AddPortMapping(ctx, tcp(40000, hostA)); err != nil {
			t.Fatal(err)
		}
		if _, err := c.GetPortMapping(ctx, igd.TCP, 40000); err != nil {
			t.Fatal(err)
		}
		if _, err := c.(igd.Lister).ListPortMappings(ctx, igd.TCP, igd.PortRange{First: 40000, Last: 40000}); err != nil {
			t.Fatal(err)
		}
		if err := c.DeletePortMapping(ctx, igd.TCP, 40000); err != nil {
			t.Fatal(err)
		}
		if _, err := c.ExternalIP(ctx); err != nil {
			t.Fatal(err)
		}
		for _, m := range []string{fake.MethodAddPortMapping, fake.MethodGetPortMapping, fake.MethodListPortMappings, fake.MethodDeletePortMapping, fake.MethodExternalIP} {
			if n := r.CallCount(m); n != 1 {
				t.Errorf("CallCount(%s) = %d, want 1; log: %+v", m, n, r.Calls())
			}
		}
	})
}
