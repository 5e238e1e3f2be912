package fake_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
)

func tcp(port uint16, client netip.Addr) igd.Mapping {
	return igd.Mapping{Protocol: igd.TCP, ExternalPort: port, InternalClient: client, InternalPort: 30080, Description: "test", Lease: time.Hour}
}

func TestFailNthFailsOnlyTheNthCall(t *testing.T) {
	r, _ := newRouter(igdconformanceConfig(false))
	boom := errors.New("boom")
	r.FailNth(fake.MethodAddPortMapping, 3, boom)
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
	r.PrependHook(fake.MethodGetPortMapping, func(context.Context, *fake.Call) (bool, error) {
		order = append(order, "first added")
		return false, nil
	})
	r.PrependHook(fake.MethodGetPortMapping, func(_ context.Context, call *fake.Call) (bool, error) {
		order = append(order, "last added")
		return false, nil
	})
	_, err := r.Client(hostA).GetPortMapping(t.Context(), igd.TCP, 40000)
	if !errors.Is(err, igd.ErrNoSuchEntry) {
		t.Errorf("GetPortMapping after pass-through hooks: %v, want ErrNoSuchEntry from the table", err)
	}
	if fmt.Sprint(order) != "[last added first added]" {
		t.Errorf("hook order %v, want [last added first added]", order)
	}
}

func TestHookAnswersInsteadOfTheTable(t *testing.T) {
	r, _ := newRouter(igdconformanceConfig(false))
	want := tcp(40000, hostB)
	r.PrependHook(fake.MethodGetPortMapping, func(_ context.Context, call *fake.Call) (bool, error) {
		call.Mapping = want
		return true, nil
	})
	r.PrependHook(fake.MethodExternalIP, func(_ context.Context, call *fake.Call) (bool, error) {
		call.Addr = netip.MustParseAddr("203.0.113.9")
		return true, nil
	})
	r.PrependHook(fake.MethodListPortMappings, func(_ context.Context, call *fake.Call) (bool, error) {
		// The table is listed one protocol at a time.
		if call.Key.Protocol == want.Protocol {
			call.Mappings = []igd.Mapping{want}
		}
		return true, nil
	})
	c := r.Client(hostA)
	got, err := c.GetPortMapping(t.Context(), igd.TCP, 40000)
	if err != nil || got != want {
		t.Errorf("GetPortMapping = %v, %v; want %v from the hook", got, err, want)
	}
	ip, err := c.ExternalIP(t.Context())
	if err != nil || ip.String() != "203.0.113.9" {
		t.Errorf("ExternalIP = %v, %v; want 203.0.113.9 from the hook", ip, err)
	}
	list, err := igd.ReadTable(t.Context(), c)
	if err != nil || len(list) != 1 || list[0] != want {
		t.Errorf("ListPortMappings = %v, %v; want [%v]", list, err, want)
	}
}

func TestAddHookMayRewriteTheMapping(t *testing.T) {
	r, _ := newRouter(igdconformanceConfig(false))
	r.PrependHook(fake.MethodAddPortMapping, func(_ context.Context, call *fake.Call) (bool, error) {
		call.Mapping.Description = "rewritten"
		return false, nil
	})
	if _, err := r.Client(hostA).AddPortMapping(t.Context(), tcp(40000, hostA)); err != nil {
		t.Fatal(err)
	}
	if got := r.Mappings()[0].Description; got != "rewritten" {
		t.Errorf("stored description %q, want the hook's %q", got, "rewritten")
	}
}

func TestDelayHonoursContext(t *testing.T) {
	r, _ := newRouter(igdconformanceConfig(false))
	r.Delay(fake.MethodAddPortMapping, time.Hour)
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

func TestBlockHookHoldsCallUntilReleased(t *testing.T) {
	r, _ := newRouter(igdconformanceConfig(false))
	release := make(chan struct{})
	r.PrependHook(fake.MethodAddPortMapping, fake.BlockHook(release))
	done := make(chan error, 1)
	go func() {
		_, err := r.Client(hostA).AddPortMapping(t.Context(), tcp(40000, hostA))
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("blocked call returned early: %v", err)
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
	r.PrependHook(fake.MethodAddPortMapping, func(context.Context, *fake.Call) (bool, error) {
		hookRan = true
		return false, nil
	})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := r.Client(hostA).AddPortMapping(ctx, tcp(40000, hostA))
	if !errors.Is(err, context.Canceled) {
		t.Errorf("AddPortMapping with a cancelled context: %v, want context.Canceled", err)
	}
	if hookRan || len(r.Mappings()) != 0 {
		t.Errorf("cancelled call ran a hook (%v) or stored (%v)", hookRan, r.Mappings())
	}
}

func TestCallLogRecordsAndReturnsCopies(t *testing.T) {
	r, _ := newRouter(igdconformanceConfig(false))
	c := r.Client(hostB)
	m := tcp(40000, hostB)
	if _, err := c.AddPortMapping(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	if _, err := igd.ReadTable(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	_, getErr := c.GetPortMapping(t.Context(), igd.UDP, 1)
	bad := m
	bad.Protocol = "SCTP"
	_, badErr := c.AddPortMapping(t.Context(), bad)

	calls := r.Calls()
	// ReadTable lists one protocol at a time: two list calls.
	if len(calls) != 5 {
		t.Fatalf("Calls() has %d entries, want 5: %v", len(calls), calls)
	}
	wantMethods := []string{fake.MethodAddPortMapping, fake.MethodListPortMappings, fake.MethodListPortMappings, fake.MethodGetPortMapping, fake.MethodAddPortMapping}
	for i, c := range calls {
		if c.Method != wantMethods[i] || c.Client != hostB {
			t.Errorf("call %d = %s from %s, want %s from %s", i, c.Method, c.Client, wantMethods[i], hostB)
		}
	}
	if calls[0].Mapping != m || calls[0].Key != m.Key() || calls[0].Err != nil {
		t.Errorf("call 0 = %+v, want the added mapping, no error", calls[0])
	}
	if len(calls[1].Mappings) != 1 || calls[1].Key.Protocol != igd.TCP || calls[1].Ports != igd.AllPorts {
		t.Errorf("TCP list call recorded %v over %s %v, want the one mapping over TCP %v", calls[1].Mappings, calls[1].Key.Protocol, calls[1].Ports, igd.AllPorts)
	}
	if len(calls[2].Mappings) != 0 || calls[2].Key.Protocol != igd.UDP {
		t.Errorf("UDP list call recorded %v over %s, want none over UDP", calls[2].Mappings, calls[2].Key.Protocol)
	}
	if !errors.Is(calls[3].Err, igd.ErrNoSuchEntry) || calls[3].Err.Error() != getErr.Error() {
		t.Errorf("get call recorded error %v, want the returned %v", calls[3].Err, getErr)
	}
	if !errors.Is(calls[4].Err, igd.ErrInvalidMapping) || badErr == nil {
		t.Errorf("invalid add recorded error %v, want ErrInvalidMapping", calls[4].Err)
	}

	// Mutating the returned log changes nothing inside the router.
	calls[1].Mappings[0].Description = "mutated"
	calls[0].Method = "mutated"
	again := r.Calls()
	if again[1].Mappings[0].Description == "mutated" || again[0].Method == "mutated" {
		t.Error("Calls() returned memory shared with the router")
	}
	r.ResetCalls()
	if n := len(r.Calls()); n != 0 {
		t.Errorf("after ResetCalls the log holds %d calls", n)
	}
}

func TestMappingsIsASortedCopyWithTimeLeft(t *testing.T) {
	r, clk := newRouter(igdconformanceConfig(false))
	r.Put(igd.Mapping{Protocol: igd.UDP, ExternalPort: 5, InternalClient: hostB, InternalPort: 5, Description: "foreign, permanent"})
	r.Put(tcp(9, hostA))
	r.Put(tcp(7, hostA))
	clk.Step(10 * time.Minute)
	got := r.Mappings()
	var keys []string
	for _, m := range got {
		keys = append(keys, m.Key().String())
	}
	if fmt.Sprint(keys) != "[TCP/7 TCP/9 UDP/5]" {
		t.Errorf("Mappings keys %v, want [TCP/7 TCP/9 UDP/5]", keys)
	}
	if got[0].Lease != 50*time.Minute || got[2].Lease != 0 {
		t.Errorf("leases %s and %s, want 50m0s left and 0 (never expires)", got[0].Lease, got[2].Lease)
	}
	got[0].Description = "mutated"
	if r.Mappings()[0].Description == "mutated" {
		t.Error("Mappings() returned memory shared with the router")
	}
	// A Put mapping with lease 0 never expires, even past MaxLease.
	clk.Step(2 * igd.MaxLease)
	if got := r.Mappings(); len(got) != 1 || got[0].ExternalPort != 5 {
		t.Errorf("after 14 days the table is %v, want only the permanent UDP/5", got)
	}
}

func TestPutForeignMappingConflicts(t *testing.T) {
	r, _ := newRouter(igdconformanceConfig(false))
	r.Put(tcp(40000, hostB))
	_, err := r.Client(hostA).AddPortMapping(t.Context(), tcp(40000, hostA))
	if !errors.Is(err, igd.ErrConflict) || igd.Code(err) != igd.CodeConflict {
		t.Errorf("adding over a seeded foreign mapping: %v, want ErrConflict (718)", err)
	}
	var ue *igd.UPnPError
	if !errors.As(err, &ue) || ue.Description != "ConflictInMappingEntry" {
		t.Errorf("error %v is not a *igd.UPnPError with miniupnpd's text", err)
	}
}

func TestSetExternalIP(t *testing.T) {
	r, _ := newRouter(igdconformanceConfig(false))
	c := r.Client(hostA)
	for _, tc := range []struct{ set, want string }{
		{"10.1.2.3", "10.1.2.3"},
		{"100.64.0.1", "100.64.0.1"},
		{"", fake.DefaultExternalIP.String()},
	} {
		var a netip.Addr
		if tc.set != "" {
			a = netip.MustParseAddr(tc.set)
		}
		r.SetExternalIP(a)
		got, err := c.ExternalIP(t.Context())
		if err != nil || got.String() != tc.want {
			t.Errorf("after SetExternalIP(%q): ExternalIP = %v, %v; want %s", tc.set, got, err, tc.want)
		}
	}
}

func TestRebootKeepsHooksAndLog(t *testing.T) {
	r, _ := newRouter(igdconformanceConfig(false))
	c := r.Client(hostA)
	r.Fail(fake.MethodDeletePortMapping, igd.ErrNotAuthorized)
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

func TestNthHookCountsOnlyItsCalls(t *testing.T) {
	r, _ := newRouter(igdconformanceConfig(false))
	r.PrependHook(fake.MethodGetPortMapping, fake.NthHook(2, fake.ErrorHook(igd.ErrNoGateway)))
	c := r.Client(hostA)
	// Calls of other methods do not count.
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
	r.FailNth(fake.MethodAddPortMapping, 5, igd.ErrConflict)
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
