package igd_test

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/internal/upnp"
)

// These tests hold the listing crash guard (miniupnpd < 2.3.4 dies listing a
// range with more than upnp.SafeListWidth mappings of one protocol) to the
// mappings this client writes itself, on the fake IGD server with
// fake.RouterConfig.CrashOnLongList.

// crashingRouter starts a fake miniupnpd 2.3.1 that crashes on long listings,
// and a client of it.
func crashingRouter(t *testing.T) (*fake.Router, *igd.UPnPClient) {
	t.Helper()
	r := fake.NewRouter(fake.RouterConfig{CrashOnLongList: true})
	srv := fake.NewServer(r, fake.ServerOptions{})
	t.Cleanup(srv.Close)
	c, err := igd.NewClient(igd.Config{RootDescURL: srv.RootDescURL})
	if err != nil {
		t.Fatal(err)
	}
	return r, c
}

// readWhole reads the table and checks that the router survived and that the
// listing holds exactly what the router holds.
func readWhole(ctx context.Context, t *testing.T, r *fake.Router, c *igd.UPnPClient, what string) {
	t.Helper()
	got, err := igd.ReadTable(ctx, c)
	if r.Crashed() {
		t.Fatalf("%s crashed the router (%v)", what, err)
	}
	if err != nil {
		t.Fatalf("%s: ReadTable: %v", what, err)
	}
	want, _ := keysOf(r.Mappings())
	keys, dups := keysOf(got)
	if d := diffKeys(want, keys); d != "" || dups != nil {
		t.Errorf("%s: ReadTable keys (-want +got):%s\nlisted twice: %v", what, d, dups)
	}
}

// The client lists the empty table (so it knows the table's shape), then
// adds 140 one-port mappings itself and lists again: its own adds must count,
// or the second listing asks for all 140 in one range and kills the daemon.
// It is the load balancer's background pass after 140 one-port Services.
func TestListAfterOwnAddsDoesNotCrash(t *testing.T) {
	// lostReply makes the router store the add but the client never hear
	// back: the add fails, yet the mapping is there and must count.
	lostReply := fake.RouterHooks{AddPortMapping: func(ctx context.Context, _ netip.Addr, m igd.Mapping, next fake.AddFunc) (igd.Mapping, error) {
		if _, err := next(ctx, m); err != nil {
			return igd.Mapping{}, err
		}
		return igd.Mapping{}, &igd.UPnPError{Action: "AddPortMapping", Code: upnp.CodeActionFailed, Description: "reply lost"}
	}}
	tests := []struct {
		name    string
		hooks   *fake.RouterHooks
		protos  []igd.Protocol
		wantErr bool // the adds fail (their answer is lost)
	}{
		{"140 TCP", nil, []igd.Protocol{igd.TCP}, false},
		{"140 TCP and 140 UDP", nil, []igd.Protocol{igd.TCP, igd.UDP}, false},
		{"140 TCP whose answers were lost", &lostReply, []igd.Protocol{igd.TCP}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, c := crashingRouter(t)
			ctx := testContext(t)
			readWhole(ctx, t, r, c, "listing the empty table")
			if tt.hooks != nil {
				r.Intercept(*tt.hooks)
			}
			for _, proto := range tt.protos {
				for _, p := range ports(20000, 140, 1) {
					_, err := c.AddPortMapping(ctx, quirkMapping(proto, uint16(p)))
					if (err != nil) != tt.wantErr {
						t.Fatalf("AddPortMapping(%s/%d) = %v, want error: %v", proto, p, err, tt.wantErr)
					}
				}
			}
			r.ClearHooks()
			readWhole(ctx, t, r, c, "listing after 140 own adds")
			rng := igd.PortRange{First: 19000, Last: 21000}
			ms, err := c.ListPortMappings(ctx, igd.TCP, rng)
			if r.Crashed() || err != nil || len(ms) != 140 {
				t.Fatalf("ListPortMappings(TCP %v) = %d mappings, %v (crashed: %v); want 140", rng, len(ms), err, r.Crashed())
			}
		})
	}
}

// Deletes that fail leave the mappings in place: they must still count.
// Deletes that succeed lower the count: a table the client emptied again is
// listed in one call per protocol, with no walk.
func TestListAfterOwnDeletes(t *testing.T) {
	r, c := crashingRouter(t)
	ctx := testContext(t)
	readWhole(ctx, t, r, c, "listing the empty table")
	for _, p := range ports(20000, 140, 1) {
		if _, err := c.AddPortMapping(ctx, quirkMapping(igd.TCP, uint16(p))); err != nil {
			t.Fatal(err)
		}
	}
	readWhole(ctx, t, r, c, "listing after 140 own adds")

	// Deletes lost on the way: the router keeps every mapping.
	r.Intercept(fake.RouterHooks{DeletePortMapping: func(ctx context.Context, _ netip.Addr, k igd.Key, next fake.DeleteFunc) error {
		return &igd.UPnPError{Action: "DeletePortMapping", Code: upnp.CodeActionFailed, Description: "not deleted"}
	}})
	for _, p := range ports(20000, 140, 1) {
		if err := c.DeletePortMapping(ctx, igd.TCP, uint16(p)); err == nil {
			t.Fatalf("DeletePortMapping(TCP/%d) succeeded through a hook that refuses it", p)
		}
	}
	r.ClearHooks()
	readWhole(ctx, t, r, c, "listing after 140 failed deletes")

	for _, p := range ports(20000, 140, 1) {
		if err := c.DeletePortMapping(ctx, igd.TCP, uint16(p)); err != nil {
			t.Fatal(err)
		}
	}
	r.ResetCalls()
	readWhole(ctx, t, r, c, "listing after 140 deletes")
	if n, w := r.CallCount(fake.MethodListPortMappings), 2; n != w {
		t.Errorf("%d GetListOfPortMappings calls for an empty table, want %d (one per protocol)", n, w)
	}
	if n := r.CallCount(fake.MethodGetGenericPortMappingEntry); n != 0 {
		t.Errorf("%d GetGenericPortMappingEntry calls for an empty table whose shape is known, want none", n)
	}
}

// Workers of one process add mappings through one client while another lists
// the whole table (the load balancer's Ensures beside its background pass):
// each listing starts once 70 more adds have returned (more than the margin
// the guard leaves for mappings it has not seen) while further adds are on
// their way. No listing may crash the router, and each must list every
// mapping whose add had returned before it started.
func TestListDuringOwnAddsDoesNotCrash(t *testing.T) {
	r, c := crashingRouter(t)
	ctx := testContext(t)
	readWhole(ctx, t, r, c, "listing the empty table")
	const workers, each, batch = 4, 75, 70
	added := make(chan igd.Key, workers*each)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				// Adjacent ports, interleaved, downwards: each batch lands in
				// the lowest planned range, the one that holds the most.
				p := uint16(20000 + workers*each - 1 - (i*workers + w))
				if _, err := c.AddPortMapping(ctx, quirkMapping(igd.TCP, p)); err != nil {
					errs <- fmt.Errorf("AddPortMapping(TCP/%d): %w", p, err)
					return
				}
				added <- igd.Key{Protocol: igd.TCP, ExternalPort: p}
			}
		})
	}
	go func() { wg.Wait(); close(added) }()
	done := map[igd.Key]bool{}
	for open := true; open; {
		for n := 0; n < batch; n++ {
			k, ok := <-added
			if !ok {
				open = false
				break
			}
			done[k] = true
		}
		got, err := c.ListPortMappings(ctx, igd.TCP, igd.AllPorts)
		if r.Crashed() {
			t.Fatalf("a listing after %d adds, with more on their way, crashed the router (%v)", len(done), err)
		}
		if err != nil {
			t.Fatal(err)
		}
		have := map[igd.Key]bool{}
		for _, m := range got {
			have[m.Key()] = true
		}
		for k := range done {
			if !have[k] {
				t.Errorf("a listing after %d adds lacks %s, added before it started", len(done), k)
			}
		}
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	readWhole(ctx, t, r, c, "listing after the adds")
	if n := len(r.Mappings()); n != workers*each {
		t.Errorf("router holds %d mappings, want %d", n, workers*each)
	}
}
