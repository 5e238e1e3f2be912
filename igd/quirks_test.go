package igd_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/internal/upnp"
)

// These tests hold the client to the router quirks of the README's "Router
// compatibility" table, on the fake IGD server.

var quirkHost = netip.MustParseAddr("192.0.2.10")

// quirkMapping is mapping i of a test table.
func quirkMapping(proto igd.Protocol, port uint16) igd.Mapping {
	return igd.Mapping{Protocol: proto, ExternalPort: port, InternalClient: quirkHost, InternalPort: 30000 + port%1000,
		Description: fmt.Sprintf("q %s %d", proto, port), Enabled: true}
}

// seed puts the mappings of proto at ports into r.
func seed(r *fake.Router, proto igd.Protocol, ports ...int) {
	for _, p := range ports {
		r.Put(quirkMapping(proto, uint16(p)))
	}
}

// ports returns n ports from first, step apart.
func ports(first, n, step int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = first + i*step
	}
	return out
}

// keysOf returns the sorted keys of ms, and the keys listed more than once.
func keysOf(ms []igd.Mapping) (keys []string, dups []string) {
	seen := map[igd.Key]bool{}
	for _, m := range ms {
		if seen[m.Key()] {
			dups = append(dups, m.Key().String())
		}
		seen[m.Key()] = true
		keys = append(keys, m.Key().String())
	}
	slices.Sort(keys)
	return keys, dups
}

// diffKeys returns a "(-want +got)" description of two sorted key lists, or
// "" when they are equal.
func diffKeys(want, got []string) string {
	var d string
	for _, k := range want {
		if _, ok := slices.BinarySearch(got, k); !ok {
			d += "\n-" + k
		}
	}
	for _, k := range got {
		if _, ok := slices.BinarySearch(want, k); !ok {
			d += "\n+" + k
		}
	}
	return d
}

func TestListingNeverCrashesOldMiniupnpd(t *testing.T) {
	tests := []struct {
		name   string
		server string // Server header; "" is the fake's default (MiniUPnPd/2.3.1)
		tcp    []int
		udp    []int
		// grow is added between the first and the second read (TCP).
		grow []int
	}{
		{"140 TCP on adjacent ports", "", ports(20000, 140, 1), nil, nil},
		{"150 TCP and 150 UDP scattered", "", ports(1100, 150, 401), ports(2000, 150, 373), nil},
		{"129 UDP on adjacent ports, 3 TCP", "", ports(5, 3, 1), ports(40000, 129, 1), nil},
		{"50 mappings: one listing per protocol is safe", "", ports(20000, 40, 1), ports(20000, 10, 1), nil},
		{"200 TCP, then 60 more among them", "", ports(20000, 200, 2), nil, ports(20001, 60, 2)},
		{"200 TCP, then 120 more at one end", "", ports(20000, 200, 1), nil, ports(30000, 120, 1)},
		{"miniupnpd without a version", "MiniUPnPd", ports(20000, 140, 1), nil, nil},
		{"Debian's header", "Debian/12 UPnP/1.1 MiniUPnPd/2.3.1", ports(20000, 140, 1), nil, nil},
		{"2.3.3 is affected", "OpenWrt UPnP/1.1 MiniUPnPd/2.3.3", ports(20000, 140, 1), nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := fake.NewRouter(fake.RouterConfig{CrashOnLongList: true})
			srv := fake.NewServer(r, fake.ServerOptions{ServerHeader: tt.server})
			t.Cleanup(srv.Close)
			seed(r, igd.TCP, tt.tcp...)
			seed(r, igd.UDP, tt.udp...)
			c, err := igd.NewClient(igd.Config{RootDescURL: srv.RootDescURL})
			if err != nil {
				t.Fatal(err)
			}
			ctx := testContext(t)
			for read := range 2 {
				if read == 1 {
					seed(r, igd.TCP, tt.grow...)
				}
				walked := r.CallCount(fake.MethodGetGenericPortMappingEntry)
				got, err := igd.ReadTable(ctx, c)
				walked = r.CallCount(fake.MethodGetGenericPortMappingEntry) - walked
				if read == 1 && tt.grow == nil && walked != 0 {
					t.Errorf("read %d of an unchanged table made %d GetGenericPortMappingEntry calls, want none (the shape is known)", read, walked)
				}
				if r.Crashed() {
					t.Fatalf("read %d crashed the router (%v)", read, err)
				}
				if err != nil {
					t.Fatalf("read %d: ReadTable: %v", read, err)
				}
				want, _ := keysOf(r.Mappings())
				keys, dups := keysOf(got)
				if d := diffKeys(want, keys); d != "" || dups != nil {
					t.Errorf("read %d: ReadTable keys (-want +got):%s\nlisted twice: %v", read, d, dups)
				}
			}
			// A ranged listing of the middle of the table.
			rng := igd.PortRange{First: 20050, Last: 40050}
			got, err := c.ListPortMappings(ctx, igd.TCP, rng)
			if err != nil || r.Crashed() {
				t.Fatalf("ListPortMappings(TCP %v) = %v (crashed: %v)", rng, err, r.Crashed())
			}
			var want []igd.Mapping
			for _, m := range r.Mappings() {
				if m.Protocol == igd.TCP && m.ExternalPort >= rng.First && m.ExternalPort <= rng.Last {
					want = append(want, m)
				}
			}
			wantKeys, _ := keysOf(want)
			keys, dups := keysOf(got)
			if d := diffKeys(wantKeys, keys); d != "" || dups != nil {
				t.Errorf("ListPortMappings(TCP %v) keys (-want +got):%s\nlisted twice: %v", rng, d, dups)
			}
		})
	}
}

// A range at most upnp.SafeListWidth ports wide cannot hold the mappings that crash an old
// miniupnpd: it is listed in one call, with no walk, even on a large table
// the client has never read (the load balancer reads its keys this way).
func TestNarrowRangeListedAtOnceOnOldMiniupnpd(t *testing.T) {
	r := fake.NewRouter(fake.RouterConfig{CrashOnLongList: true})
	srv := fake.NewServer(r, fake.ServerOptions{})
	t.Cleanup(srv.Close)
	seed(r, igd.TCP, ports(20000, 300, 1)...)
	c, err := igd.NewClient(igd.Config{RootDescURL: srv.RootDescURL})
	if err != nil {
		t.Fatal(err)
	}
	ms, err := c.ListPortMappings(testContext(t), igd.TCP, igd.PortRange{First: 20010, Last: 20010 + upnp.SafeListWidth - 1})
	if err != nil || len(ms) != upnp.SafeListWidth || r.Crashed() {
		t.Fatalf("ListPortMappings = %d mappings, %v (crashed: %v); want %d", len(ms), err, r.Crashed(), upnp.SafeListWidth)
	}
	if n := r.CallCount(fake.MethodListPortMappings); n != 1 {
		t.Errorf("%d GetListOfPortMappings calls, want 1", n)
	}
	if n := r.CallCount(fake.MethodGetGenericPortMappingEntry); n != 0 {
		t.Errorf("%d GetGenericPortMappingEntry calls, want none", n)
	}
}

// A fixed miniupnpd (2.3.4 and later) and other daemons are listed a whole
// protocol at a time.
func TestListingFixedMiniupnpdInOneCallPerProtocol(t *testing.T) {
	for _, server := range []string{"OpenWrt/23.05 UPnP/1.1 MiniUPnPd/2.3.4", "Linux UPnP/1.1 MiniUPnPd/2.3.7", "Router UPnP/1.0 SomeOtherDaemon/1.0"} {
		t.Run(server, func(t *testing.T) {
			r := fake.NewRouter(fake.RouterConfig{})
			srv := fake.NewServer(r, fake.ServerOptions{ServerHeader: server})
			t.Cleanup(srv.Close)
			seed(r, igd.TCP, ports(20000, 300, 1)...)
			c, err := igd.NewClient(igd.Config{RootDescURL: srv.RootDescURL})
			if err != nil {
				t.Fatal(err)
			}
			ms, err := igd.ReadTable(testContext(t), c)
			if err != nil || len(ms) != 300 {
				t.Fatalf("ReadTable = %d mappings, %v; want 300", len(ms), err)
			}
			if n, w := r.CallCount(fake.MethodListPortMappings), 2; n != w {
				t.Errorf("%d GetListOfPortMappings calls, want %d", n, w)
			}
			if n := r.CallCount(fake.MethodGetGenericPortMappingEntry); n != 0 {
				t.Errorf("%d GetGenericPortMappingEntry calls, want none", n)
			}
		})
	}
}

func TestGatewayNamesTheServer(t *testing.T) {
	r := fake.NewRouter(fake.RouterConfig{})
	srv := fake.NewServer(r, fake.ServerOptions{ServerHeader: "Debian/12 UPnP/1.1 MiniUPnPd/2.3.1"})
	t.Cleanup(srv.Close)
	c, err := igd.NewClient(igd.Config{RootDescURL: srv.RootDescURL})
	if err != nil {
		t.Fatal(err)
	}
	gw, err := c.Discover(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	if want := "Debian/12 UPnP/1.1 MiniUPnPd/2.3.1"; gw.Server != want {
		t.Errorf("Gateway.Server = %q, want %q", gw.Server, want)
	}
}

// newIGD1 starts a fake IGD:1 router (no GetListOfPortMappings: every read
// walks the table) holding n TCP mappings, added in port order (the highest
// port is the newest, entry 0 of the walk), and a client of it.
func newIGD1(t *testing.T, n int) (*fake.Router, *fake.Server, *igd.UPnPClient) {
	t.Helper()
	r := fake.NewRouter(fake.RouterConfig{})
	srv := fake.NewServer(r, fake.ServerOptions{Service: fake.WANIPConnection1})
	t.Cleanup(srv.Close)
	seed(r, igd.TCP, ports(20000, n, 1)...)
	c, err := igd.NewClient(igd.Config{RootDescURL: srv.RootDescURL})
	if err != nil {
		t.Fatal(err)
	}
	return r, srv, c
}

// assertTable fails t unless got holds every key of r's table once.
func assertTable(t *testing.T, r *fake.Router, got []igd.Mapping) {
	t.Helper()
	wantKeys, _ := keysOf(r.Mappings())
	keys, dups := keysOf(got)
	if d := diffKeys(wantKeys, keys); d != "" || dups != nil {
		t.Errorf("ReadTable keys (-want +got):%s\nlisted twice: %v", d, dups)
	}
}

// missing returns the keys of want (other than those in gone) that got lacks.
func missing(want, got []igd.Mapping, gone map[igd.Key]bool) []string {
	have := map[igd.Key]bool{}
	for _, m := range got {
		have[m.Key()] = true
	}
	var out []string
	for _, m := range want {
		if !have[m.Key()] && !gone[m.Key()] {
			out = append(out, m.Key().String())
		}
	}
	return out
}

// Another host deletes a mapping in the middle of the walk: every later
// entry's index shifts down by one, and a naive walk skips a row.
func TestWalkSurvivesAnotherHostDeleting(t *testing.T) {
	for _, at := range []int{3, 8, 15, 25} {
		t.Run(fmt.Sprintf("delete at call %d", at), func(t *testing.T) {
			r, _, c := newIGD1(t, 30)
			newest := igd.Key{Protocol: igd.TCP, ExternalPort: 20029}
			other := r.Client(netip.MustParseAddr("192.0.2.99"))
			nth := fake.Nth(at)
			r.Intercept(fake.RouterHooks{GetGenericPortMappingEntry: func(ctx context.Context, _ netip.Addr, i int, next fake.EntryFunc) (igd.Mapping, error) {
				if nth() {
					if err := other.DeletePortMapping(ctx, newest.Protocol, newest.ExternalPort); err != nil {
						return igd.Mapping{}, err
					}
				}
				return next(ctx, i)
			}})
			got, err := igd.ReadTable(testContext(t), c)
			if err != nil {
				t.Fatal(err)
			}
			assertTable(t, r, got)
		})
	}
}

// Another host deletes two mappings during the walk and adds them again in
// their old order: the table's size and both ends are as before, while the
// adds at the front (where miniupnpd and the fake put new entries) and the
// deletions moved rows under the walk. The walk must notice (it read an
// entry twice) and walk again, not return the table without the row it
// skipped.
func TestWalkSeesADeleteAndReAddBehindIt(t *testing.T) {
	r, _, c := newIGD1(t, 30)
	other := r.Client(netip.MustParseAddr("192.0.2.99"))
	var once sync.Once
	r.Intercept(fake.RouterHooks{GetGenericPortMappingEntry: func(ctx context.Context, _ netip.Addr, i int, next fake.EntryFunc) (igd.Mapping, error) {
		// The size search never reads index 10 of 30; the walk does.
		m, err := next(ctx, i)
		if err != nil || i != 10 {
			return m, err
		}
		var errs []error
		once.Do(func() {
			// Re-add an older mapping, then the newest: the first
			// entry is as before.
			for _, p := range []uint16{20005, 20029} {
				errs = append(errs, other.DeletePortMapping(ctx, igd.TCP, p))
				_, err := other.AddPortMapping(ctx, quirkMapping(igd.TCP, p))
				errs = append(errs, err)
			}
		})
		return m, errors.Join(errs...)
	}})
	got, err := igd.ReadTable(testContext(t), c)
	if err != nil {
		t.Fatal(err)
	}
	assertTable(t, r, got)
}

// This process deletes mappings through the same client while it walks the
// table (the load balancer's workers do): the walk must see every mapping
// that is not deleted.
func TestWalkSurvivesOwnConcurrentDeletes(t *testing.T) {
	for round := range 5 {
		t.Run(fmt.Sprintf("round %d", round), func(t *testing.T) {
			r, _, c := newIGD1(t, 40)
			r.Intercept(slowWalk)
			ctx := testContext(t)
			before := r.Mappings()
			gone := map[igd.Key]bool{}
			for _, p := range ports(20039, 10, -3) {
				gone[igd.Key{Protocol: igd.TCP, ExternalPort: uint16(p)}] = true
			}
			done := make(chan error, 1)
			go func() {
				var errs []error
				for k := range gone {
					errs = append(errs, c.DeletePortMapping(ctx, k.Protocol, k.ExternalPort))
					time.Sleep(time.Millisecond)
				}
				done <- errors.Join(errs...)
			}()
			got, err := igd.ReadTable(ctx, c)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if err != nil {
				t.Fatal(err)
			}
			if m := missing(before, got, gone); m != nil {
				t.Errorf("ReadTable skipped mappings nobody deleted: %v", m)
			}
		})
	}
}

// Another client keeps deleting and adding while this one walks: the walk
// either returns every mapping nobody touched, or fails; never a partial
// table.
func TestWalkNeverReturnsAPartialTable(t *testing.T) {
	r, srv, c := newIGD1(t, 40)
	r.Intercept(slowWalk)
	ctx := testContext(t)
	before := r.Mappings()
	other, err := igd.NewClient(igd.Config{RootDescURL: srv.RootDescURL})
	if err != nil {
		t.Fatal(err)
	}
	churn := map[igd.Key]bool{}
	for _, p := range ports(20000, 40, 4) {
		churn[igd.Key{Protocol: igd.TCP, ExternalPort: uint16(p)}] = true
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			p := uint16(20000 + (i%10)*4)
			_ = other.DeletePortMapping(ctx, igd.TCP, p)
			_, _ = other.AddPortMapping(ctx, quirkMapping(igd.TCP, p))
		}
	}()
	defer func() { close(stop); <-done }()
	for range 5 {
		got, err := igd.ReadTable(ctx, c)
		if err != nil {
			t.Logf("ReadTable failed (allowed while the table churns): %v", err)
			continue
		}
		if m := missing(before, got, churn); m != nil {
			t.Errorf("ReadTable returned a partial table: it lacks %v", m)
		}
	}
}

// miniupnpd 2.3.6 (nftables) answers NewInternalPort 0 in
// GetListOfPortMappings and GetSpecificPortMappingEntry (miniupnpd issue
// 768): every read must accept it and pass it on as 0, "not said".
func TestInternalPortZeroIsReadAsUnknown(t *testing.T) {
	for _, svc := range []fake.UPnPService{fake.WANIPConnection2, fake.WANIPConnection1} {
		t.Run(string(svc), func(t *testing.T) {
			r := fake.NewRouter(fake.RouterConfig{ReportInternalPortZero: true})
			srv := fake.NewServer(r, fake.ServerOptions{Service: svc, ServerHeader: "OpenWrt UPnP/1.1 MiniUPnPd/2.3.6"})
			t.Cleanup(srv.Close)
			c, err := igd.NewClient(igd.Config{RootDescURL: srv.RootDescURL})
			if err != nil {
				t.Fatal(err)
			}
			ctx := testContext(t)
			m := quirkMapping(igd.TCP, 8080)
			if _, err := c.AddPortMapping(ctx, m); err != nil {
				t.Fatal(err)
			}
			got, err := c.GetPortMapping(ctx, igd.TCP, 8080)
			if err != nil || got.InternalPort != 0 || got.InternalClient != m.InternalClient || got.Description != m.Description {
				t.Errorf("GetPortMapping = %v, %v; want %v with InternalPort 0", got, err, m)
			}
			list, err := igd.ReadTable(ctx, c)
			if err != nil || len(list) != 1 || list[0].InternalPort != 0 || list[0].Key() != m.Key() {
				t.Errorf("ReadTable = %v, %v; want [%v] with InternalPort 0", list, err, m.Key())
			}
			// Re-adding what the router reports unchanged is a renewal: the
			// stored internal port is untouched.
			if _, err := c.AddPortMapping(ctx, m); err != nil {
				t.Fatal(err)
			}
			if stored := r.Mappings(); len(stored) != 1 || stored[0].InternalPort != m.InternalPort {
				t.Errorf("router stores %v, want internal port %d kept", stored, m.InternalPort)
			}
		})
	}
}

// slowWalk delays every step of a walk of the table, so that other calls
// interleave with it as on a real router.
var slowWalk = fake.RouterHooks{GetGenericPortMappingEntry: func(ctx context.Context, _ netip.Addr, i int, next fake.EntryFunc) (igd.Mapping, error) {
	if err := fake.Sleep(ctx, 200*time.Microsecond); err != nil {
		return igd.Mapping{}, err
	}
	return next(ctx, i)
}}

// A router whose walk lists one entry twice at the same indexes while
// nothing changes its table (the quirk "router repeating one entry", known
// from GetListOfPortMappings, on GetGenericPortMappingEntry) is read:
// ReadTable returns the table with the duplicate dropped, not an error on
// every walk.
func TestWalkReturnsTheTableOfARouterThatListsOneEntryTwice(t *testing.T) {
	r, _, c := newIGD1(t, 10)
	r.Intercept(fake.RouterHooks{GetGenericPortMappingEntry: func(ctx context.Context, _ netip.Addr, i int, next fake.EntryFunc) (igd.Mapping, error) {
		// Index 6 repeats index 5; later ones shift by one.
		switch {
		case i <= 5:
			return next(ctx, i)
		default:
			return next(ctx, i-1)
		}
	}})
	got, err := igd.ReadTable(testContext(t), c)
	if err != nil {
		t.Fatalf("ReadTable on a router that lists one entry twice, table unchanged: %v", err)
	}
	if len(got) != 10 {
		t.Errorf("ReadTable = %d mappings, want 10", len(got))
	}
}

// A walk that reads one entry twice is taken for the router's own
// repetition only when the router lists it at both indexes again now.
// Another LAN host can make two walks of one size read an entry twice at
// the same indexes: during each walk it adds a mapping (at the front,
// newest first: the walk reads the entry at index 9 again at index 10) and
// deletes it further on (the front row goes, rows move up: the walk skips
// one). Size, first and last entry are as before the walk, yet the table
// ReadTable returns is whole, or ReadTable fails; never a partial table.
func TestWalkNeverTakesChurnThatMimicsARepeatedEntryForTheRoutersOwn(t *testing.T) {
	r, _, c := newIGD1(t, 30)
	other := r.Client(netip.MustParseAddr("192.0.2.99"))
	x := quirkMapping(igd.TCP, 20500)
	x.InternalClient = netip.MustParseAddr("192.0.2.99")
	var mu sync.Mutex
	prev, churned := -1, 0
	r.Intercept(fake.RouterHooks{GetGenericPortMappingEntry: func(ctx context.Context, _ netip.Addr, i int, next fake.EntryFunc) (igd.Mapping, error) {
		mu.Lock()
		walking := i == prev+1 // a walk reads 0, 1, 2, ...; the size search does not
		prev = i
		mu.Unlock()
		if walking && churned < 4 {
			switch i {
			case 10:
				if _, err := other.AddPortMapping(ctx, x); err != nil {
					return igd.Mapping{}, err
				}
				churned++
			case 20:
				if err := other.DeletePortMapping(ctx, x.Protocol, x.ExternalPort); err != nil {
					return igd.Mapping{}, err
				}
				churned++
			}
		}
		return next(ctx, i)
	}})
	got, err := igd.ReadTable(testContext(t), c)
	if err != nil {
		return // walked again and gave up: no partial table, fine
	}
	assertTable(t, r, got)
	if len(got) != 30 {
		t.Errorf("ReadTable returned %d mappings of a table that held 30 before and after each walk (%d adds/deletes by another host): a partial table", len(got), churned)
	}
}
