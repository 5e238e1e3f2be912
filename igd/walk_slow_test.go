package igd_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
)

// One entry read that passes Config.CallTimeout does not fail a walk: on a
// router with a big table every read is slow, and a walk of n entries would
// fail n times as often as one call. The slow entry is read once more; the
// same entry timing out twice in a row fails the walk, which never returns
// a partial table.
func TestWalkRereadsOneSlowEntry(t *testing.T) {
	// Entry 6 of a 10-entry table: the size search before the walk reads
	// entries 0, 1, 2, 4, 8, 16, 12, 10 and 9, never 6, so only the walk
	// reads it.
	const n, slowIndex = 10, 6
	for _, tt := range []struct {
		slow    int // how many reads of entry 6 in a row never answer
		wantErr bool
	}{
		{slow: 1},
		{slow: 2, wantErr: true},
	} {
		t.Run(fmt.Sprintf("%d slow reads", tt.slow), func(t *testing.T) {
			r := fake.NewRouter(fake.RouterConfig{})
			srv := fake.NewServer(r, fake.ServerOptions{Service: fake.WANIPConnection1})
			t.Cleanup(srv.Close)
			seed(r, igd.TCP, ports(20000, n, 1)...)
			c, err := igd.NewClient(igd.Config{RootDescURL: srv.RootDescURL})
			if err != nil {
				t.Fatal(err)
			}
			release := make(chan struct{})
			t.Cleanup(func() { close(release) })
			var mu sync.Mutex
			reads := 0 // of slowIndex
			r.Intercept(fake.RouterHooks{GetGenericPortMappingEntry: func(ctx context.Context, _ netip.Addr, i int, next fake.EntryFunc) (igd.Mapping, error) {
				if i == slowIndex {
					mu.Lock()
					reads++
					slow := reads <= tt.slow
					mu.Unlock()
					if slow {
						// Held until the client gives up on the call.
						if err := fake.Hold(ctx, release); err != nil {
							return igd.Mapping{}, err
						}
					}
				}
				return next(ctx, i)
			}})

			got, err := igd.ReadTable(testContext(t), c)
			mu.Lock()
			defer mu.Unlock()
			if tt.wantErr {
				if !errors.Is(err, context.DeadlineExceeded) || got != nil {
					t.Fatalf("ReadTable() = %d mappings, %v; want no table and an error matching context.DeadlineExceeded", len(got), err)
				}
				if reads != 2 {
					t.Errorf("entry %d read %d times, want 2 (once more after the first timeout)", slowIndex, reads)
				}
				return
			}
			if err != nil {
				t.Fatalf("ReadTable() with one slow read: %v", err)
			}
			wantKeys, _ := keysOf(r.Mappings())
			keys, dups := keysOf(got)
			if d := diffKeys(wantKeys, keys); d != "" || dups != nil {
				t.Errorf("ReadTable keys (-want +got):%s\nlisted twice: %v", d, dups)
			}
			if reads != 2 {
				t.Errorf("entry %d read %d times, want 2", slowIndex, reads)
			}
		})
	}
}
