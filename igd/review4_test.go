package igd_test

import (
	"context"
	"net/netip"
	"testing"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
)

// review4: a router whose walk stably lists one entry twice (the
// GetListOfPortMappings quirk "router repeating one entry" exists for the
// list action; nothing changes the table here) now fails every ReadTable,
// where before the walk returned the table with the duplicate dropped.
func TestReview4WalkOfAStableDuplicateFailsForever(t *testing.T) {
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
