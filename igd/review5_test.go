package igd_test

import (
	"context"
	"net/netip"
	"sync"
	"testing"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
)

// review5: walkHeld accepts a duplicate seen at the same indexes in two
// consecutive walks of one size as the router's own repetition. Another
// LAN host can produce exactly that with churn that leaves the table as it
// was: during each walk it adds a mapping (at the front, newest first: the
// walk reads the entry at index 9 again at index 10) and deletes it again
// further on (the front row goes, rows move up: the walk skips one). Size,
// first and last entry are as before the walk; the duplicate is at indexes
// 9 and 10 both times, so the second walk is "stable" and ReadTable returns
// the table without the row it skipped, a partial table.
func TestReview5ChurnMimicsAStableDuplicateAndHidesARow(t *testing.T) {
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
