package pcp_test

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/pcp"
)

// With FallBack, a mapping PCP made is still deleted when the router no
// longer takes a PCP request (nothing listens on its PCP port, or it now
// refuses THIRD_PARTY): through UPnP, on the caller's read, as AddFor then
// writes. Without it the delete fails until the mapping's lease ends: a
// Service is not deleted, nor moved off a node that went down, for up to a
// lease (a day with permanent leases). Without FallBack the error is
// returned.
func TestBackendDeleteFallBack(t *testing.T) {
	ctx := context.Background()
	m := igd.Mapping{Protocol: igd.TCP, ExternalPort: 8080, InternalClient: nodeA, InternalPort: 30080,
		Lease: time.Hour, Enabled: true}
	for _, tc := range []struct {
		name     string
		fallBack bool
		wantErr  error
	}{
		{name: "no PCP server, fall back", fallBack: true},
		{name: "no PCP server", wantErr: syscall.ECONNREFUSED},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newBackendEnv(t, true)
			b := e.backendWith(t, pcp.BackendConfig{Secret: backendSecret, FallBack: tc.fallBack})
			if _, err := b.AddFor(ctx, "c/default/web", m); err != nil {
				t.Fatal(err)
			}
			read, err := b.GetPortMapping(ctx, igd.TCP, 8080)
			if err != nil || !b.OwnedBy("c/default/web", read) {
				t.Fatalf("read %+v, %v: want the mapping AddFor made", read, err)
			}
			e.server.Close()
			err = b.DeleteFor(ctx, "c/default/web", read)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("DeleteFor = %v, want %v", err, tc.wantErr)
			}
			if gone := len(e.router.Mappings()) == 0; gone != (tc.wantErr == nil) {
				t.Errorf("table after DeleteFor: %v", e.router.Mappings())
			}
		})
	}
}
